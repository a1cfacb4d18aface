"""Compiling the simulated NVIDIA driver's native parts: `libnvidia-ml.so.1` and `nvidia-smi`.

Why compiled C and not a Python stand-in: the clients that must work against the simulated NVIDIA
driver are the real ones (nvidia-ml-py's ctypes bindings, NVIDIA's tools), and they load
`libnvidia-ml.so.1` by its soname through the dynamic loader. Only a real shared object with NVML's
C ABI answers them. The sources live in `native/simnvml/` of the checkout; they are compiled here,
on the machine that builds images (never on a node), with the system's gcc, and the result is
cached by the sources' hash so an unchanged checkout costs one hash and no compiler run.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
NATIVE_DIR = PROJECT_ROOT / "native" / "simnvml"
LIBRARY_NAME = "libnvidia-ml.so.1"
SMI_NAME = "nvidia-smi"
STAMP_NAME = ".simnvml-build"
SOURCES = ("nvml.h", "libnvidia-ml.c", "nvidia-smi.c")


class NativeBuildError(RuntimeError):
    """The compiler is missing or refused the sources (its output is in the message)."""


@dataclass(frozen=True)
class SimNvmlBuild:
    library: Path  # <out>/libnvidia-ml.so.1 (SONAME libnvidia-ml.so.1)
    smi: Path | None  # <out>/nvidia-smi, None while the checkout has no nvidia-smi.c


def sources_digest(native_dir: Path = NATIVE_DIR) -> str:
    """sha256 over the present sources' names and bytes: the cache key of a build."""
    h = hashlib.sha256()
    for name in SOURCES:
        path = native_dir / name
        if path.exists():
            h.update(name.encode() + b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def library_command(native_dir: Path, out_dir: Path) -> list[str]:
    return [
        "gcc",
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{native_dir}",
        f"-Wl,-soname,{LIBRARY_NAME}",
        "-o",
        str(out_dir / LIBRARY_NAME),
        str(native_dir / "libnvidia-ml.c"),
        "-lpthread",
    ]


def smi_command(native_dir: Path, out_dir: Path) -> list[str]:
    # $ORIGIN/../lib/x86_64-linux-gnu: the driver root's layout (<root>/usr/bin next to
    # <root>/usr/lib/x86_64-linux-gnu); $ORIGIN: the build directory and the image's share dir.
    return [
        "gcc",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{native_dir}",
        "-o",
        str(out_dir / SMI_NAME),
        str(native_dir / "nvidia-smi.c"),
        f"-L{out_dir}",
        f"-l:{LIBRARY_NAME}",
        "-Wl,-rpath,$ORIGIN/../lib/x86_64-linux-gnu:$ORIGIN",
    ]


def _run(cmd: list[str]) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise NativeBuildError(
            "gcc is needed to build the simulated NVML library (apt-get install gcc)"
        ) from e
    if proc.returncode != 0:
        raise NativeBuildError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}".rstrip())


def build_simnvml(out_dir: Path, native_dir: Path = NATIVE_DIR) -> SimNvmlBuild:
    """Compile the library (and nvidia-smi when its source exists) into `out_dir`, unless the stamp
    there says the same sources were already compiled into it."""
    has_smi = (native_dir / "nvidia-smi.c").exists()
    result = SimNvmlBuild(out_dir / LIBRARY_NAME, out_dir / SMI_NAME if has_smi else None)
    digest = sources_digest(native_dir)
    stamp = out_dir / STAMP_NAME
    outputs = [result.library] + ([result.smi] if result.smi else [])
    if stamp.exists() and stamp.read_text().strip() == digest and all(p.exists() for p in outputs):
        return result
    if shutil.which("gcc") is None:
        raise NativeBuildError("gcc is needed to build the simulated NVML library (apt-get install gcc)")
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    _run(library_command(native_dir, out_dir))
    if has_smi:
        _run(smi_command(native_dir, out_dir))
    stamp.write_text(digest + "\n")
    return result


if __name__ == "__main__":  # `python3 -m sro.local.native OUT_DIR`: the Containerfile's build stage
    import sys

    build_simnvml(Path(sys.argv[1]))
