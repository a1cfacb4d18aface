"""`python -m sro` runs the same CLI as the `sro` console script."""

from sro.cli import main

main()
