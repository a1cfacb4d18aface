"""The hook with real runc on a busybox rootfs: devices, device cgroup, libraries, binary, ldconfig."""

from __future__ import annotations

import pytest

from tests.root.conftest import Bundle, Driver, hook_entry, leftover_processes, mount_points, tree

pytestmark = pytest.mark.root

CHECK = (
    "ls -l /dev/sro-simgpu0 /dev/sro-simgpuctl /lib/libsimgpu.so.1 /bin/simgpu-smi;"
    " test -e /dev/sro-simgpu1 && echo HAS-GPU1;"
    " cat /dev/sro-simgpu0 2>&1; ldconfig -p | grep simgpu; simgpu-smi -L"
)


@pytest.mark.parametrize("stage", ["prestart", "createContainer"])
def test_hook_injects_devices_libraries_binary_and_ldcache(
    bundle: Bundle, driver: Driver, stage: str
) -> None:
    bundle.add_hook(stage, hook_entry(driver, stage))
    before_mounts = mount_points()
    outside_rootfs = tree(bundle.path.parent / "driver-copy")
    res = bundle.run(CHECK, env=["SRO_VISIBLE_DEVICES=0"])
    out = res.stdout + res.stderr
    assert "/dev/sro-simgpu0" in out and "/dev/sro-simgpuctl" in out, out
    assert "HAS-GPU1" not in out  # only the device asked for
    # the device cgroup allows it: no driver behind the major -> ENXIO, not EPERM
    assert "No such device or address" in out, out
    assert "Operation not permitted" not in out, out
    assert "libsimgpu.so.1 (libc6,x86-64) => /lib/libsimgpu.so.1" in out, out  # ldconfig -p inside
    assert "simgpu-smi" in out
    # nothing mounted in the host's namespace, no process left behind
    assert mount_points() == before_mounts
    assert leftover_processes(str(bundle.path)) == []
    assert tree(bundle.path.parent / "driver-copy") == outside_rootfs
    # the driver files on the host are untouched and only mounted read-only
    assert (driver.driver_root / "lib" / "libsimgpu.so.1").stat().st_size > 0
    assert (bundle.rootfs / "lib" / "libsimgpu.so.1").stat().st_size == 0  # an empty mount point only


def test_without_the_hook_the_cgroup_denies_the_node(bundle: Bundle, driver: Driver) -> None:
    """Control: the same node bind-mounted by runc but not allowed in the cgroup gives EPERM."""
    bundle.spec["mounts"].append(
        {
            "destination": "/dev/sro-simgpu0",
            "source": str(driver.dev_root / "sro-simgpu0"),
            "type": "bind",
            "options": ["bind"],
        }
    )
    res = bundle.run("cat /dev/sro-simgpu0 2>&1", env=["SRO_VISIBLE_DEVICES=0"])
    assert "Operation not permitted" in res.stdout + res.stderr


def test_all_none_void(bundle: Bundle, driver: Driver) -> None:
    bundle.add_hook("prestart", hook_entry(driver))
    ls = "ls /dev/ | grep sro- | tr '\\n' ' '; test -s /lib/libsimgpu.so.1 && echo LIB"
    out = bundle.run(ls, env=["SRO_VISIBLE_DEVICES=all"]).stdout
    assert "sro-simgpu0 sro-simgpu1 sro-simgpuctl" in out and "LIB" in out
    out = bundle.run(ls, env=["SRO_VISIBLE_DEVICES=none"]).stdout
    assert "sro-simgpu0" not in out and "sro-simgpuctl" in out and "LIB" in out
    for env in (["SRO_VISIBLE_DEVICES=void"], []):
        out = bundle.run(ls, env=env).stdout
        assert "sro-" not in out and "LIB" not in out


def test_capabilities_select_library_groups(bundle: Bundle, driver: Driver) -> None:
    bundle.add_hook("prestart", hook_entry(driver))
    ls = "for f in /lib/libsimgpu.so.1 /lib/libsimgpu-ml.so.1 /bin/simgpu-smi; do test -s $f && echo HAS$f; done"
    out = bundle.run(ls, env=["SRO_VISIBLE_DEVICES=0", "SRO_DRIVER_CAPABILITIES=compute"]).stdout
    assert out.split() == ["HAS/lib/libsimgpu.so.1"]
    out = bundle.run(ls, env=["SRO_VISIBLE_DEVICES=0", "SRO_DRIVER_CAPABILITIES=all"]).stdout
    assert out.split() == ["HAS/lib/libsimgpu.so.1", "HAS/lib/libsimgpu-ml.so.1", "HAS/bin/simgpu-smi"]


def test_annotation_and_cdi_name_activate(bundle: Bundle, driver: Driver) -> None:
    bundle.add_hook("prestart", hook_entry(driver))
    ls = "ls /dev/ | grep sro- | tr '\\n' ' '"
    bundle.spec["annotations"] = {"sro.dev/simulated-gpu": "1"}
    assert "sro-simgpu1 " in bundle.run(ls, env=[]).stdout
    bundle.spec["annotations"] = {"cdi.k8s.io/test": "sro.dev/simulated-gpu=0"}
    out = bundle.run(ls, env=[]).stdout
    assert "sro-simgpu0 " in out and "sro-simgpu1" not in out


def test_unknown_device_fails_the_start_with_a_reason(bundle: Bundle, driver: Driver) -> None:
    bundle.add_hook("prestart", hook_entry(driver))
    before = tree(bundle.rootfs)
    res = bundle.run("echo STARTED", env=["SRO_VISIBLE_DEVICES=7"])
    assert res.returncode != 0 and "STARTED" not in res.stdout
    assert "unknown device id '7'" in res.stderr, res.stderr
    assert tree(bundle.rootfs) == before  # refused before anything was written


def test_uuid_from_the_simulated_driver_list(bundle: Bundle, driver: Driver) -> None:
    import json

    devices_json = driver.driver_root / "devices.json"
    if not devices_json.exists():
        pytest.skip("the simulated driver module is not installed; no device list with UUIDs")
    uuid1 = json.loads(devices_json.read_text())["devices"][1]["uuid"]
    bundle.add_hook("prestart", hook_entry(driver))
    out = bundle.run("ls /dev/ | grep sro- | tr '\\n' ' '", env=[f"SRO_VISIBLE_DEVICES={uuid1}"]).stdout
    assert "sro-simgpu1 " in out and "sro-simgpu0" not in out


@pytest.mark.parametrize("extra", [["--mount-api", "old"], ["--resolver", "walk"], ["--ldconfig", "none"]])
def test_fallbacks_work_the_same(bundle: Bundle, driver: Driver, extra: list[str]) -> None:
    """mount(2) on /proc/self/fd instead of open_tree/move_mount; the component walk instead of openat2."""
    bundle.add_hook("prestart", hook_entry(driver, "prestart", extra))
    before_mounts = mount_points()
    res = bundle.run(CHECK, env=["SRO_VISIBLE_DEVICES=0"])
    out = res.stdout + res.stderr
    assert "No such device or address" in out and "simgpu-smi" in out, out
    if extra[0] == "--ldconfig":
        assert "=> /lib/libsimgpu.so.1" not in out
    else:
        assert "=> /lib/libsimgpu.so.1" in out, out
    # read-only, nosuid, nodev in both mount APIs
    res = bundle.run("grep simgpu /proc/self/mountinfo", env=["SRO_VISIBLE_DEVICES=0"])
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 3 and all(" ro," in ln and "nosuid" in ln and "nodev" in ln for ln in lines), (
        res.stdout
    )
    assert mount_points() == before_mounts
