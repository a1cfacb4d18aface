"""Container images without Docker or a registry: pause, busybox and sro, imported into containerd.

- pause: the sandbox image, compiled (static) from the pause.c that Debian's kubernetes source carries.
- busybox: Debian's busybox-static, for test pods.
- sro-glibc: busybox on the machine's Debian glibc (libc6's shared objects, ld.so, ldconfig), for test
  pods that run the driver's dynamically linked tools, as CUDA images carry glibc.
- sro: a Debian root filesystem (mmdebstrap, from the machine's own apt sources) with Debian's python3
  and sro's dependencies from a wheelhouse (the base layer, cached by the dependency list), plus a
  thin layer with this checkout's `sro` package and one with the simulated NVIDIA driver's compiled
  library and nvidia-smi (native/simnvml). Only the thin layers are rebuilt when the code changes,
  and nothing is rebuilt or re-imported when neither changed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import py_compile
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sro import __version__
from sro.api.names import IMAGE, NAMESPACE
from sro.console.progress import Progress
from sro.devices.simulated_nvidia import DEFAULT_NATIVE_DIR
from sro.local.layout import BUSYBOX_IMAGE, GLIBC_IMAGE, PAUSE_IMAGE, Layout
from sro.local.native import build_simnvml, sources_digest
from sro.local.ocilayout import ImageConfig, layer_from_files, write_archive
from sro.local.stalepods import roll_stale

if TYPE_CHECKING:
    from sro.local.cluster import LocalCluster

PROJECT_ROOT = Path(__file__).resolve().parents[2]
IMAGE_PYTHON = "python3.11"
SIMNVML_SHARE = str(DEFAULT_NATIVE_DIR).lstrip("/")  # where the simulated NVIDIA driver finds them


class ImageError(RuntimeError):
    pass


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise ImageError(f"`{' '.join(argv[:4])} ...` failed (exit {out.returncode}):\n{tail}")
    return out  # type: ignore[no-any-return]


def _ctr(layout: Layout, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(["ctr", "--address", str(layout.containerd_socket), "-n", "k8s.io", *args])


def image_digests(layout: Layout) -> dict[str, str]:
    """ref -> manifest digest of the images in the cluster's containerd."""
    out = _ctr(layout, "images", "ls")
    rows = [line.split() for line in out.stdout.splitlines()[1:] if line.strip()]
    return {row[0]: row[2] for row in rows if len(row) > 2}


def image_id(layout: Layout, ref: str) -> str | None:
    """The image ID (its config's digest) `ref` names in containerd — what a pod's status shows as
    `imageID` — or None when containerd has no such image."""
    manifest = image_digests(layout).get(ref)
    if manifest is None:
        return None
    config = json.loads(_ctr(layout, "content", "get", manifest).stdout).get("config", {})
    return config.get("digest")  # type: ignore[no-any-return]


def _import(layout: Layout, archive: Path, ref: str) -> str:
    _ctr(layout, "images", "import", "--no-unpack=false", str(archive))
    digest = image_digests(layout).get(ref)
    if digest is None:
        raise ImageError(f"containerd did not list {ref} after importing {archive}")
    return digest


def _ensure(layout: Layout, ref: str, key: str, build: Callable[[Path], Path], progress: Progress) -> bool:
    """Import `ref` unless containerd already has the build recorded for `key`; returns whether it did."""
    cache = layout.image_cache
    cache.mkdir(parents=True, exist_ok=True)
    stamp = cache / (ref.replace("/", "_").replace(":", "_") + ".json")
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        recorded = {}
    if recorded.get("key") == key and image_digests(layout).get(ref) == recorded.get("digest"):
        return False
    archive = cache / (stamp.stem + ".tar")
    if recorded.get("key") != key or not archive.exists():
        progress(f"Building image {ref}")
        build(archive)
    progress(f"Importing {ref} into containerd")
    digest = _import(layout, archive, ref)
    stamp.write_text(json.dumps({"key": key, "digest": digest}))
    return True


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:16]


def pause_image(layout: Layout, pause_c: Path, progress: Progress) -> None:
    def build(archive: Path) -> Path:
        with tempfile.TemporaryDirectory() as tmp:
            binary = Path(tmp) / "pause"
            _run(["gcc", "-Os", "-static", "-o", str(binary), str(pause_c)])
            _run(["strip", str(binary)])
            layer = layer_from_files(Path(tmp) / "layer.tar", {"pause": binary})
            return write_archive(archive, PAUSE_IMAGE, [layer], ImageConfig(entrypoint=["/pause"]))

    _ensure(layout, PAUSE_IMAGE, _sha(pause_c.read_bytes()), build, progress)


