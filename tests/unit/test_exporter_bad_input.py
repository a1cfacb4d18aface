"""Bad input: a device that stops answering, a missing or restarting kubelet socket, a malformed config
or load file, no driver, an unreadable Node, a broken event stream. The exporter keeps serving the
rest, says what is missing (`sro_exporter_source_up{source} 0`, the error counter) and logs why, once."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sro.devices import driverstate
from sro.devices import fields as f
from sro.devices.model import DeviceUUID, Inventory
from sro.devices.telemetry import NvmlTelemetry
from sro.node.exporter import config as exporter_config
from sro.node.exporter.collecting import STALE_AFTER
from tests.unit.exporter_support import Clock, FakeKubelet, collector, driver_root

RESOURCE = "sro.dev/simulated-gpu"


@pytest.fixture
def tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="exb", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def lines(text: bytes, prefix: str) -> list[str]:
    return [line for line in text.decode().splitlines() if line.startswith(prefix)]


def up(text: bytes, source: str) -> str:
    (line,) = [x for x in lines(text, "sro_exporter_source_up") if f'source="{source}"' in x]
    return line.rsplit(" ", 1)[1]


def errors(text: bytes, source: str) -> int:
    (line,) = [x for x in lines(text, "sro_exporter_collect_errors_total") if f'source="{source}"' in x]
    return int(line.rsplit(" ", 1)[1])


def test_a_device_that_stops_answering(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = driver_root(tmp)
    u = [d.uuid for d in driverstate.read_inventory(root).devices]
    driverstate.set_fault(root, u[2], 79)
    c = collector(root)
    try:
        c.prime(0.2)
        with caplog.at_level(logging.WARNING):
            text = c.collect().text
            again = c.collect().text
        assert len(lines(text, "DCGM_FI_DEV_GPU_UTIL")) == 7  # the other seven answer
        assert not [x for x in lines(text, "DCGM_FI_DEV_GPU_UTIL") if 'gpu="2"' in x]
        assert next(x for x in lines(text, "DCGM_FI_DEV_XID_ERRORS") if 'gpu="2"' in x).endswith(" 79")
        assert next(x for x in lines(text, "sro_device_healthy") if 'gpu="2"' in x).endswith(" 0")
        assert up(text, "devices") == "0" and errors(again, "devices") == 2
        said = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
        assert len(said) == 1 and u[2] in said[0] and "fallen off the bus" in said[0]  # logged once
        driverstate.clear_faults(root, None)
        with caplog.at_level(logging.INFO):
            text = c.collect().text
        assert up(text, "devices") == "1" and len(lines(text, "DCGM_FI_DEV_GPU_UTIL")) == 8
        assert any("available again" in r.getMessage() for r in caplog.records)
    finally:
        c.close()


def test_missing_kubelet_socket(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    c = collector(driver_root(tmp), tmp / "nothing-here.sock")
    try:
        with caplog.at_level(logging.WARNING):
            text = c.collect().text
    finally:
        c.close()
    assert up(text, "kubelet") == "0" and up(text, "devices") == "1"
    assert len(lines(text, "DCGM_FI_DEV_GPU_UTIL")) == 8 and "pod=" not in text.decode()
    assert not lines(text, "sro_node_devices_allocated")  # unknown, not 0
    assert any("no such socket" in r.getMessage() for r in caplog.records)


def test_restarting_kubelet_keeps_then_drops_pod_labels(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = driver_root(tmp)
    u = [d.uuid for d in driverstate.read_inventory(root).devices]
    path = tmp / "kubelet.sock"
    kubelet = FakeKubelet(path, [("ns", "p", "c", RESOURCE, [u[0]])])
    clock = Clock()
    c = collector(root, path, clock=clock)
    try:
        assert 'pod="p"' in c.collect().text.decode()
        kubelet.stop()  # the kubelet restarts: its socket goes away
        clock.now += 30
        with caplog.at_level(logging.WARNING):
            text = c.collect().text
        assert up(text, "kubelet") == "0" and 'pod="p"' in text.decode()  # kept while fresh
        assert any("pod labels from 30s ago" in r.getMessage() for r in caplog.records)
        clock.now += STALE_AFTER
        text = c.collect().text
        assert up(text, "kubelet") == "0" and "pod=" not in text.decode()  # too old: dropped
        kubelet = FakeKubelet(path, [("ns", "q", "c", RESOURCE, [u[1]])])  # back, on a new socket
        text = c.collect().text
        assert up(text, "kubelet") == "1" and 'pod="q"' in text.decode() and 'pod="p"' not in text.decode()
        assert errors(text, "kubelet") == 2
    finally:
        c.close()
        kubelet.stop()


def test_malformed_config_keeps_the_last_good_policy(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = driver_root(tmp)
    u = [d.uuid for d in driverstate.read_inventory(root).devices]
    cfg = tmp / "config.yaml"
    cfg.write_text("version: v1\nflags: {migStrategy: none}\nhealth: {ignoredXids: [48]}\n")  # a plugin file
    c = collector(root, config=cfg)
    try:
        text = c.collect().text
        assert up(text, "config") == "1" and c.policy.ignored_xids == frozenset({48})
        cfg.write_text("health: {ignoredXids: oops}\n")
        with caplog.at_level(logging.WARNING):
            text = c.collect().text
        assert up(text, "config") == "0" and c.policy.ignored_xids == frozenset({48})
        said = [r.getMessage() for r in caplog.records if "source config" in r.getMessage()]
        assert len(said) == 1 and "health.ignoredXids" in said[0] and "keeping the previous" in said[0]
        driverstate.set_fault(root, u[0], 48)  # ignored by the policy still in force
        c.prime(0.2)
        text = c.collect().text
        assert next(x for x in lines(text, "sro_device_healthy") if 'gpu="0"' in x).endswith(" 1")
        cfg.unlink()  # an optional ConfigMap that is not there: the default policy, not an error
        text = c.collect().text
        assert up(text, "config") == "1" and 48 not in c.policy.ignored_xids
    finally:
        c.close()


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[1, 2]", "top level"),
        ("health: 3", "health: expected a mapping"),
        ("health: {recoverAfterSeconds: -1}", "health.recoverAfterSeconds"),
        ("health: {enabled: maybe}", "health.enabled"),
        ("health: {ignoredXid: [1]}", "unknown field"),
        ("health: [", "not YAML"),
    ],
)
def test_config_errors_name_the_field(tmp: Path, text: str, where: str) -> None:
    path = tmp / "c.yaml"
    path.write_text(text)
    with pytest.raises(exporter_config.ConfigError, match=where):
        exporter_config.load(path)


def test_malformed_load_file(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = driver_root(tmp)
    (root / driverstate.SIMULATED_LOADS).write_text('{"loads": {"GPU-x": {"util": 300}}}')
    c = collector(root)
    try:
        with caplog.at_level(logging.WARNING):
            text = c.collect().text
    finally:
        c.close()
    assert up(text, "devices") == "0" and len(lines(text, "DCGM_FI_DEV_GPU_UTIL")) == 8
    assert any("load state ignored" in r.getMessage() and "util" in r.getMessage() for r in caplog.records)


def test_no_driver_yet_then_installed(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp / "driver"
    c = collector(root, allocatable={RESOURCE: "8"})
    try:
        with caplog.at_level(logging.WARNING):
            text = c.collect().text
        assert up(text, "devices") == "0" and up(text, "node") == "1"
        assert not lines(text, "DCGM_") and lines(text, "sro_node_devices_allocatable")
        assert any("sro driver simulate" in r.getMessage() for r in caplog.records)
        driver_root(tmp)  # the driver arrives
        text = c.collect().text
        assert up(text, "devices") == "1" and len(lines(text, "DCGM_FI_DEV_GPU_UTIL")) == 8
    finally:
        c.close()


def test_node_unreadable(tmp: Path) -> None:
    def refuse() -> Any:
        raise RuntimeError("get node node-1: 403 Forbidden nodes is forbidden")

    c = collector(driver_root(tmp), read_node=refuse)
    try:
        text = c.collect().text
    finally:
        c.close()
    assert up(text, "node") == "0" and not lines(text, "sro_node_stack_state")
    assert len(lines(text, "sro_device_healthy")) == 8


def test_no_node_name(tmp: Path) -> None:
    c = collector(driver_root(tmp))
    try:
        text = c.collect().text
    finally:
        c.close()
    assert up(text, "node") == "0" and not lines(text, "sro_node_devices_allocatable")


def test_broken_event_stream_fails_safe(tmp: Path) -> None:
    root = driver_root(tmp)
    c = collector(root)
    try:
        c.collect()
        dev = c._devices
        assert dev.backend is not None

        def broken(stop: threading.Event) -> Iterator[Any]:
            raise OSError("event source gone")
            yield  # pragma: no cover

        dev.stop.set()
        assert dev.thread is not None
        dev.thread.join(timeout=2)
        dev.stop = threading.Event()
        dev.backend.events = broken  # type: ignore[method-assign]
        dev.thread = threading.Thread(target=c._watch_events, args=(dev.backend, dev.stop), daemon=True)
        dev.thread.start()
        deadline = threading.Event()
        for _ in range(100):
            text = c.collect().text
            if all(x.endswith(" 0") for x in lines(text, "sro_device_healthy")):
                break
            deadline.wait(0.02)
        assert all(x.endswith(" 0") for x in lines(text, "sro_device_healthy"))
        assert len(lines(text, "DCGM_FI_DEV_GPU_UTIL")) == 8  # readings still served
    finally:
        c.close()


class FakeNvml:
    """The parts of pynvml NvmlTelemetry calls; GPU "GPU-lost" has fallen off the bus."""

    class NVMLError(Exception):
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_FunctionNotFound(NVMLError):
        pass

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    nvmlMemory_v2 = 33554472
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
    NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED = 0, 3
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
    NVML_FI_DEV_MEMORY_TEMP = 82

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid == "GPU-lost":
            raise self.NVMLError_GpuIsLost("GPU is lost")
        return uuid

    def nvmlDeviceGetMemoryInfo(self, h: str, version: int | None = None) -> Any:
        mib = 1 << 20
        return SimpleNamespace(total=80 * 1024 * mib, used=1000 * mib, free=79000 * mib, reserved=920 * mib)

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        return SimpleNamespace(gpu=37, memory=12)

    def nvmlDeviceGetClockInfo(self, h: str, kind: int) -> int:
        return 1980 if kind == 1 else 2619

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return 41

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return 123456

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        return 987654

    def nvmlDeviceGetPcieReplayCounter(self, h: str) -> int:
        raise self.NVMLError_NotSupported("not supported")

    def nvmlDeviceGetEncoderUtilization(self, h: str) -> list[int]:
        return [3, 1000]

    def nvmlDeviceGetDecoderUtilization(self, h: str) -> list[int]:
        return [4, 1000]

    def nvmlDeviceGetTotalEccErrors(self, h: str, kind: int, counter: int) -> int:
        return kind * 10 + counter

    def nvmlDeviceGetRemappedRows(self, h: str) -> tuple[int, int, int, int]:
        return (2, 1, 0, 0)

    def nvmlDeviceGetPcieThroughput(self, h: str, counter: int) -> int:
        return 100 + counter

    def nvmlDeviceGetGridLicensableFeatures(self, h: str) -> Any:
        raise self.NVMLError_NotSupported("not supported")

    def nvmlDeviceGetFieldValues(self, h: str, fields: list[Any]) -> list[Any]:
        return [SimpleNamespace(nvmlReturn=self.NVML_ERROR_NOT_SUPPORTED) for _ in fields]  # no NVLink


def test_nvml_readings_and_a_lost_gpu() -> None:
    from sro.devices.model import Device

    def gpu(uuid: str, index: int) -> Device:
        return Device(
            DeviceUUID(uuid), index, index, f"/dev/nvidia{index}", f"0000:0{index}:00.0", "H100", 81920, "9.0"
        )

    inv = Inventory("nvml", (gpu("GPU-ok", 0), gpu("GPU-lost", 1)))
    r = NvmlTelemetry(FakeNvml()).read(inv, {})
    assert set(r.values) == {"GPU-ok"} and "GPU is lost" in r.silent[DeviceUUID("GPU-lost")]
    v = r.values[DeviceUUID("GPU-ok")]
    assert (
        v[f.GPU_UTIL] == 37 and v[f.MEM_COPY_UTIL] == 12 and v[f.FB_USED] == 1000 and v[f.FB_RESERVED] == 920
    )
    assert v[f.POWER_USAGE] == 123.456 and v[f.TOTAL_ENERGY] == 987654 and v[f.SM_CLOCK] == 1980
    assert v[f.ENC_UTIL] == 3 and v[f.DEC_UTIL] == 4
    assert v[f.ECC_SBE_VOL] == 0 and v[f.ECC_DBE_VOL] == 10 and v[f.ECC_DBE_AGG] == 11
    assert v[f.CORRECTABLE_REMAPPED_ROWS] == 2 and v[f.UNCORRECTABLE_REMAPPED_ROWS] == 1
    assert v[f.ROW_REMAP_FAILURE] == 0
    assert f.PCIE_REPLAY not in v  # not supported: left out, not 0
    assert v[f.PCIE_RX_BYTES] == 101 * 1024 and v[f.NVLINK_BANDWIDTH_TOTAL] == v[f.VGPU_LICENSE_STATUS] == 0


def test_nvml_api_used_exists_in_nvidia_ml_py() -> None:
    import pynvml

    for name in dir(FakeNvml):
        if name.startswith(("nvml", "NVML")):
            assert hasattr(pynvml, name), name


def test_loads_file_round_trip(tmp: Path) -> None:
    root = tmp / "d"
    u = DeviceUUID("GPU-a")
    driverstate.set_load(root, u, 50.0, None)
    assert driverstate.read_loads(root)[u].util == 50.0 and driverstate.read_loads(root)[u].memory_mib is None
    doc = json.loads((root / driverstate.SIMULATED_LOADS).read_text())
    assert "memoryMiB" not in doc["loads"][u]
    assert driverstate.clear_loads(root, None) == [u] and driverstate.read_loads(root) == {}
