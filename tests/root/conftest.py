"""Real runc/podman fixtures: a busybox rootfs, a simulated driver tree, bundles, host snapshots.

The driver root and dev root are temp dirs: the simulated driver (`sro.devices.simulated_driver`)
writes its real device nodes (a char major no kernel driver owns) and ELF libraries there; if that
module is missing, the same is built here with gcc and mknod. No test touches the real
/var/lib/sro or /dev. The rootfs gets busybox (`--install -s`) plus a copy of the host's static
`ldconfig`, so the container can run `ldconfig -p` itself — the hook never runs that copy (it runs the
host's, chrooted into the rootfs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sro.node.runtime.inject import real_ldconfig

PYTHON = str(Path(sys.prefix) / "bin" / "python")  # the venv's interpreter, found by prefix
RUNC = "/usr/sbin/runc"
HOST_LDCONFIG = "/sbin/ldconfig"


@dataclass(frozen=True)
class Driver:
    driver_root: Path
    dev_root: Path
    major: int

    def hook_options(self, accept_env: bool = True) -> list[str]:
        """accept_env: these runc containers are unprivileged and name their devices by env var, which
        the hook believes only with --accept-envvar-unprivileged; test_device_isolation_runc.py runs
        the node's default (False), where only a device plugin's allocation counts."""
        opts = [
            "--recipe",
            "simulated-gpu",
            "--driver-root",
            str(self.driver_root),
            "--dev-root",
            str(self.dev_root),
        ]
        return [*opts, "--accept-envvar-unprivileged", "true"] if accept_env else opts


@pytest.fixture(scope="session")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Driver:
    """The product's own simulated driver, installed into a temporary root: a failure of its install
    is a failure of the product and fails every test that uses it (no substitute is built)."""
    from sro.devices import simconfig, simulated_driver

    base = tmp_path_factory.mktemp("simdriver")
    driver_root, dev_root = base / "driver", base / "dev"
    inv = simconfig.parse({"count": 2})
    with open("/proc/devices") as f:
        installed = simulated_driver.install(inv, driver_root, dev_root, f.read())
    return Driver(driver_root, dev_root, installed.major)


def make_rootfs(path: Path) -> Path:
    for d in ("bin", "sbin", "etc", "dev", "proc", "sys", "tmp", "lib"):
        (path / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2("/bin/busybox", path / "bin" / "busybox")
    subprocess.run(["chroot", str(path), "/bin/busybox", "--install", "-s", "/bin"], check=True)
    # static: runs inside for `ldconfig -p`; Ubuntu's /sbin/ldconfig is a shell wrapper around
    # /sbin/ldconfig.real, and a copy of the wrapper alone finds no .real in the rootfs
    shutil.copy2(real_ldconfig(HOST_LDCONFIG), path / "sbin" / "ldconfig")
    return path


def allow_as_the_kubelet_would(bundle: Bundle, nodes: Iterable[str]) -> list[str]:
    """What the kubelet does with a device plugin's DeviceSpecs: an allow rule per host node in the
    spec's `linux.resources.devices`. On a cgroup v2 host runc builds the device cgroup from these
    before any hook runs and no hook can add to it. The nodes that exist, as `c MAJ:MIN`."""
    added = []
    rules = bundle.spec["linux"].setdefault("resources", {}).setdefault("devices", [])
    for node in nodes:
        try:
            st = os.stat(node)
        except FileNotFoundError:
            continue
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        rules.append({"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"})
        added.append(f"c {major}:{minor}")
    return added


def capture_stderr(entry: dict[str, Any], log: Path) -> dict[str, Any]:
    """The hook entry run through `sh -c 'exec "$@" 2>>LOG'`: runc drops a hook's stderr when it
    succeeds, and a warning is written exactly then."""
    return {**entry, "path": "/bin/sh", "args": ["sh", "-c", f'exec "$@" 2>>{log}', "hook", *entry["args"]]}


@pytest.fixture(scope="session")
def base_spec(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("spec")
    subprocess.run([RUNC, "spec"], cwd=d, check=True)
    spec: dict[str, Any] = json.loads((d / "config.json").read_text())
    spec["process"]["terminal"] = False
    spec["root"] = {"path": "rootfs", "readonly": False}
    return spec


@dataclass
class Bundle:
    path: Path
    spec: dict[str, Any]
    state_root: Path

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    def write(self) -> None:
        (self.path / "config.json").write_text(json.dumps(self.spec, indent=1))

    def run(
        self, *args: str, env: list[str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """`runc run` of `sh -c ARGS` (or the spec's args when none are given)."""
        if args:
            self.spec["process"]["args"] = ["sh", "-c", " ".join(args)]
        if env is not None:
            kept = [e for e in self.spec["process"].get("env", []) if e.startswith("PYTHONPATH=")]
            self.spec["process"]["env"] = ["PATH=/usr/bin:/bin:/usr/sbin:/sbin", *kept, *env]
        self.write()
        cid = f"sro-test-{uuid.uuid4().hex[:10]}"
        try:
            return subprocess.run(
                [RUNC, "--root", str(self.state_root), "run", "--bundle", str(self.path), cid],
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        finally:
            subprocess.run([RUNC, "--root", str(self.state_root), "delete", "-f", cid], capture_output=True)

    def launch(
        self, launcher: Path, cid: str, script: str, env: list[str], cwd: Path
    ) -> subprocess.CompletedProcess[str]:
        """`LAUNCHER run` of `sh -c SCRIPT` with exactly `env`, as containerd starts an installed
        runtime's launcher (`sro runtime install`) in runc's place: the host's PATH only, run from
        `cwd`; the container is deleted after, whatever happened."""
        self.spec["process"]["args"] = ["sh", "-c", script]
        self.spec["process"]["env"] = env
        self.write()
        state = ["--root", str(self.state_root)]
        try:
            return subprocess.run(
                [str(launcher), *state, "run", "--bundle", str(self.path), cid],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=cwd,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            )
        finally:
            subprocess.run([str(launcher), *state, "delete", "-f", cid], capture_output=True)

    def add_hook(self, stage: str, entry: dict[str, Any]) -> None:
        self.spec.setdefault("hooks", {}).setdefault(stage, []).append(entry)


@pytest.fixture
def bundle(tmp_path: Path, base_spec: dict[str, Any]) -> Bundle:
    path = tmp_path / "bundle"
    make_rootfs(path / "rootfs")
    return Bundle(path, json.loads(json.dumps(base_spec)), tmp_path / "runc-state")


def hook_entry(
    driver: Driver, stage: str = "prestart", extra: list[str] | None = None, accept_env: bool = True
) -> dict[str, Any]:
    from sro.node.runtime.specedits import HookCommand

    return HookCommand(PYTHON, tuple(driver.hook_options(accept_env))).entry(stage, extra or [])


def podman_run(
    rootfs: Path,
    script: str,
    *,
    hooks_dir: Path | None = None,
    env: list[str] | None = None,
    devices: list[str] | None = None,
    privileged: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`podman run` of a rootfs with no network and explicit ulimits (this VM's hard limit is 20000)."""
    args = ["podman"] + (["--hooks-dir", str(hooks_dir)] if hooks_dir else [])
    args += [
        "run",
        "--rm",
        "--network",
        "none",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
    ]
    for e in env or []:
        args += ["--env", e]
    for d in devices or []:
        args += ["--device", d]
    if privileged:
        args += ["--privileged"]
    args += ["--rootfs", str(rootfs), "/bin/sh", "-c", script]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


# A local cluster running on this machine mounts and unmounts its containers' filesystems, volumes
# and network namespaces under these while a test runs; none of them is a path the hook touches.
CLUSTER_MOUNTS = ("/run/containerd/", "/var/lib/containerd/", "/var/lib/kubelet/", "/run/netns/")


def mount_points() -> set[str]:
    """The host's mount points, less the local cluster's own churn (a leak of the hook's would be
    under a bundle, the driver root or /run/sro, never under those)."""
    with open("/proc/self/mountinfo") as f:
        points = {line.split()[4] for line in f}
    return {p for p in points if not p.startswith(CLUSTER_MOUNTS)}


def tree(path: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `path` (not following links) with (mode, size, mtime_ns)."""
    out: dict[str, tuple[int, int, int]] = {}
    if not path.exists() and not path.is_symlink():
        return out
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            out[os.path.relpath(p, path)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


@dataclass
class HostWatch:
    """What an escape would change: a stand-in host dir, some real host names, the mount table."""

    outside: Path
    names: tuple[str, ...] = ("/libsimgpu.so.1", "/simgpu-smi", "/sro-simgpu0", "/ld.so.cache", "/x.marker")

    def snapshot(self) -> tuple[object, ...]:
        ours = {m for m in mount_points() if str(self.outside.parent) in m}
        return (tree(self.outside), {n: os.path.lexists(n) for n in self.names}, ours)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HostWatch]:
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "etc").mkdir()
    (outside / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    yield HostWatch(outside)


def leftover_processes(marker: str) -> list[str]:
    """Command lines of live processes mentioning `marker` (hooks must not leave children)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            out.append(f"{pid}: {cmd}")
    return out