def busybox_image(layout: Layout, progress: Progress) -> None:
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        raise ImageError("busybox-static is missing: apt-get install busybox-static")

    def build(archive: Path) -> Path:
        links = _busybox_links(busybox)
        with tempfile.TemporaryDirectory() as tmp:
            layer = layer_from_files(Path(tmp) / "layer.tar", {"bin/busybox": busybox}, links)
            return write_archive(archive, BUSYBOX_IMAGE, [layer], ImageConfig(cmd=["/bin/sh"]))

    _ensure(layout, BUSYBOX_IMAGE, _sha(busybox.read_bytes()), build, progress)


def _busybox_links(busybox: Path) -> dict[str, str]:
    applets = _run([str(busybox), "--list-full"]).stdout.split()
    return {path: "/bin/busybox" for path in applets if path != "bin/busybox"}


def glibc_files(listed: list[str], root: Path = Path("/")) -> tuple[dict[str, Path], dict[str, str]]:
    """The files of `dpkg -L libc6 libc-bin` a glibc program needs: shared objects, ld.so, ld.so.conf(.d)
    and ldconfig (an image's own linker cache, as CUDA images have), as {path in image: host file} and
    {symlink: target}. The gconv modules (iconv's converters) and documentation stay out."""
    files: dict[str, Path] = {}
    links: dict[str, str] = {}
    for line in listed:
        name = line.lstrip("/")
        # sbin/ldconfig.real: Ubuntu's sbin/ldconfig is a shell wrapper that execs it
        ldconfig = name in ("sbin/ldconfig", "sbin/ldconfig.real")
        wanted = ldconfig or name.startswith("etc/ld.so.conf") or ".so" in Path(name).name
        if not line.startswith("/") or not wanted or name.startswith("usr/share/") or "/gconv/" in line:
            continue
        path = root / name
        if path.is_symlink():
            links[name] = str(path.readlink())
        elif path.is_file():
            files[name] = path
    return files, links


def glibc_layer(out: Path, busybox: Path) -> Path:
    files, links = glibc_files(_run(["dpkg", "-L", "libc6", "libc-bin"]).stdout.splitlines())
    applets = {p: t for p, t in _busybox_links(busybox).items() if p not in files and p not in links}
    return layer_from_files(out, {"bin/busybox": busybox, **files}, {**applets, **links})


def glibc_image(layout: Layout, progress: Progress) -> None:
    """`GLIBC_IMAGE`: busybox on Debian's glibc, for test pods that run the driver's nvidia-smi."""
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        raise ImageError("busybox-static is missing: apt-get install busybox-static")
    versions = _run(["dpkg-query", "-W", "libc6", "libc-bin"]).stdout

    def build(archive: Path) -> Path:
        with tempfile.TemporaryDirectory() as tmp:
            layer = glibc_layer(Path(tmp) / "layer.tar", busybox)
            return write_archive(archive, GLIBC_IMAGE, [layer], ImageConfig(cmd=["/bin/sh"]))

    _ensure(layout, GLIBC_IMAGE, _sha(busybox.read_bytes(), versions.encode()), build, progress)


def ensure_base_images(cluster: LocalCluster, progress: Progress) -> None:
    from sro.local.kubebuild import cache_key

    pause_c = cluster.layout.kube_cache(cache_key()) / "src" / "pause.c"
    pause_image(cluster.layout, pause_c, progress)
    busybox_image(cluster.layout, progress)
    glibc_image(cluster.layout, progress)


# ---- the sro image ------------------------------------------------------------------------------


def runtime_dependencies() -> list[str]:
    return list(tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def apt_sources_file() -> Path:
    """The machine's own Debian sources (never a mirror name of ours)."""
    for f in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        text = f.read_text()
        if not f.name.startswith("sro-") and "Types: deb\n" in text and "debian" in text:
            return f
    if Path("/etc/apt/sources.list").exists():
        return Path("/etc/apt/sources.list")
    raise ImageError("no Debian apt sources found in /etc/apt to build the image's root filesystem")


# After pip: the dependencies' bytecode again, "unchecked-hash". Why: pip writes timestamp .pyc files,
# and the root filesystem's tar clamps every file's mtime to the build's start; each .py then looks
# newer than its .pyc, and every Python process in every pod (agents, validation pods, the operator)
# compiled click, yaml, grpc, kopf... again on each start (measured: 2,025 of the venv's 2,303 .pyc
# stale; `sro runtime install` spent 92 ms of its 300 ms compiling). The image is immutable: nothing
# needs comparing.
_COMPILE_DEPS = (
    f"/opt/sro/bin/python -m compileall -q -f -j 0 --invalidation-mode unchecked-hash "
    f"/opt/sro/lib/{IMAGE_PYTHON}/site-packages"
)


def _base_layer(layout: Layout, progress: Progress) -> Path:
    deps = runtime_dependencies()
    sources = apt_sources_file()
    key = _sha(json.dumps(deps).encode(), sources.read_bytes(), _COMPILE_DEPS.encode())
    base = layout.image_cache / f"sro-base-{key}.tar"
    if base.exists():
        return base
    for old in layout.image_cache.glob("sro-base-*.tar"):
        old.unlink()
    if shutil.which("mmdebstrap") is None:
        raise ImageError("mmdebstrap is missing: apt-get install mmdebstrap (or run ./scripts/setup-host)")
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp) / "wheels"
        progress(f"Collecting wheels for {len(deps)} dependencies")
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), *deps])
        progress("Building a Debian root filesystem with python3 (mmdebstrap, about a minute)")
        install = (
            f"{IMAGE_PYTHON} -m venv /opt/sro && /opt/sro/bin/pip install -q --no-index --find-links /tmp/wheels "
            f"{' '.join(repr(d) for d in deps)} && {_COMPILE_DEPS} && rm -rf /tmp/wheels /root/.cache"
        )
        partial = base.with_name(base.stem + ".partial.tar")  # mmdebstrap picks its format by suffix
        _run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates,util-linux,kmod,pciutils",
                f"--customize-hook=copy-in {wheels} /tmp",
                f'--customize-hook=chroot "$1" sh -c "{install}"',
                "bookworm",
                str(partial),
                str(sources),
            ]
        )
        partial.rename(base)
    return base


