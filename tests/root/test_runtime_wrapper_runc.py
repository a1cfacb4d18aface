"""The runc wrapper (through its generated launcher) with real runc, in both modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sro.node.runtime import launcher
from tests.root.conftest import PYTHON, RUNC, Bundle, Driver, leftover_processes

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
            assert entry["env"] and entry["args"][0] == entry["path"] and "-I" in entry["args"]
    if mode == "cdi":
        assert {d["path"] for d in spec["linux"]["devices"]} >= {"/dev/sro-simgpu0", "/dev/sro-simgpuctl"}
        assert "prestart" not in spec.get("hooks", {})
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
