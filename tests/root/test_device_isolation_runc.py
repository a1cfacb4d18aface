"""A container gets only the devices it was allocated (issue 21 §1), with real runc and podman.

The node's defaults throughout (no --accept-envvar-unprivileged). Three containers, through the hook
(prestart and createContainer), the runc wrapper (both modes) and the hooks.d entry as podman runs it:
  * unprivileged, `SRO_VISIBLE_DEVICES=all`, no allocation: no device node, no library, and a node it
    makes itself cannot be opened (mknod is refused, or the device cgroup says EPERM);
  * unprivileged, the same env, one device allocated the way the kubelet does it (the node in the
    spec's `linux.devices` with its cgroup rule, from the plugin's DeviceSpec; podman: `--device`):
    exactly that one, and the driver's files;
  * privileged (CAP_SYS_ADMIN in the bounding set), the same env: every device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sro.node.runtime import launcher
from tests.root.conftest import PYTHON, RUNC, Bundle, Driver, hook_entry, make_rootfs, podman_run

pytestmark = pytest.mark.root

SCRIPT = (
    "ls /dev | grep sro- | tr '\\n' ' '; echo; test -s /lib/libsimgpu.so.1 && echo HAS-LIB; "
    'for d in /dev/sro-simgpu*; do test -e $d && echo "NODE $d $(cat $d 2>&1 >/dev/null)"; done; '
    'mknod /dev/forged c {major} 0 2>&1 && echo "FORGED $(cat /dev/forged 2>&1 >/dev/null)"; true'
)
ALL = ["SRO_VISIBLE_DEVICES=all"]
SYS_ADMIN = "CAP_SYS_ADMIN"


def _script(driver: Driver) -> str:
    return SCRIPT.format(major=driver.major)


def _node(driver: Driver, name: str) -> tuple[int, int]:
    st = os.stat(driver.dev_root / name)
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def allocate(spec: dict[str, Any], driver: Driver, name: str) -> None:
    """What containerd writes for one DeviceSpec of Allocate: the node and its cgroup allow rule."""
    major, minor = _node(driver, name)
    linux = spec.setdefault("linux", {})
    linux.setdefault("devices", []).append(
        {
            "path": f"/dev/{name}",
            "type": "c",
            "major": major,
            "minor": minor,
            "fileMode": 0o666,
            "uid": 0,
            "gid": 0,
        }
    )
    rules = linux.setdefault("resources", {}).setdefault("devices", [])
    rules.append({"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"})


def privileged(spec: dict[str, Any]) -> None:
    for kind, caps in spec["process"]["capabilities"].items():
        if SYS_ADMIN not in caps:
            spec["process"]["capabilities"][kind] = [*caps, SYS_ADMIN, "CAP_MKNOD"]


def _first(out: str) -> list[str]:
    return out.splitlines()[0].split() if out.strip() else []


def check_nothing(out: str) -> None:
    assert _first(out) == [] and "HAS-LIB" not in out and "NODE" not in out, out
    # it cannot open a node of the driver's major it makes itself: mknod refused or the cgroup says no
    forged = out.split("FORGED", 1)[1] if "FORGED" in out else out
    assert "Operation not permitted" in forged, out


def check_exactly_one(out: str) -> None:
    assert _first(out) == ["sro-simgpu1", "sro-simgpuctl"], out
    assert "HAS-LIB" in out and "NODE /dev/sro-simgpu1 " in out, out
    assert "No such device or address" in out.split("NODE /dev/sro-simgpu1", 1)[1], out  # ENXIO, not EPERM


def check_all(out: str) -> None:
    assert {"sro-simgpu0", "sro-simgpu1", "sro-simgpuctl"} <= set(_first(out)), out
    assert "HAS-LIB" in out, out


@pytest.mark.parametrize("stage", ["prestart", "createContainer"])
def test_hook_gives_only_the_allocation(bundle: Bundle, driver: Driver, stage: str) -> None:
    bundle.add_hook(stage, hook_entry(driver, stage, accept_env=False))
    base = json.loads(json.dumps(bundle.spec))
    res = bundle.run(_script(driver), env=ALL)
    assert res.returncode == 0, res.stderr
    check_nothing(res.stdout + res.stderr)

    bundle.spec = json.loads(json.dumps(base))
    allocate(bundle.spec, driver, "sro-simgpu1")
    allocate(bundle.spec, driver, "sro-simgpuctl")  # the plugin sends the control node too
    res = bundle.run(_script(driver), env=ALL)
    assert res.returncode == 0, res.stderr
    check_exactly_one(res.stdout + res.stderr)

    bundle.spec = json.loads(json.dumps(base))
    privileged(bundle.spec)
    res = bundle.run(_script(driver), env=ALL)
    assert res.returncode == 0, res.stderr
    check_all(res.stdout + res.stderr)


def _run_wrapped(script: Path, bundle: Bundle, cid: str) -> subprocess.CompletedProcess[str]:
    bundle.write()
    try:
        return subprocess.run(
            [str(script), "--root", str(bundle.state_root), "run", "--bundle", str(bundle.path), cid],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        subprocess.run(
            [str(script), "--root", str(bundle.state_root), "delete", "-f", cid], capture_output=True
        )


@pytest.mark.parametrize("mode", ["hook", "cdi"])
def test_wrapper_gives_only_the_allocation(tmp_path: Path, bundle: Bundle, driver: Driver, mode: str) -> None:
    script = tmp_path / "sro-runc"
    launcher.write(str(script), PYTHON, RUNC, mode=mode, hook_options=driver.hook_options(accept_env=False))
    bundle.spec["process"]["args"] = ["sh", "-c", _script(driver)]
    bundle.spec["process"]["env"] = ["PATH=/bin:/sbin", *ALL]
    base = json.loads(json.dumps(bundle.spec))
    bundle.write()
    raw = (bundle.path / "config.json").read_bytes()
    res = _run_wrapped(script, bundle, f"none-{mode}")
    assert res.returncode == 0, res.stderr
    check_nothing(res.stdout + res.stderr)
    assert (bundle.path / "config.json").read_bytes() == raw  # not believed: the spec is not touched

    bundle.spec = json.loads(json.dumps(base))
    allocate(bundle.spec, driver, "sro-simgpu1")
    allocate(bundle.spec, driver, "sro-simgpuctl")
    res = _run_wrapped(script, bundle, f"one-{mode}")
    assert res.returncode == 0, res.stderr
    check_exactly_one(res.stdout + res.stderr)

    bundle.spec = json.loads(json.dumps(base))
    privileged(bundle.spec)
    res = _run_wrapped(script, bundle, f"all-{mode}")
    assert res.returncode == 0, res.stderr
    check_all(res.stdout + res.stderr)


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed")
def test_hooks_d_entry_as_podman_runs_it(tmp_path: Path, driver: Driver) -> None:
    hooks_dir = tmp_path / "hooks.d"
    opts = [
        "--recipe",
        "simulated-gpu",
        "--driver-root",
        str(driver.driver_root),
        "--dev-root",
        str(driver.dev_root),
    ]
    argv = [PYTHON, "-m", "sro", "hook", "install-hooksd", "--dir", str(hooks_dir), "--python", PYTHON, *opts]
    subprocess.run(argv, check=True, capture_output=True)
    doc = json.loads((hooks_dir / "sro-hook.json").read_text())
    assert "--accept-envvar-unprivileged" not in doc["hook"]["args"]  # the default entry
    rootfs = make_rootfs(tmp_path / "rootfs")
    script = _script(driver)
    res = podman_run(rootfs, hooks_dir=hooks_dir, env=ALL, script=script)
    assert res.returncode == 0, res.stderr
    check_nothing(res.stdout + res.stderr)
    devices = [f"{driver.dev_root}/{n}:/dev/{n}" for n in ("sro-simgpu1", "sro-simgpuctl")]
    res = podman_run(rootfs, hooks_dir=hooks_dir, env=ALL, script=script, devices=devices)
    assert res.returncode == 0, res.stderr
    check_exactly_one(res.stdout + res.stderr)
    res = podman_run(rootfs, hooks_dir=hooks_dir, env=ALL, script=script, privileged=True)
    assert res.returncode == 0, res.stderr
    check_all(res.stdout + res.stderr)
