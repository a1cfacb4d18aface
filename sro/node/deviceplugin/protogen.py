"""Generate (or check) the committed Python gRPC modules from `api.proto`, without make.

Run `python -m sro.node.deviceplugin.protogen` to regenerate, `--check` to verify (exit status 1 and
the differing file names when they differ); a unit test runs the check. The work is done by
`sro.node.protogen`, shared with the exporter's pod-resources proto.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sro.node import protogen

HERE = Path(__file__).resolve().parent
PROTO = HERE / "api.proto"
GENERATED = protogen.generated_names(PROTO)


def differences() -> list[str]:
    """Names of the committed generated files that differ from a fresh generation."""
    return protogen.differences(PROTO)


def write() -> None:
    protogen.write(PROTO)


if __name__ == "__main__":
    sys.exit(protogen.main(sys.argv[1:], PROTO, __spec__.name if __spec__ else __name__))
