"""Generate (or check) the committed Python gRPC modules from `api.proto`, without make.

Why committed: the image and the OCI-hook path must not need grpcio-tools at run time. Why a check:
a hand edit of the proto without regenerating would silently change nothing on the wire; the unit
suite runs `check()` so the two cannot drift. Run `python -m sro.node.deviceplugin.protogen` to
regenerate, `--check` to verify (exit status 1 and the differing file names when they differ).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE / "api.proto"
GENERATED = ("api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi")
# protoc runs from the directory that holds `sro/`, so the generated modules import each other as
# `sro.node.deviceplugin.api_pb2` and work from anywhere.
SOURCE_ROOT = HERE.parents[2]


def generate(out_dir: Path) -> None:
    """Write the generated modules for `api.proto` into `out_dir` (mirroring the package path)."""
    from grpc_tools import protoc  # dev dependency, imported only here

    rel = PROTO.relative_to(SOURCE_ROOT)
    args = [
        "grpc_tools.protoc",
        f"-I{SOURCE_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(rel),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed for {PROTO}")


def differences() -> list[str]:
    """Names of the committed generated files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / PROTO.parent.relative_to(SOURCE_ROOT)
        return [
            name
            for name in GENERATED
            if not (HERE / name).exists() or (HERE / name).read_bytes() != (fresh / name).read_bytes()
        ]


def write() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / PROTO.parent.relative_to(SOURCE_ROOT)
        for name in GENERATED:
            (HERE / name).write_bytes((fresh / name).read_bytes())


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = differences()
        if stale:
            print(f"stale generated files (run python -m sro.node.deviceplugin.protogen): {stale}")
            return 1
        print("generated files match api.proto")
        return 0
    write()
    print(f"wrote {', '.join(GENERATED)} in {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
