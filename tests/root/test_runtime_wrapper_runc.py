"""The runc wrapper (through its generated launcher) with real runc, in both modes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sro.node.runtime import launcher
from sro.node.runtime.inject import real_ldconfig
from sro.node.runtime.specedits import LD_CONF
from tests.root.conftest import HOST_LDCONFIG, PYTHON, RUNC, Bundle, Driver, HostWatch, leftover_processes

pytestmark = pytest.mark.root

CHECK = "ls /dev | grep sro- | tr '\\n' ' '; cat /dev/sro-simgpu0 2>&1; ldconfig -p | grep -c simgpu"


@pytest.mark.parametrize("mode", ["hook", "cdi"])
def test_wrapper_edits_only_containers_asking_for_devices(
    tmp_path: Path, bundle: Bundle, driver: Driver, mode: str
) -> None:
    script = tmp_path / "sro-runc"
    launcher.write(str(script), PYTHON, RUNC, mode=mode, hook_options=driver.hook_options())
    bundle.spec["process"]["args"] = ["sh", "-c", CHECK]
    bundle.spec["process"]["env"] = ["PATH=/bin:/sbin", "SRO_VISIBLE_DEVICES=0"]
    bundle.write()
    import subprocess

    res = subprocess.run(
        [str(script), "--root", str(bundle.state_root), "run", "--bundle", str(bundle.path), f"w-{mode}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    subprocess.run(
        [str(script), "--root", str(bundle.state_root), "delete", "-f", f"w-{mode}"], capture_output=True
    )
    out = res.stdout + res.stderr
    assert "sro-simgpu0 sro-simgpuctl" in out and "No such device or address" in out, out
    assert out.strip().endswith("2"), out
    spec = json.loads((bundle.path / "config.json").read_text())
    for stage in spec.get("hooks", {}).values():
        for entry in stage:
            assert entry["env"] and entry["args"][0] == entry["path"]
            assert "-I" in entry["args"] or entry["path"] == real_ldconfig(HOST_LDCONFIG)
    if mode == "cdi":
        assert {d["path"] for d in spec["linux"]["devices"]} >= {"/dev/sro-simgpu0", "/dev/sro-simgpuctl"}
        assert "prestart" not in spec.get("hooks", {})
        # one Python process: the ldcache hook is the host's ldconfig, chrooted by -r into the rootfs
        (entry,) = spec["hooks"]["createContainer"]
        assert entry["args"][1:] == ["-r", str(bundle.rootfs), "/lib"]
        assert (bundle.path / "sro-ld.so.conf").read_text() == "/lib\n"
        assert {"destination": LD_CONF, "source": str(bundle.path / "sro-ld.so.conf"), "type": "bind",
                "options": ["ro", "nosuid", "nodev", "bind"]} in spec["mounts"]  # fmt: skip
    assert leftover_processes(str(bundle.path)) == []

    # a container asking for nothing keeps its spec byte for byte
    bundle.spec = json.loads(json.dumps(bundle.spec))
    bundle.spec.pop("hooks", None)
    bundle.spec["linux"].pop("devices", None)
    bundle.spec["process"]["env"] = ["PATH=/bin"]
    bundle.spec["process"]["args"] = ["true"]
    bundle.write()
    raw = (bundle.path / "config.json").read_bytes()
    res = subprocess.run(
        [str(script), "--root", str(bundle.state_root), "run", "--bundle", str(bundle.path), f"n-{mode}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    subprocess.run(
        [str(script), "--root", str(bundle.state_root), "delete", "-f", f"n-{mode}"], capture_output=True
    )
    assert res.returncode == 0, res.stderr
    assert (bundle.path / "config.json").read_bytes() == raw


def test_wrapper_refuses_unknown_device_before_runc(tmp_path: Path, bundle: Bundle, driver: Driver) -> None:
    import subprocess

    script = tmp_path / "sro-runc"
    launcher.write(str(script), PYTHON, RUNC, mode="cdi", hook_options=driver.hook_options())
    bundle.spec["process"]["env"] = ["PATH=/bin", "SRO_VISIBLE_DEVICES=5"]
    bundle.write()
    raw = (bundle.path / "config.json").read_bytes()
    res = subprocess.run(
        [str(script), "--root", str(bundle.state_root), "run", "--bundle", str(bundle.path), "bad"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1 and "unknown device id '5'" in res.stderr, res.stderr
    assert (bundle.path / "config.json").read_bytes() == raw


def _wrapped_cdi(
    tmp_path: Path, bundle: Bundle, driver: Driver, cmd: str
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "sro-runc"
    launcher.write(str(script), PYTHON, RUNC, mode="cdi", hook_options=driver.hook_options())
    bundle.spec["process"]["args"] = ["sh", "-c", cmd]
    bundle.spec["process"]["env"] = ["PATH=/bin:/sbin", "SRO_VISIBLE_DEVICES=0"]
    bundle.spec.pop("hooks", None)
    bundle.write()
    try:
        return subprocess.run(
            [str(script), "--root", str(bundle.state_root), "run", "--bundle", str(bundle.path), "c"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        subprocess.run([RUNC, "--root", str(bundle.state_root), "delete", "-f", "c"], capture_output=True)


def test_cdi_ldcache_hook_with_links_out_of_the_image(
    tmp_path: Path, bundle: Bundle, driver: Driver, host: HostWatch
) -> None:
    """CVE-2025-23267 against mode cdi's ldcache hook (the host's ldconfig run by runc, no Python):
    ldconfig's outputs and the ld.so.conf.d the folders' file is mounted in are links out of the
    rootfs; ldconfig chroots, runc resolves the mount inside the root: the host is never written."""
    before = host.snapshot()
    (bundle.rootfs / "etc" / "ld.so.cache").symlink_to(host.outside / "etc" / "passwd")
    res = _wrapped_cdi(
        tmp_path, bundle, driver, "ldconfig -p | grep -c simgpu; cat /etc/ld.so.conf.d/000-sro.conf"
    )
    assert res.stdout.split() == ["2", "/lib"], res.stdout + res.stderr
    assert not (bundle.rootfs / "etc" / "ld.so.cache").is_symlink()  # replaced inside, not followed
    assert host.snapshot() == before

    (bundle.rootfs / "etc" / "ld.so.cache").unlink()
    conf_d = bundle.rootfs / "etc" / "ld.so.conf.d"
    if conf_d.exists():
        shutil.rmtree(conf_d)
    conf_d.symlink_to(host.outside / "etc")
    res = _wrapped_cdi(tmp_path, bundle, driver, "ldconfig -p | grep -c simgpu")
    assert res.stdout.strip() == "2", res.stdout + res.stderr
    assert host.snapshot() == before
    assert sorted(p.name for p in (host.outside / "etc").iterdir()) == ["passwd"]
    assert leftover_processes(str(bundle.path)) == []


def test_cdi_ldcache_hook_never_runs_the_images_ldconfig(
    tmp_path: Path, bundle: Bundle, driver: Driver, host: HostWatch
) -> None:
    """CVE-2024-0136: the image's /sbin/ldconfig is not what runs (the host's is named by path)."""
    marker = host.outside / "x.marker"
    fake = bundle.rootfs / "sbin" / "ldconfig"
    fake.unlink()
    fake.write_text(f"#!/bin/sh\necho pwned > {marker}\n")
    fake.chmod(0o755)
    res = _wrapped_cdi(tmp_path, bundle, driver, "echo STARTED")
    assert "STARTED" in res.stdout, res.stderr
    assert b"libsimgpu.so.1" in (bundle.rootfs / "etc" / "ld.so.cache").read_bytes()
    assert not marker.exists()
