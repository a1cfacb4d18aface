"""What `sro runtime install` writes, run for real: the launcher with runc, the hooks.d entry with
podman, both starting the host's /usr/bin/python3 on the zipapp (no venv, no checkout on sys.path)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sro.node.runtime import bundling, hostinstall, rootmanifest
from sro.node.runtime.inject import real_ldconfig
from tests.root.conftest import (
    HOST_LDCONFIG,
    RUNC,
    Bundle,
    Driver,
    leftover_processes,
    make_rootfs,
    podman_run,
)

pytestmark = pytest.mark.root

HOST_PYTHON = "/usr/bin/python3"
CHECK = "ls /dev | grep sro- | tr '\\n' ' '; cat /dev/sro-simgpu0 2>&1; ldconfig -p | grep -c simgpu"


def _install(root: Path, driver: Driver, mode: str = "hook") -> rootmanifest.Manifest:
    settings = rootmanifest.Settings(
        host_dir=str(root),
        python=HOST_PYTHON,
        runc=RUNC,
        mode=mode,
        dev_root=str(driver.dev_root),
        accept_envvar_unprivileged=True,  # these containers are unprivileged and name devices by env
    )
    return hostinstall.install(str(root), {"simulated-gpu": str(driver.driver_root)}, settings)


@pytest.mark.parametrize("mode", ["hook", "cdi"])
def test_installed_launcher_injects_with_runc(
    tmp_path: Path, bundle: Bundle, driver: Driver, mode: str
) -> None:
    if not Path(HOST_PYTHON).exists():
        pytest.skip(f"no {HOST_PYTHON} on this machine")
    root = tmp_path / "runtime"
    manifest = _install(root, driver, mode)
    assert "cdi/sro.dev-simulated-gpu.json" in manifest.files  # the driver has devices: a CDI spec too
    launcher = root / "sro-runtime"
    res = bundle.launch(
        launcher, f"inst-{mode}", CHECK, ["PATH=/bin:/sbin", "SRO_VISIBLE_DEVICES=0"], tmp_path
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "sro-simgpu0 sro-simgpuctl" in out and "No such device or address" in out, out
    assert out.strip().endswith("2"), out  # the ldcache hook ran: both libraries in the container's cache
    spec = json.loads((bundle.path / "config.json").read_text())
    archive = str(root / bundling.ARCHIVE_NAME)
    entries = [e for stage in spec.get("hooks", {}).values() for e in stage]
    assert entries, spec.get("hooks")
    for e in entries:  # the hooks the wrapper wrote run the host's python on the zipapp
        if mode == "cdi":  # mode cdi's one hook is the host's ldconfig itself (one Python process)
            assert e["path"] == real_ldconfig(HOST_LDCONFIG) and e["args"][1:3] == ["-r", str(bundle.rootfs)]
            continue
        assert e["path"] == HOST_PYTHON and e["args"][:3] == [HOST_PYTHON, "-I", "-S"]
        assert f"sys.path.insert(0,{archive!r})" in e["args"][4]
    assert leftover_processes(str(bundle.path)) == []
    hostinstall.uninstall(str(root))
    assert sorted(p.name for p in root.iterdir()) == ["sro-runtime"]  # the pass-through launcher
    hostinstall.uninstall(str(root), purge=True)
    assert not any(root.iterdir())


def test_containers_of_the_launcher_can_still_be_stopped_after_uninstall(
    tmp_path: Path, bundle: Bundle, driver: Driver
) -> None:
    """containerd keeps calling the handler's binary for `state`, `kill`, `delete`: once the last
    recipe is uninstalled the pass-through launcher must still reach the container `create` made."""
    if not Path(HOST_PYTHON).exists():
        pytest.skip(f"no {HOST_PYTHON} on this machine")
    root = tmp_path / "runtime"
    _install(root, driver)
    launcher = root / "sro-runtime"
    bundle.spec["process"]["args"] = ["sleep", "300"]
    bundle.spec["process"]["env"] = ["PATH=/bin:/sbin", "SRO_VISIBLE_DEVICES=0"]  # through the wrapper
    bundle.write()
    cid = "inst-passthrough"
    state = ["--root", str(bundle.state_root)]

    def call(exe: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
        out = tmp_path / "out"
        with out.open("w") as f:  # a file, not a pipe: the container's init inherits it
            res = subprocess.run(
                [str(exe), *state, *args],
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=60,
                cwd=tmp_path,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            )
        return subprocess.CompletedProcess(res.args, res.returncode, out.read_text())

    try:
        created = call(launcher, "create", "--bundle", str(bundle.path), cid)
        assert created.returncode == 0, created.stdout
        assert call(launcher, "start", cid).returncode == 0
        hostinstall.uninstall(str(root))  # the last owner goes (SIGTERM of --wait does the same)
        assert sorted(p.name for p in root.iterdir()) == ["sro-runtime"]
        assert "sro-hook.pyz" not in launcher.read_text() and launcher.stat().st_mode & 0o111
        seen = call(launcher, "state", cid)
        assert seen.returncode == 0 and json.loads(seen.stdout)["status"] == "running", seen.stdout
        assert call(launcher, "kill", cid, "KILL").returncode == 0
        deleted = call(launcher, "delete", "-f", cid)
        assert deleted.returncode == 0, deleted.stdout
        assert call(RUNC, "state", cid).returncode != 0  # gone for runc too
    finally:
        subprocess.run([RUNC, *state, "delete", "-f", cid], capture_output=True)
    assert leftover_processes(str(bundle.path)) == []


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed")
def test_installed_hooks_d_entry_injects_through_podman(tmp_path: Path, driver: Driver) -> None:
    if not Path(HOST_PYTHON).exists():
        pytest.skip(f"no {HOST_PYTHON} on this machine")
    root = tmp_path / "runtime"
    _install(root, driver)
    rootfs = make_rootfs(tmp_path / "rootfs")
    res = podman_run(
        rootfs, hooks_dir=root / "hooks.d", env=["SRO_VISIBLE_DEVICES=1"], script=CHECK.replace("0", "1")
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "sro-simgpu1 sro-simgpuctl" in out and "sro-simgpu0" not in out, out
    res = podman_run(rootfs, hooks_dir=root / "hooks.d", env=["SRO_VISIBLE_DEVICES=9"], script="echo STARTED")
    assert res.returncode != 0 and "unknown device id '9'" in res.stdout + res.stderr
