"""NVML readings and the exporter through a real NVML library: on this machine's NVIDIA GPUs (the
`gpu` variant, skipped elsewhere) and on the simulated NVIDIA driver's libnvidia-ml.so.1
(tests/simnvml_driver.py), each in a child process because NVML is process-global. dcgm-exporter's
names either way; the simulated driver's series say simulated, a real GPU's never. A corrupted NVML
state takes the devices source down, said once, and the exporter keeps serving."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from sro.devices import driverstate
from sro.devices import fields as f
from tests.simnvml_driver import (  # noqa: F401  (fixtures: the gpu and simulated NVML variants)
    PYTHON,
    NvmlTarget,
    SimNvmlDriver,
    nvml_target,
    simnvml_build,
    simnvml_driver,
    wait_for,
)

READINGS = """
import json, sys
from pathlib import Path
from sro.devices.nvml import NvmlBackend
from sro.devices.telemetry import NvmlTelemetry
backend = NvmlBackend(driver_root=Path(sys.argv[1]) if len(sys.argv) > 1 else None)
try:
    inv = backend.inventory()
    readings = NvmlTelemetry(backend.nvml).read(inv, {})
finally:
    backend.close()
print(json.dumps({
    "simulated": inv.simulated,
    "devices": [[d.uuid, d.memory_mib, [m.uuid for m in d.mig_devices]] for d in inv.devices],
    "values": readings.values,
    "silent": readings.silent,
}))
"""


def test_nvml_readings_of_every_gpu(nvml_target: NvmlTarget) -> None:  # noqa: F811
    root = [str(nvml_target.driver_root)] if nvml_target.driver_root else []
    r = nvml_target.python_child(READINGS, *root)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["silent"] == {} and got["devices"]
    assert got["simulated"] == nvml_target.simulated
    values = got["values"]
    for uuid, memory_mib, migs in got["devices"]:
        v = values[uuid]
        assert 0 <= v[f.GPU_UTIL] <= 100 and v[f.FB_USED] + v[f.FB_FREE] <= memory_mib + 1
        assert 0 < v[f.GPU_TEMP] < 120 and v[f.POWER_USAGE] > 0 and v[f.SM_CLOCK] > 0
        for m in migs:
            assert values[m][f.FB_FREE] >= 0


def test_once(nvml_target: NvmlTarget) -> None:  # noqa: F811
    r = nvml_target.sro(
        "exporter", "--recipe", "nvidia-gpu", "--once", "--node-name", "gpu-node", *nvml_target.driver_args()
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0"' in out and 'device="nvidia0"' in out
    assert ('simulated="true"' in out) == nvml_target.simulated  # the simulated NVML says so
    assert 'sro_exporter_source_up{Hostname="gpu-node",source="devices"} 1' in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_a_corrupted_nvml_state_is_said_once_and_the_exporter_keeps_serving(
    simnvml_driver: Callable[..., SimNvmlDriver],  # noqa: F811
    tmp_path: Path,
) -> None:
    driver = simnvml_driver()
    port = _free_port()
    (tmp_path / "config.yaml").write_text("health: {recoverAfterSeconds: 0.5}\n")
    log_path = tmp_path / "exporter.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                PYTHON, "-m", "sro", "exporter", "--recipe", "nvidia-gpu", *driver.driver_args(),
                "--address", f"127.0.0.1:{port}", "--interval", "200ms", "--config", str(tmp_path / "config.yaml"),
                "--pod-resources-socket", str(tmp_path / "no-kubelet.sock"),
            ],
            stdout=log, stderr=subprocess.STDOUT, env=dict(driver.env),
        )  # fmt: skip

    def metrics() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return str(r.read().decode())
        except OSError:
            return ""

    def devices_up(up: int) -> Callable[[], bool]:
        def check() -> bool:
            text = metrics()
            health = [x for x in text.splitlines() if x.startswith("sro_device_healthy{")]
            return (
                f'source="devices"}} {up}' in text
                and len(health) == 4
                and all(x.endswith(f" {up}") for x in health)
            )

        return check

    def said() -> list[str]:
        return [x for x in log_path.read_text(errors="replace").splitlines() if "Unknown Error" in x]

    try:
        wait_for(devices_up(1), 60, "the devices source up, every GPU healthy")
        good = driver.state_file.read_text()
        driverstate.write_atomic(driver.state_file, "simnvml version=1\x00 not a state file\n")
        wait_for(devices_up(0), 10, "the devices source down, every GPU unhealthy (NVIDIA's fail-safe)")
        first = said()
        time.sleep(2)  # about ten more collections
        assert proc.poll() is None, log_path.read_text()
        assert said() == first and 1 <= len(first) <= 2, log_path.read_text()  # the source's, the events'
        print("\nwhile NVML fails, the exporter said:", *first, sep="\n  ")
        driverstate.write_atomic(driver.state_file, good)
        wait_for(devices_up(1), 10, "the devices source up again, every GPU healthy")
        assert "Traceback" not in log_path.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
