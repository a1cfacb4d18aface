"""The one rule for rewriting golden files: only `SRO_UPDATE_GOLDEN=1` does.

Why one place: each golden test read the variable its own way, and one took any non-empty value, so
`SRO_UPDATE_GOLDEN=0` rewrote that test's goldens (and made it pass whatever the code produced).
"""

from __future__ import annotations

import os

VARIABLE = "SRO_UPDATE_GOLDEN"


def update_goldens() -> bool:
    """True only when SRO_UPDATE_GOLDEN is exactly `1`: then golden tests rewrite their files."""
    return os.environ.get(VARIABLE) == "1"
