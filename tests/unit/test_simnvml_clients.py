"""Real NVML clients against the simulated libnvidia-ml.so.1: nvidia-ml-py, sro's own `nvml`
backend and telemetry, a client with its own habits, and gpustat from PyPI.

Why real clients: the library is only right if the programs written for NVIDIA's library work on
it unchanged and report what the simulated driver's state says. Each client runs in a child
process (NVML's state is global to a process), loading the library the way sro's device plugin
does (ctypes.CDLL(path, RTLD_GLOBAL) first; pynvml's own dlopen("libnvidia-ml.so.1") then finds
it loaded by its soname).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sro.devices import simnvml_state, simreadings, simulated_nvidia
from sro.devices.model import Inventory
from tests import simnvml
from tests.simnvml import (
    FIXTURE,
    UUID0,
    UUID1,
    WRITER_DOC,
    make_nodes,
    run_python,
)

A100 = "NVIDIA A100-SXM4-40GB (simulated)"

PRELOAD = """
import ctypes, json, os, sys, threading, time
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import pynvml as n
def s(x):  # nvidia-ml-py 12 gives bytes for char fields, 13 str
    return x.decode() if isinstance(x, bytes) else x
out = {}
"""

# the library's fixtures, asked for by name (tests/simnvml.py)
simnvml_build, lib, env = simnvml.simnvml_build, simnvml.lib, simnvml.env


def client(lib: Path, body: str, env: dict[str, str], timeout: float = 60) -> Any:
    return run_python(PRELOAD + body + "\nprint(json.dumps(out))\n", [str(lib)], env, timeout)


def test_pynvml_reads_what_the_state_says(lib: Path, env: dict[str, str]) -> None:
    out = client(
        lib,
        """
n.nvmlInit()
out["driver"] = n.nvmlSystemGetDriverVersion()
out["nvml"] = n.nvmlSystemGetNVMLVersion()
out["cuda"] = n.nvmlSystemGetCudaDriverVersion(), n.nvmlSystemGetCudaDriverVersion_v2()
out["gpus"] = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    pci = n.nvmlDeviceGetPciInfo(h)
    mem = n.nvmlDeviceGetMemoryInfo(h)
    util = n.nvmlDeviceGetUtilizationRates(h)
    fields = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, n.NVML_FI_DEV_MEMORY_TEMP,
                                            (n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF), 5000])
    out["gpus"].append({
        "name": n.nvmlDeviceGetName(h), "uuid": n.nvmlDeviceGetUUID(h), "serial": n.nvmlDeviceGetSerial(h),
        "index": n.nvmlDeviceGetIndex(h), "minor": n.nvmlDeviceGetMinorNumber(h),
        "bus": s(pci.busId), "legacy": s(pci.busIdLegacy), "pci_id": pci.pciDeviceId,
        "mem": [mem.total >> 20, mem.used >> 20, mem.free >> 20], "util": [util.gpu, util.memory],
        "temp": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
        "power": n.nvmlDeviceGetPowerUsage(h), "limit": n.nvmlDeviceGetEnforcedPowerLimit(h),
        "energy": n.nvmlDeviceGetTotalEnergyConsumption(h),
        "clocks": [n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM), n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM),
                   n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)],
        "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)), "arch": n.nvmlDeviceGetArchitecture(h),
        "brand": n.nvmlDeviceGetBrand(h), "pcie": [n.nvmlDeviceGetCurrPcieLinkGeneration(h),
                                                   n.nvmlDeviceGetCurrPcieLinkWidth(h)],
        "ecc": [n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
                n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_AGGREGATE_ECC)],
        "rows": list(n.nvmlDeviceGetRemappedRows(h)),
        "pcie_tp": [n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES),
                    n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES)],
        "codec": [n.nvmlDeviceGetEncoderUtilization(h)[0], n.nvmlDeviceGetDecoderUtilization(h)[0]],
        "procs": [n.nvmlDeviceGetComputeRunningProcesses(h), n.nvmlDeviceGetGraphicsRunningProcesses(h)],
        "mig": n.nvmlDeviceGetMigMode(h),
        "links": [[n.nvmlDeviceGetNvLinkState(h, l), s(n.nvmlDeviceGetNvLinkRemotePciInfo(h, l).busId),
                   n.nvmlDeviceGetNvLinkVersion(h, l)] for l in range(2)],
        "fields": [[v.nvmlReturn, v.value.ullVal if v.valueType == 3 else v.value.uiVal] for v in fields],
        "reasons": n.nvmlDeviceGetCurrentClocksEventReasons(h),
        "pstate": n.nvmlDeviceGetPerformanceState(h),
    })
