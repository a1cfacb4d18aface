"""Every counter dcgm-exporter enables by default is exported, on both backends, as dcgm-exporter
names, types and describes it; and the simulated model's PCIe and NVLink rules.

The rows below are the enabled (uncommented) rows of dcgm-exporter's `etc/default-counters.csv` at
tag 4.6.0-4.8.3, as data: (field, Prometheus type, help). `DCGM_FI_PROF_*` rows come from DCGM's
profiling module, not from NVML, so only the simulated backend must give all of them; NVML gives
the PCIe ones (`nvmlDeviceGetPcieThroughput`). `DCGM_FI_DRIVER_VERSION` is typed `label` there: a
label on every series.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sro.devices import driverstate, simnvml_state, simreadings, simulated_nvidia
from sro.devices import fields as f
from sro.devices.driverstate import Fault
from sro.devices.model import Device, DeviceUUID, Inventory
from sro.devices.nvml import NvmlBackend
from sro.devices.telemetry import NvmlTelemetry
from sro.local.native import SimNvmlBuild
from sro.node.exporter.collecting import Collector
from tests.simnvml import simnvml_build  # noqa: F401
from tests.unit.exporter_support import FakeKubelet, collector, driver_root

DCGM_EXPORTER_TAG = "4.6.0-4.8.3"
DEFAULT_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gauge", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
)  # fmt: skip
PROFILING: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second."),
)  # fmt: skip
FROM_NVML = DEFAULT_COUNTERS + tuple(row for row in PROFILING if "PCIE" in row[0])
LABEL_ROWS = ("DCGM_FI_DRIVER_VERSION",)


@pytest.fixture
def tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="dcgm", dir="/tmp"))  # unix socket paths max 107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


def families(text: str) -> dict[str, Any]:
    return {fam.name: fam for fam in text_string_to_metric_families(text)}


def check_exported(text: str, rows: tuple[tuple[str, str, str], ...], gpus: int) -> dict[str, Any]:
    """Each row is a family of its type and help with one sample per GPU, and carries the driver label."""
    fams = families(text)
    for name, kind, help_text in rows:
        assert name in fams, f"{name} missing from the exporter's output"
        fam = fams[name]
        assert (fam.type, fam.documentation) == (kind, help_text), name
        assert len({s.labels["UUID"] for s in fam.samples}) == gpus, name
        assert all(label in s.labels for s in fam.samples for label in LABEL_ROWS), name
    return fams


def test_the_field_table_follows_the_csv() -> None:
    assert f.DEFAULT_COUNTERS_TAG == DCGM_EXPORTER_TAG
    for name, kind, help_text in DEFAULT_COUNTERS + PROFILING:
        assert name in f.BY_NAME, name
        assert (f.BY_NAME[name].type, f.BY_NAME[name].help) == (kind, help_text), name
    csv_order = [name for name, _, _ in DEFAULT_COUNTERS + PROFILING]
    ours = [fld.name for fld in f.FIELDS if fld.name in csv_order]
    assert ours == csv_order  # printed in the csv's order


def test_every_default_counter_on_the_simulated_backend(tmp: Path) -> None:
    root = driver_root(tmp)
    kubelet = FakeKubelet(tmp / "kubelet.sock")
    c = collector(root, kubelet.path, {}, {})
    try:
        c.prime(0.1)
        text = c.collect().text.decode()
    finally:
        c.close()
        kubelet.stop()
    fams = check_exported(text, DEFAULT_COUNTERS + PROFILING, gpus=8)
    assert all(s.labels["simulated"] == "true" for s in fams[f.NVLINK_BANDWIDTH_TOTAL].samples)
    assert all(s.value == 0 for s in fams[f.PCIE_TX_BYTES].samples)  # an idle node moves nothing


# --- the nvml backend, with a fake of the pynvml module ------------------------------------------

MIB = 1 << 20


class FakeNvml:
    """The pynvml calls NvmlBackend and NvmlTelemetry make, for two H100s joined by 4 NVLinks.

    Constants and error classes are pynvml's own (real codes, real exception classes)."""

    BUS = ("00000000:3B:00.0", "00000000:86:00.0")
    TX_KIBPS, RX_KIBPS = 5000.0, 3000.0  # NVLink traffic of GPU 0; GPU 1 has none

    def __init__(self) -> None:
        import pynvml

        self.pynvml = pynvml
        self.now = 100.0
        self.licensed = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML", "nvmlEventType", "nvmlMemory_v2")):
            return getattr(self.pynvml, name)
        raise AttributeError(name)

    def error(self, code: int) -> Exception:
        error: Exception = self.pynvml.NVMLError(code)  # pynvml picks the subclass (NotSupported ...)
        return error

    # inventory
    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return int(uuid.rsplit("-", 1)[1])

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-fake-{h}"

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self.BUS[h].encode())

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        return h

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return 9, 0

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetNumaNodeId(self, h: int) -> int:
        return h

    def nvmlDeviceGetMigMode(self, h: int) -> Any:
        raise self.error(self.pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> Any:
        return self.pynvml.NVML_FEATURE_ENABLED if link < 4 else self.pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        return SimpleNamespace(busId=self.BUS[1 - h].encode())

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.90.07"

    # health events: none come
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceGetSupportedEventTypes(self, h: int) -> int:
        return 0xFFFF

    def nvmlDeviceRegisterEvents(self, h: int, mask: int, event_set: object) -> None: ...
    def nvmlEventSetWait_v2(self, event_set: object, ms: int) -> Any:
        threading.Event().wait(0.05)
        raise self.error(self.pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: object) -> None: ...

    # readings
    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        return SimpleNamespace(total=81559 * MIB, used=1000 * MIB, free=79997 * MIB, reserved=562 * MIB)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=37, memory=12)

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return 1980 if kind == self.pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 41

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 123456

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return 987654

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        return 0

    def nvmlDeviceGetEncoderUtilization(self, h: int) -> list[int]:
        return [3, 1000]

    def nvmlDeviceGetDecoderUtilization(self, h: int) -> list[int]:
        return [4, 1000]

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return 0

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return 0, 0, 0, 0

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        return 2000 if counter == self.pynvml.NVML_PCIE_UTIL_TX_BYTES else 7000  # KB/s

    def nvmlDeviceGetGridLicensableFeatures(self, h: int) -> Any:
        state = 1 if self.licensed else 0
        feature = SimpleNamespace(featureState=state)
        return SimpleNamespace(isGridLicenseSupported=1, licensableFeaturesCount=1,
                               gridLicensableFeatures=[feature, SimpleNamespace(featureState=1)])  # fmt: skip

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[Any]) -> list[Any]:
        p = self.pynvml
        if ids == [p.NVML_FI_DEV_MEMORY_TEMP]:
            return [SimpleNamespace(nvmlReturn=p.NVML_SUCCESS, valueType=p.NVML_VALUE_TYPE_UNSIGNED_INT,
                                    value=SimpleNamespace(uiVal=45))]  # fmt: skip
        assert all(scope == 0xFFFFFFFF for _, scope in ids)  # the sum over every link
        rate = {p.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: self.TX_KIBPS, p.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: self.RX_KIBPS}  # fmt: skip
        return [
            SimpleNamespace(nvmlReturn=p.NVML_SUCCESS, valueType=p.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                            value=SimpleNamespace(ullVal=int(rate[i] * self.now * (h == 0))))
            for i, _ in ids
        ]  # fmt: skip

    def advance(self, seconds: float) -> None:
        self.now += seconds