def _sources() -> list[Path]:
    return [
        p for p in sorted((PROJECT_ROOT / "sro").rglob("*")) if p.is_file() and "__pycache__" not in p.parts
    ]


def _app_layer(out: Path, tmp: Path) -> Path:
    """This checkout's `sro` package, with bytecode: agents (and the hook) start without compiling.

    The bytecode is "unchecked-hash": the layer's files carry no meaningful mtimes and the image is
    immutable, so Python must use the .pyc without comparing it with its source.
    """
    site = f"opt/sro/lib/{IMAGE_PYTHON}/site-packages"
    files: dict[str, Path | bytes] = {}
    for path in _sources():
        rel = path.relative_to(PROJECT_ROOT)
        files[f"{site}/{rel}"] = path
        if path.suffix == ".py":
            pyc = tmp / importlib.util.cache_from_source(str(rel))
            py_compile.compile(
                str(path), cfile=str(pyc), dfile=f"/{site}/{rel}", doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )  # fmt: skip
            files[f"{site}/{pyc.relative_to(tmp)}"] = pyc
    files["usr/local/bin/sro"] = b"#!/opt/sro/bin/python3\nfrom sro.cli import main\nmain()\n"
    return layer_from_files(out, files)


def source_key() -> str:
    paths = _sources()
    return _sha(*(p.read_bytes() for p in paths), *(str(p.relative_to(PROJECT_ROOT)).encode() for p in paths))


def _simnvml_layer(layout: Layout, out: Path) -> Path:
    """The simulated NVIDIA driver's compiled libnvidia-ml.so.1 and nvidia-smi, which `sro driver
    simulate --personality nvidia` copies into its driver root: nothing compiles on a node."""
    built = build_simnvml(layout.image_cache / "simnvml")
    files = {f"{SIMNVML_SHARE}/{built.library.name}": built.library}
    if built.smi is not None:
        files[f"{SIMNVML_SHARE}/{built.smi.name}"] = built.smi
    return layer_from_files(out, files)


def ensure_sro_image(cluster: LocalCluster, progress: Progress = lambda _: None) -> str:
    """Build (if the project changed) and import `localhost/sro:<version>`; returns its name. The
    pods of an earlier install that run an older build of that tag are rolled onto it
    (sro/local/stalepods.py): otherwise they would keep the old code after `sro install`."""
    layout = cluster.layout
    layout.image_cache.mkdir(parents=True, exist_ok=True)
    base = _base_layer(layout, progress)
    key = _sha(base.name.encode(), source_key().encode(), sources_digest().encode())

    def build(archive: Path) -> Path:
        with tempfile.TemporaryDirectory() as tmp:
            app = _app_layer(Path(tmp) / "app.tar", Path(tmp) / "pyc")
            native = _simnvml_layer(layout, Path(tmp) / "simnvml.tar")
            config = ImageConfig(
                entrypoint=["/usr/local/bin/sro"],
                env=(
                    "PATH=/opt/sro/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "PYTHONDONTWRITEBYTECODE=1",
                    "PYTHONUNBUFFERED=1",
                ),
                labels={"org.opencontainers.image.version": __version__, "dev.sro.source-key": key},
            )
            return write_archive(archive, IMAGE, [base, app, native], config)

    _ensure(layout, IMAGE, key, build, progress)
    current = image_id(layout, IMAGE)
    if current is not None:
        roll_stale(cluster, IMAGE, current, NAMESPACE, progress)
    return IMAGE