n.nvmlShutdown()
""",
        env,
    )
    assert out["driver"] == "550.90.07" and out["nvml"] == "12.550.90.07" and out["cuda"] == [12040, 12040]
    g0, g1 = out["gpus"]
    assert (g0["name"], g0["uuid"], g0["index"], g0["minor"]) == (A100, UUID0, 0, 0)
    assert (g1["uuid"], g1["index"], g1["serial"]) == (UUID1, 1, "1320221000001")
    assert g0["bus"] == "00000000:3B:00.0" and g0["legacy"] == "0000:3B:00.0"
    assert g0["pci_id"] == 0x20B010DE  # A100-SXM4-40GB's device id, NVIDIA's vendor id
    assert g0["mem"] == [40960, 1024 + 512, 40960 - 1536] and g0["util"] == [42, 17]
    assert (g0["temp"], g0["power"], g0["limit"], g0["energy"]) == (51, 123456, 400000, 987654321)
    assert g0["clocks"] == [1290, 1410, 1215] and g0["cc"] == [8, 0] and g0["arch"] == 7  # Ampere
    assert g0["brand"] == 14 and g0["pcie"] == [4, 16] and g0["ecc"] == [3, 4] and g0["rows"] == [5, 6, 0, 1]
    assert g0["pcie_tp"] == [3000, 4000] and g0["codec"] == [7, 8] and g0["procs"] == [[], []]
    assert g0["mig"] == [0, 0] and g1["mig"] == [1, 1]
    assert g0["links"] == [[1, "00000000:86:00.0", 4], [1, "00000000:86:00.0", 4]]  # NVLink 3.0
    assert g1["links"][1][0] == 0  # the inactive link
    assert g0["fields"] == [[0, 1], [0, 55], [0, 110], [3, 0]]  # tx over both links; 5000: not supported
    assert g0["reasons"] == 0 and g1["reasons"] == 1  # busy; idle
    assert g0["pstate"] == 0 and g1["pstate"] == 8


def _driver_root(lib: Path, root: Path, state: str) -> Path:
    """A driver root laid out as the simulated driver lays it out: the library under
    usr/lib/x86_64-linux-gnu (with its .so.1 link), the state under run/sro-simnvml."""
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    shutil.copy(lib, libdir / "libnvidia-ml.so.550.90.07")
    (libdir / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.550.90.07")
    (root / "run/sro-simnvml").mkdir(parents=True)
    (root / "run/sro-simnvml/state").write_text(state)
    return root


# sro's nvml backend as the device plugin and exporter run it: from a driver root, no env pointing
# at the state (the library finds it next to itself), the inventory, readings and health events.
SRO_BACKEND = """
import dataclasses, json, sys, threading, time
from pathlib import Path
from sro.devices.nvml import NvmlBackend
from sro.devices.telemetry import NvmlTelemetry
root, sys_root = Path(sys.argv[1]), Path(sys.argv[2])
backend = NvmlBackend(sys_root=sys_root, driver_root=root)
inv = backend.inventory()
out = {"inventory": dataclasses.asdict(inv)}
readings = NvmlTelemetry(backend.nvml).read(inv, {})
out["values"], out["silent"] = readings.values, readings.silent
stop = threading.Event()
events = []
def watch():
    for e in backend.events(stop):
        events.append(dataclasses.asdict(e))
        if len(events) == 2:
            stop.set()
t = threading.Thread(target=watch)
t.start()
time.sleep(0.5)
state = root / "run/sro-simnvml/state"
tmp = state.with_suffix(".tmp")
tmp.write_text(state.read_text() + "fault index=0 mig=-1 xid=79 seq=1800000000000000\\n"
               + "fault index=1 mig=1 xid=31 seq=1800000000000001\\n")
