"""Generate (or check) the committed Python gRPC modules of a node agent's kubelet `.proto`.

Why committed: the image and the OCI-hook path must not need grpcio-tools at run time. Why a check:
a hand edit of a proto without regenerating would silently change nothing on the wire; the unit
suite runs `differences()` so the two cannot drift. Why here, in `sro.node`: the device plugin
speaks the kubelet's device-plugin API (`deviceplugin/api.proto`), and the device plugin and the
exporter both ask its pod-resources API (`sro/host/podresources/podresources.proto`, in `host/`
because node agents never import each other). `python -m sro.node.protogen [--check]` regenerates
(or checks) every proto in `PROTOS`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

# protoc runs from the directory that holds `sro/`, so the generated modules import each other as
# `sro.<package path>.<name>_pb2` and work from anywhere.
SOURCE_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEVICE_PLUGIN_PROTO = HERE / "deviceplugin" / "api.proto"
POD_RESOURCES_PROTO = SOURCE_ROOT / "sro" / "host" / "podresources" / "podresources.proto"
PROTOS = (DEVICE_PLUGIN_PROTO, POD_RESOURCES_PROTO)


def generated_names(proto: Path) -> tuple[str, str, str]:
    stem = proto.stem
    return (f"{stem}_pb2.py", f"{stem}_pb2_grpc.py", f"{stem}_pb2.pyi")


def generate(proto: Path, out_dir: Path) -> None:
    """Write the generated modules for `proto` into `out_dir` (mirroring the package path)."""
    from grpc_tools import protoc  # dev dependency, imported only here

    args = [
        "grpc_tools.protoc",
        f"-I{SOURCE_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(proto.relative_to(SOURCE_ROOT)),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed for {proto}")


def _fresh(proto: Path, tmp: str) -> Path:
    generate(proto, Path(tmp))
    return Path(tmp) / proto.parent.relative_to(SOURCE_ROOT)


def differences(proto: Path) -> list[str]:
    """Names of the committed generated files next to `proto` that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = _fresh(proto, tmp)
        here = proto.parent
        return [
            name
            for name in generated_names(proto)
            if not (here / name).exists() or (here / name).read_bytes() != (fresh / name).read_bytes()
        ]


def write(proto: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = _fresh(proto, tmp)
        for name in generated_names(proto):
            (proto.parent / name).write_bytes((fresh / name).read_bytes())


def main(argv: list[str]) -> int:
    """Regenerate every node proto, or with `--check` exit 1 when any generated file is stale."""
    status = 0
    for proto in PROTOS:
        if "--check" in argv:
            stale = differences(proto)
            if stale:
                print(
                    f"stale generated files next to {proto.name} (run python -m sro.node.protogen): {stale}"
                )
                status = 1
            else:
                print(f"generated files match {proto.name}")
        else:
            write(proto)
            print(f"wrote {', '.join(generated_names(proto))} in {proto.parent}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