def nvml_backend(fake: FakeNvml, sys_root: Path, monkeypatch: pytest.MonkeyPatch) -> NvmlBackend:
    """NvmlBackend over the fake module: its constructor imports `pynvml`, and gets the fake."""
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return NvmlBackend(sys_root=sys_root)


def test_every_default_counter_on_the_nvml_backend(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    backend = nvml_backend(fake, tmp, monkeypatch)
    telemetry = NvmlTelemetry(fake, clock=lambda: fake.now, sleep=fake.advance)
    c = Collector(lambda: (backend, telemetry), domain="nvidia.com", hostname="node-1", simulated=False)
    try:
        first = c.collect().text.decode()
        fake.advance(30.0)
        fake.licensed = True
        second = c.collect().text.decode()
    finally:
        c.close()
    for text in (first, second):
        fams = check_exported(text, FROM_NVML, gpus=2)
        assert not any(s.labels.get("simulated") for fam in fams.values() for s in fam.samples)
        assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in fams  # profiling: not from NVML
        value = {
            (n, s.labels["gpu"]): s.value for n, fam in fams.items() for s in fam.samples if "gpu" in s.labels
        }
        assert value[f.PCIE_TX_BYTES, "0"] == 2000 * 1024 and value[f.PCIE_RX_BYTES, "1"] == 7000 * 1024
        # 8000 KiB/s over the links, first over the 0.1 s first window, then over 30 s
        assert value[f.NVLINK_BANDWIDTH_TOTAL, "0"] == pytest.approx(8000 * 1024 / 1e6)
        assert value[f.NVLINK_BANDWIDTH_TOTAL, "1"] == 0
        assert value[f.POWER_USAGE, "0"] == 123.456 and value[f.MEMORY_TEMP, "1"] == 45
    assert (
        'DCGM_FI_DEV_VGPU_LICENSE_STATUS{gpu="0"' in first
        and families(first)[f.VGPU_LICENSE_STATUS].samples[0].value == 0
    )
    assert families(second)[f.VGPU_LICENSE_STATUS].samples[0].value == 1


def test_nvml_telemetry_without_nvlink_or_licensing() -> None:
    fake = FakeNvml()
    p = fake.pynvml

    def no_nvlink(h: int, ids: list[Any]) -> list[Any]:
        return [SimpleNamespace(nvmlReturn=p.NVML_ERROR_NOT_SUPPORTED) for _ in ids]

    def no_licensing(h: int) -> Any:
        raise fake.error(p.NVML_ERROR_FUNCTION_NOT_FOUND)

    slept: list[float] = []
    fake.nvmlDeviceGetFieldValues = no_nvlink  # type: ignore[method-assign]
    fake.nvmlDeviceGetGridLicensableFeatures = no_licensing  # type: ignore[method-assign]
    gpu = Device(DeviceUUID("GPU-fake-0"), 0, 0, "/dev/nvidia0", "0000:3b:00.0", "NVIDIA L4", 23034, "8.9")
    r = NvmlTelemetry(fake, sleep=slept.append).read(Inventory("nvml", (gpu,)), {})
    v = r.values[gpu.uuid]
    assert v[f.NVLINK_BANDWIDTH_TOTAL] == 0 and v[f.VGPU_LICENSE_STATUS] == 0
    assert slept == []  # no NVLink: no second sample to wait for


# --- the simulated model's PCIe and NVLink rules -------------------------------------------------


def two_linked(links: int = 4) -> Inventory:
    a, b = DeviceUUID("GPU-a"), DeviceUUID("GPU-b")
    return Inventory("simulated", (
        Device(a, 0, 0, "/dev/x0", "0000:10:00.0", "SRO Simulated H100 80GB", 81920, "9.0", nvlinks={b: links}),
        Device(b, 1, 1, "/dev/x1", "0000:11:00.0", "SRO Simulated H100 80GB", 81920, "9.0", nvlinks={a: links}),
    ))  # fmt: skip


def test_pcie_follows_memory_copy_and_nvlink_follows_utilisation() -> None:
    inv = two_linked()
    a, b = (d.uuid for d in inv.devices)
    step = simreadings.step(simreadings.SimState(), inv, {a: 2}, {}, {}, 0.0)
    busy, idle = step.readings[a], step.readings[b]
    assert idle[f.PCIE_TX_BYTES] == idle[f.PCIE_RX_BYTES] == 0
    lane_bytes = 16 * 3938e6  # PCIe 5 x16 for compute capability 9.0
    rx_share = busy[f.PCIE_RX_BYTES] / lane_bytes
    assert rx_share == pytest.approx(busy[f.MEM_COPY_UTIL] / 100 * 0.25, rel=1e-3)
    assert busy[f.PCIE_TX_BYTES] == pytest.approx(busy[f.PCIE_RX_BYTES] / 2, abs=1024)
    assert busy[f.PCIE_RX_THROUGHPUT] * 1024 == busy[f.PCIE_RX_BYTES]  # NVML's KB/s, exactly
    # 4 links x 25 GB/s x 40 % x util, sent by the busy GPU, received by the idle one
    sent = busy[f.GPU_UTIL] / 100 * 0.4 * 25e9 * 4
    assert busy[f.NVLINK_BANDWIDTH_TOTAL] == idle[f.NVLINK_BANDWIDTH_TOTAL] == round(sent / 1e6)
    assert busy[f.VGPU_LICENSE_STATUS] == 0
    lone = Inventory(
        "simulated", (Device(a, 0, 0, "/dev/x0", "0000:10:00.0", "SRO Simulated A100", 40960, "8.0"),)
    )
    alone = simreadings.step(simreadings.SimState(), lone, {a: 2}, {}, {}, 0.0).readings[a]
    assert alone[f.NVLINK_BANDWIDTH_TOTAL] == 0 and alone[f.PCIE_RX_BYTES] > 0  # no peers: no NVLink


def test_nvlink_counters_accumulate_and_a_lost_peer_carries_nothing() -> None:
    inv = two_linked()
    a, b = (d.uuid for d in inv.devices)
    s1 = simreadings.step(simreadings.SimState(), inv, {a: 1}, {}, {}, 0.0)
    assert s1.readings[a][f.NVLINK_TX_KIB] == 0  # no time has passed
    s2 = simreadings.step(s1.state, inv, {a: 1}, {}, {}, 10.0)
    rate = s2.readings[a][f.NVLINK_BANDWIDTH_TOTAL] * 1e6  # bytes/s, all sent by a (b is idle)
    assert s2.readings[a][f.NVLINK_TX_KIB] == pytest.approx(rate * 10 / 1024, rel=1e-3)
    assert s2.readings[a][f.NVLINK_RX_KIB] == s2.readings[b][f.NVLINK_TX_KIB] == 0
    assert s2.readings[b][f.NVLINK_RX_KIB] == s2.readings[a][f.NVLINK_TX_KIB]  # what a sends, b gets
    lost = {b: Fault(xid=79, since=1.0)}
    s3 = simreadings.step(s2.state, inv, {a: 1}, {}, lost, 10.0)
    assert b in s3.silent and s3.readings[a][f.NVLINK_BANDWIDTH_TOTAL] == 0
    assert s3.readings[a][f.NVLINK_TX_KIB] == s2.readings[a][f.NVLINK_TX_KIB]  # nothing more moved


# --- `sro exporter --once` on the nvml backend against the real simulated NVML library ----------

SIMULATED_NVIDIA = {"personality": "nvidia", "count": 2, "nvlinks": [{"between": [0, 1], "links": 4}]}


@pytest.mark.root
def test_once_on_the_simulated_nvidia_driver(tmp_path: Path, simnvml_build: SimNvmlBuild) -> None:  # noqa: F811
    """Every default counter, read by NVML from the simulated driver's libnvidia-ml.so.1 (a child
    process: NVML is process-global), with the state file's numbers."""
    modules = Path("/proc/modules")
    proc_devices = Path("/proc/devices").read_text()
    reason = simulated_nvidia.refusal(modules.read_text() if modules.exists() else "", proc_devices)
    if reason is not None:
        pytest.skip(f"a real NVIDIA driver is loaded here: {reason}")
    native = tmp_path / "native"
    native.mkdir()
    assert simnvml_build.smi is not None
    for src in (simnvml_build.library, simnvml_build.smi):
        shutil.copy(src, native / src.name)
    root, dev = tmp_path / "run/nvidia/driver", tmp_path / "dev"
    inv = simulated_nvidia.parse(SIMULATED_NVIDIA)
    simulated_nvidia.install(inv, root, dev, proc_devices, "", simulated_nvidia.find_native(native))
    driverstate.set_load(root, inv.devices[0].uuid, 80.0, 20000)
    simnvml_state.write_state(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRO_SIMNVML")}
    env["SRO_SIMNVML_DEV_ROOT"] = str(dev)
    cmd = [sys.executable, "-m", "sro", "exporter", "--recipe", "nvidia-gpu", "--driver-root", str(root)]
    r = subprocess.run(
        [*cmd, "--once", "--node-name", "n1"], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    fams = check_exported(r.stdout, FROM_NVML, gpus=2)
    state = {
        (rec["index"], key): value
        for line in (root / "run/sro-simnvml/state").read_text().splitlines()
        if line.startswith("reading ")
        for rec in [dict(kv.split("=", 1) for kv in line.split()[1:])]
        for key, value in rec.items()
    }
    value = {
        (n, s.labels["gpu"]): s.value for n, fam in fams.items() for s in fam.samples if "gpu" in s.labels
    }
    assert value[f.GPU_UTIL, "0"] == int(state["0", "util"]) >= 70 and value[f.GPU_UTIL, "1"] == 0
    assert value[f.PCIE_RX_BYTES, "0"] == int(state["0", "pcie_rx"]) * 1024 > 0
    assert value[f.MEMORY_TEMP, "0"] == int(state["0", "memtemp"])
    assert value[f.FB_USED, "0"] == int(state["0", "fb_used"])
    assert value[f.VGPU_LICENSE_STATUS, "0"] == 0 and value[f.NVLINK_BANDWIDTH_TOTAL, "1"] >= 0
    assert {s.labels["modelName"] for s in fams[f.GPU_UTIL].samples} == {d.product for d in inv.devices}
    assert all(d.product.endswith("(simulated)") for d in inv.devices)