tmp.replace(state)
t.join(10)
stop.set()
out["events"] = events
backend.close()
print(json.dumps(out))
"""


def test_sro_nvml_backend_and_telemetry(lib: Path, env: dict[str, str], tmp_path: Path) -> None:
    root = _driver_root(lib, tmp_path / "driver", FIXTURE.read_text())
    sys_root = tmp_path / "sys"
    sys_root.mkdir()
    dev_env = {"SRO_SIMNVML_DEV_ROOT": env["SRO_SIMNVML_DEV_ROOT"]}
    out = run_python(SRO_BACKEND, [str(root), str(sys_root)], dev_env)
    inv = out["inventory"]
    assert inv["backend"] == "nvml" and inv["driver_version"] == "550.90.07"
    d0, d1 = inv["devices"]
    assert (d0["uuid"], d0["index"], d0["minor"], d0["device_node"]) == (UUID0, 0, 0, "/dev/nvidia0")
    assert d0["pci_bus_id"] == "0000:3b:00.0" and d1["pci_bus_id"] == "0000:86:00.0"
    assert d0["product"] == A100 and d0["memory_mib"] == 40960 and d0["compute_capability"] == "8.0"
    assert d0["numa_node"] == 0 and d1["numa_node"] is None  # -1: no NVML answer, no sysfs entry
    assert d0["nvlinks"] == {UUID1: 2} and d1["nvlinks"] == {UUID0: 1}  # active links only
    assert not d0["mig_enabled"] and d1["mig_enabled"]
    migs = [
        (m["uuid"], m["index"], m["profile"], m["memory_mib"], m["gi_id"], m["ci_id"])
        for m in d1["mig_devices"]
    ]
    assert migs == [
        ("MIG-aaaaaaaa-0000-4000-8000-000000000000", 0, "3g.20gb", 20096, 1, 0),
        ("MIG-aaaaaaaa-0000-4000-8000-000000000001", 1, "1g.5gb", 4864, 2, 0),
    ]
    v0 = out["values"][UUID0]
    assert v0["DCGM_FI_DEV_FB_USED"] == 1024 and v0["DCGM_FI_DEV_FB_RESERVED"] == 512
    assert v0["DCGM_FI_DEV_FB_FREE"] == 40960 - 1536 and v0["DCGM_FI_DEV_GPU_UTIL"] == 42
    assert v0["DCGM_FI_DEV_GPU_TEMP"] == 51 and v0["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(123.456)
    assert v0["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 987654321 and v0["DCGM_FI_DEV_SM_CLOCK"] == 1290
    assert v0["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 1 and v0["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"] == 13
    assert v0["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == 6 and v0["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 1
    assert v0["DCGM_FI_DEV_ENC_UTIL"] == 7 and v0["DCGM_FI_DEV_DEC_UTIL"] == 8
    assert out["values"]["MIG-aaaaaaaa-0000-4000-8000-000000000000"]["DCGM_FI_DEV_FB_USED"] == 100
    assert out["silent"] == {}
    kinds = [(e["kind"], e["device"], e["xid"]) for e in out["events"]]
    assert kinds == [("xid", UUID0, 79), ("xid", "MIG-aaaaaaaa-0000-4000-8000-000000000001", 31)]


# what the simulated NVIDIA driver writes (sro.devices.simnvml_state), read back through sro's backend
INVENTORY_ONLY = """
import dataclasses, json, sys
from pathlib import Path
from sro.devices.nvml import NvmlBackend
print(json.dumps(dataclasses.asdict(NvmlBackend(sys_root=Path(sys.argv[2]), driver_root=Path(sys.argv[1])).inventory())))
"""


def _comparable(inv: dict[str, Any]) -> list[dict[str, Any]]:
    keep = (
        "uuid",
        "index",
        "minor",
        "pci_bus_id",
        "product",
        "memory_mib",
        "compute_capability",
        "numa_node",
    )
    mig_keep = ("uuid", "parent_uuid", "index", "profile", "memory_mib", "gi_id", "ci_id")
    return [
        {
            **{k: d[k] for k in keep},
            "nvlinks": dict(d["nvlinks"]),
            "mig_enabled": d["mig_enabled"],
            "mig": [{k: m[k] for k in mig_keep} for m in d["mig_devices"]],
        }
        for d in inv["devices"]
    ]


def test_the_state_writer_s_output_reads_back_as_its_inventory(lib: Path, tmp_path: Path) -> None:
    import dataclasses

    expected: Inventory = simulated_nvidia.parse(WRITER_DOC)
    text, _ = simnvml_state.next_text(expected, {}, {}, simreadings.SimState(), None, 1.0)
    root = _driver_root(lib, tmp_path / "driver", text)
    dev = make_nodes(tmp_path / "dev", [d.minor for d in expected.devices])
    sys_root = tmp_path / "sys"
    sys_root.mkdir()
    got = run_python(INVENTORY_ONLY, [str(root), str(sys_root)], {"SRO_SIMNVML_DEV_ROOT": str(dev)})
    assert got["driver_version"] == expected.driver_version
    assert _comparable(got) == _comparable(dataclasses.asdict(expected))
    assert sum(len(d["mig_devices"]) for d in got["devices"]) == 2 and got["devices"][0]["nvlinks"]


def test_a_client_with_other_habits(lib: Path, env: dict[str, str]) -> None:
    """Handles by UUID and bus id before any count, MIG handles by UUID, optional functions probed,
    the v1 memory struct, and eight threads reading while the state is rewritten under them."""
    out = client(
        lib,
        """
