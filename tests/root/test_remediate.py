"""`sro driver reset` / `sro driver reboot` on real simulated driver installs (temp driver and dev
roots, real char nodes): the fault `sro simulate fault` injected goes away for the device plugin's
own backend (a `cleared` health event) and for the simulated NVML's state, only for the devices
named; a simulated reboot clears the rest and gives the node the new boot the health report reads."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from sro.devices import driverstate, simulated_nvidia
from sro.devices.healthreport import boot_id
from sro.devices.model import HealthEvent
from sro.devices.simnvml_format import records
from sro.devices.simulated import SimulatedBackend

pytestmark = pytest.mark.root

PYTHON = str(Path(sys.prefix) / "bin" / "python")


def sro(*args: str, code: int = 0) -> str:
    r = subprocess.run([PYTHON, "-m", "sro", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == code, r.stdout + r.stderr
    return r.stdout


def roots(tmp_path: Path) -> tuple[str, ...]:
    return ("--driver-root", str(tmp_path / "root"), "--dev-root", str(tmp_path / "dev"))


def faulty(root: Path) -> dict[str, int]:
    status = json.loads(sro("simulate", "status", "--driver-root", str(root)))
    return {d["uuid"]: d["fault"]["xid"] for d in status["devices"] if d["fault"]}


def nodes(tmp_path: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.lstat().st_rdev) for p in (tmp_path / "dev").iterdir())


class Watch:
    """The device plugin's simulated backend, watching the fault state in a thread."""

    def __init__(self, root: Path) -> None:
        self.events: list[HealthEvent] = []
        self.stop = threading.Event()
        self.backend = SimulatedBackend(root, poll_interval=0.02)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for e in self.backend.events(self.stop):
            self.events.append(e)

    def wait_for(self, kind: str, device: str, timeout: float = 5.0) -> None:
        for _ in range(int(timeout / 0.02)):
            if any(e.kind == kind and e.device == device for e in self.events):
                return
            self.stop.wait(0.02)
        raise AssertionError(f"no {kind} event for {device}: {self.events}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def test_reset_and_reboot_of_the_simulated_gpu(tmp_path: Path) -> None:
    (tmp_path / "devices.yaml").write_text(yaml.safe_dump({"driverVersion": "550.0-sim", "count": 3}))
    proc = tmp_path / "proc-devices"
    proc.write_text(Path("/proc/devices").read_text())
    sro(
        "driver",
        "simulate",
        "--config",
        str(tmp_path / "devices.yaml"),
        *roots(tmp_path),
        "--proc-devices",
        str(proc),
    )
    root = tmp_path / "root"
    made = nodes(tmp_path)
    u = [str(d.uuid) for d in driverstate.read_inventory(root).devices]
    watch = Watch(root)
    try:
        sro("simulate", "fault", "--device", "0", "--device", "1", "--xid", "79", "--driver-root", str(root))
        watch.wait_for("xid", u[0])
        assert faulty(root) == {u[0]: 79, u[1]: 79}

        out = sro("driver", "reset", "--recipe", "simulated-gpu", "--driver-root", str(root), "--device", u[0],
                  "--token", "2026-11-26T01:40:00Z", "--ledger", str(tmp_path / "ledger"))  # fmt: skip
        assert out.strip().endswith("fault cleared (Xid 79) (token 2026-11-26T01:40:00Z)"), out
        watch.wait_for("cleared", u[0])  # the device plugin sees the device healthy again
        assert faulty(root) == {u[1]: 79}  # the other keeps its fault
        assert not any(e.kind == "cleared" and e.device == u[1] for e in watch.events)

        before = boot_id(root)
        out = sro(
            "driver",
            "reboot",
            "--recipe",
            "simulated-gpu",
            "--driver-root",
            str(root),
            "--token",
            "T2",
            "--ledger",
            str(tmp_path / "ledger"),
        )
        watch.wait_for("cleared", u[1])
        assert faulty(root) == {}
        after = boot_id(root)
        assert after and after != before and f"boot id {after} (token T2)" in out
    finally:
        watch.close()
    # the driver's device nodes are untouched by either
    assert nodes(tmp_path) == made and len(made) == 4  # 3 GPUs and the control node


def test_reset_of_the_simulated_nvidia_driver_rewrites_its_nvml_state(tmp_path: Path) -> None:
    proc_devices = Path("/proc/devices").read_text()
    if simulated_nvidia.refusal("", proc_devices) is not None:
        pytest.skip("this host has a real NVIDIA driver")
    native = tmp_path / "native"
    native.mkdir()
    (native / "libnvidia-ml.so.1").write_bytes(b"\x7fELF placeholder")  # the state file is what counts
    (native / "nvidia-smi").write_text("#!/bin/sh\n")
    (tmp_path / "modules").write_text("snd 1 0 - Live 0x0\n")
    (tmp_path / "devices.yaml").write_text(yaml.safe_dump({"personality": "nvidia", "count": 2}))
    sro("driver", "simulate", "--config", str(tmp_path / "devices.yaml"), *roots(tmp_path),
        "--proc-modules", str(tmp_path / "modules"), "--native-dir", str(native))  # fmt: skip
    root = tmp_path / "root"
    state = root / "run/sro-simnvml/state"
    u = [str(d.uuid) for d in driverstate.read_inventory(root).devices]
    sro("simulate", "fault", "--device", "1", "--xid", "79", "--driver-root", str(root))
    assert [g["lost"] for g in records(state.read_text(), "gpu")] == ["0", "1"]

    # nvidia-gpu's own recipe (spec.driver.mode: simulated): found simulated by its device list
    out = sro("driver", "reset", "--recipe", "nvidia-gpu", "--driver-root", str(root), "--device", u[1])
    assert "SIMULATED reset" in out and "Xid 79" in out
    assert [g["lost"] for g in records(state.read_text(), "gpu")] == ["0", "0"]

    sro("simulate", "fault", "--all", "--xid", "48", "--driver-root", str(root))
    sro("driver", "reboot", "--recipe", "nvidia-gpu", "--driver-root", str(root))
    assert faulty(root) == {} and [g["lost"] for g in records(state.read_text(), "gpu")] == ["0", "0"]
