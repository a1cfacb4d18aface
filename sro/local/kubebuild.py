"""Kubernetes binaries built from Debian's own `kubernetes` source package, cached per version.

Debian 12 ships only kubectl as a binary, but its source package carries the whole tree with vendor/,
and Debian's Go builds it (about 5 minutes on 2 cores). The result is cached under
`<cache>/kubernetes/<source version>-go<go version>/` with a manifest of checksums, so the build happens
once per machine and a corrupted cache is detected (and rebuilt) instead of run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from sro.local.layout import KUBE_BINARIES, KUBERNETES_SOURCE_PACKAGE, Layout

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    pass


def _run(
    argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, log: Path | None = None
) -> str:
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if log is not None:
        with log.open("a") as f:
            f.write(f"$ {' '.join(argv)}\n{out.stdout}{out.stderr}\n")
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise BuildError(f"`{' '.join(argv)}` failed (exit {out.returncode}):\n{tail}")
    return out.stdout


def source_version() -> str:
    """The version of Debian's kubernetes source package (needs deb-src lines; see scripts/setup-host)."""
    out = subprocess.run(["apt-cache", "showsrc", KUBERNETES_SOURCE_PACKAGE], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise BuildError(
        "apt knows no source package 'kubernetes': add deb-src lines and update "
        "(run `./scripts/setup-host`, which derives them from /etc/apt/sources.list.d)"
    )


def go_version() -> str:
    if shutil.which("go") is None:
        raise BuildError("Go is missing: apt-get install golang-go (or run ./scripts/setup-host)")
    return _run(["go", "env", "GOVERSION"]).strip()


def cache_key() -> str:
    return f"{source_version()}-{go_version()}".replace("/", "_")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(cache_dir: Path) -> str | None:
    """None when the cache is complete and intact, else what is wrong with it."""
    manifest = cache_dir / "manifest.json"
    if not manifest.exists():
        return "no manifest"
    try:
        sums = json.loads(manifest.read_text())["sha256"]
    except (ValueError, KeyError) as e:
        return f"manifest unreadable: {e}"
    for name in (*KUBE_BINARIES, "pause.c"):
        path = cache_dir / ("bin" if name != "pause.c" else "src") / name
        if not path.exists():
            return f"{path} missing"
        if _sha256(path) != sums.get(name):
            return f"{path} corrupted (checksum differs from the manifest)"
    return None


def ensure_kubernetes(layout: Layout, progress: Progress) -> Path:
    """The directory holding the Kubernetes binaries, building them first if the cache lacks them."""
    key = cache_key()
    cache_dir = layout.kube_cache(key)
    problem = verify(cache_dir)
    if problem is None:
        return cache_dir / "bin"
    if cache_dir.exists():
        progress(f"Kubernetes cache {cache_dir} is unusable ({problem}); rebuilding")
        shutil.rmtree(cache_dir)
    build(cache_dir, progress)
    return cache_dir / "bin"


def build(cache_dir: Path, progress: Progress) -> None:
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    log = cache_dir.parent / "build.log"
    log.write_text("")
    with tempfile.TemporaryDirectory(dir=cache_dir.parent, prefix="build-") as tmp:
        work = Path(tmp)
        progress("Downloading Debian's kubernetes source package")
        _run(["apt-get", "source", "--download-only", KUBERNETES_SOURCE_PACKAGE], cwd=work, log=log)
        dsc = next(work.glob("*.dsc"))
        progress("Unpacking the source")
        _run(["dpkg-source", "--no-check", "-x", str(dsc), "src"], cwd=work, log=log)
        src = work / "src"
        # GOPATH mode, as Debian's own rules build it.
        gopath = src / ".go"
        (gopath / "src" / "k8s.io").mkdir(parents=True)
        (gopath / "src" / "k8s.io" / "kubernetes").symlink_to("../../..")
        env = dict(os.environ, GOPATH=str(gopath), CGO_ENABLED="0", GO111MODULE="off", GOFLAGS="-mod=vendor")
        env["GOCACHE"] = str(work / "gocache")
        progress(f"Building {', '.join(KUBE_BINARIES)} with Go (about 5 minutes on 2 cores; log: {log})")
        what = " ".join(f"cmd/{b}" for b in KUBE_BINARIES)
        _run(["make", f"WHAT={what}"], cwd=gopath / "src" / "k8s.io" / "kubernetes", env=env, log=log)
        out = src / "_output" / "local" / "bin" / "linux" / "amd64"
        staging = work / "result"
        (staging / "bin").mkdir(parents=True)
        (staging / "src").mkdir()
        for name in KUBE_BINARIES:
            shutil.copy2(out / name, staging / "bin" / name)
        shutil.copy2(src / "build" / "pause" / "linux" / "pause.c", staging / "src" / "pause.c")
        sums = {name: _sha256(staging / "bin" / name) for name in KUBE_BINARIES}
        sums["pause.c"] = _sha256(staging / "src" / "pause.c")
        (staging / "manifest.json").write_text(json.dumps({"sha256": sums}, indent=1))
        staging.rename(cache_dir)  # atomic: a crash mid-build leaves no half cache behind
    progress(f"Kubernetes binaries cached in {cache_dir}")