n.nvmlInitWithFlags(n.NVML_INIT_FLAG_NO_GPUS)
n.nvmlInit()  # twice: reference-counted
h1 = n.nvmlDeviceGetHandleByUUID(os.environ["UUID1"])
out["by_bus"] = [n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByPciBusId(b)) for b in ("0000:86:00.0", "00000000:86:00.0")]
mig = n.nvmlDeviceGetHandleByUUID("MIG-aaaaaaaa-0000-4000-8000-000000000001")
out["mig"] = [n.nvmlDeviceGetName(mig), n.nvmlDeviceIsMigDeviceHandle(mig).value,
              n.nvmlDeviceGetUUID(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)),
              n.nvmlDeviceGetAttributes(mig).gpuInstanceSliceCount, n.nvmlDeviceGetMemoryInfo(mig).total >> 20]
probes = {}
for name, args in [("nvmlDeviceGetFanSpeed", (h1,)), ("nvmlDeviceGetGpcClkVfOffset", (h1,)),
                   ("nvmlDeviceGetNumaNodeId", (h1,)), ("nvmlDeviceGetRetiredPages", (h1, 0)),
                   ("nvmlDeviceGetTemperatureV", (h1, 0)), ("nvmlDeviceGetPowerManagementLimitConstraints", (h1,)),
                   ("nvmlDeviceGetMPSComputeRunningProcesses", (h1,)), ("nvmlDeviceGetClock", (h1, 1, 0)),
                   ("nvmlDeviceGetUtilizationRates", (mig,))]:
    try:
        value = getattr(n, name)(*args)
        probes[name] = "ok" if not isinstance(value, (int, list)) else value
    except n.NVMLError as e:
        probes[name] = str(e)
out["probes"] = probes
state = os.environ["SRO_SIMNVML_STATE"]
base = open(state).read()
errors, reads = [], [0]
def reader():
    h = n.nvmlDeviceGetHandleByIndex(0)
    for _ in range(300):
        try:
            assert n.nvmlDeviceGetUtilizationRates(h).gpu in (42, 43)
            n.nvmlDeviceGetMemoryInfo(h); n.nvmlDeviceGetName(h)
            reads[0] += 1
        except Exception as e:
            errors.append(repr(e))
threads = [threading.Thread(target=reader) for _ in range(8)]
for t in threads: t.start()
for i in range(30):
    tmp = state + ".tmp"
    open(tmp, "w").write(base.replace("util=42 ", "util=%d " % (42 + i % 2)))
    os.replace(tmp, state)
    time.sleep(0.005)
for t in threads: t.join()
out["errors"], out["reads"] = errors[:3], reads[0]
n.nvmlShutdown(); n.nvmlShutdown()
try:
    n.nvmlDeviceGetCount()
except n.NVMLError_Uninitialized:
    out["after"] = "uninitialized"
""",
        {**env, "UUID1": UUID1},
    )
    assert out["by_bus"] == [UUID1, UUID1]
    assert out["mig"] == ["NVIDIA A100-SXM4-40GB MIG 1g.5gb (simulated)", 1, UUID1, 1, 4864]
    p = out["probes"]
    assert (
        p["nvmlDeviceGetFanSpeed"] == "Not Supported"
        and p["nvmlDeviceGetGpcClkVfOffset"] == "Function Not Found"
    )
    assert (
        p["nvmlDeviceGetNumaNodeId"] == "Not Supported" and p["nvmlDeviceGetRetiredPages"] == "Not Supported"
    )
    assert p["nvmlDeviceGetTemperatureV"] == 33 and p["nvmlDeviceGetClock"] == 210
    assert p["nvmlDeviceGetMPSComputeRunningProcesses"] == []
    assert p["nvmlDeviceGetPowerManagementLimitConstraints"] == [100000, 400000]
    assert p["nvmlDeviceGetUtilizationRates"] == "Not Supported"  # not for a MIG device, as NVML
    assert out["errors"] == [] and out["reads"] == 8 * 300 and out["after"] == "uninitialized"


GPUSTAT = """
import ctypes, io, json, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import gpustat
q = gpustat.new_query()
text = io.StringIO()
q.print_formatted(text, no_color=True)
gpus = [[g.index, g.uuid, g.name, g.memory_used, g.memory_total, g.temperature, g.utilization,
         g.power_draw, g.power_limit, g.fan_speed, g.processes] for g in q.gpus]
print(json.dumps({"gpus": gpus, "text": text.getvalue(), "driver": q.driver_version}))
"""


def test_gpustat(lib: Path, env: dict[str, str]) -> None:
    pytest.importorskip("gpustat")
    out = run_python(GPUSTAT, [str(lib)], env)
    assert out["driver"] == "550.90.07"
    assert out["gpus"] == [
        [0, UUID0, A100, 1024, 40960, 51, 42, 123, 400, None, []],
        [1, UUID1, A100, 0, 40960, 33, 0, 60, 400, None, []],
    ]
    assert f"[0] {A100} | 51°C,  42 % |  1024 / 40960 MB |" in out["text"]
    assert os.path.basename(str(lib)) == "libnvidia-ml.so.1"
