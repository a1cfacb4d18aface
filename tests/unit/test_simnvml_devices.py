"""The simulated libnvidia-ml.so.1's devices as NVML shows them: which GPUs a process may see,
lookups, a lost GPU, MIG device handles, Xid events, and silence unless asked to speak.

Like test_simnvml_abi.py, each check runs the library in a child process through ctypes, on the
hand-written state tests/fixtures/simnvml/two-a100.state (or an edit of it) and real device nodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import simnvml
from tests.simnvml import (
    ARGUMENT_VERSION_MISMATCH,
    FIXTURE,
    GPU_IS_LOST,
    HARNESS,
    INSUFFICIENT_SIZE,
    INVALID_ARGUMENT,
    MIG0,
    NOT_FOUND,
    NOT_SUPPORTED,
    SUCCESS,
    TIMEOUT,
    UUID0,
    UUID1,
    make_nodes,
    run_nvml,
)

BASE = FIXTURE.read_text()

# the library's fixtures, asked for by name (tests/simnvml.py)
simnvml_build, lib, env = simnvml.simnvml_build, simnvml.lib, simnvml.env


# ---- devices ------------------------------------------------------------------------------------------


def test_only_gpus_with_their_device_node_are_visible(lib: Path, env: dict[str, str], tmp_path: Path) -> None:
    dev = tmp_path / "container-dev"
    make_nodes(dev, [1])
    (dev / "nvidia0").write_text("")  # not a char device: not NVIDIA's node
    os.mknod(dev / "nvidia2", 0o666 | 0o020000, os.makedev(42, 2))  # another driver's major
    out = run_nvml(
        lib,
        """
        f("nvmlInit_v2")
        n = ctypes.c_uint()
        f("nvmlDeviceGetCount_v2", ctypes.byref(n))
        rc, h = handle(0)
        out = {"count": n.value, "uuid": text("nvmlDeviceGetUUID", h), "index": uint("nvmlDeviceGetIndex", h),
               "minor": uint("nvmlDeviceGetMinorNumber", h), "index1": handle(1)[0],
               "hidden": by_uuid(os.environ["UUID0"])[0], "hidden_bus": f("nvmlDeviceGetHandleByPciBusId_v2",
               b"0000:3b:00.0", ctypes.byref(ctypes.c_void_p()))}
        """,
        {**env, "SRO_SIMNVML_DEV_ROOT": str(dev), "UUID0": UUID0},
    )
    assert out["count"] == 1 and out["uuid"] == [SUCCESS, UUID1]
    assert out["index"] == [SUCCESS, 0] and out["minor"] == [SUCCESS, 1]  # renumbered, minor kept
    assert out["index1"] == INVALID_ARGUMENT and out["hidden"] == NOT_FOUND and out["hidden_bus"] == NOT_FOUND


def test_lookups_sizes_and_versions(lib: Path, env: dict[str, str]) -> None:
    out = run_nvml(
        lib,
        """
        f("nvmlInit_v2")
        rc, h0 = handle(0)
        def bus(s):
            h = ctypes.c_void_p()
            rc = f("nvmlDeviceGetHandleByPciBusId_v2", s.encode(), ctypes.byref(h))
            return [rc, text("nvmlDeviceGetUUID", h)[1] if rc == 0 else None]
        out["bus"] = [bus(s) for s in ("00000000:86:00.0", "0000:86:00.0", "86:00.0", "0000:99:00.0", "zz")]
        out["uuid"] = by_uuid(os.environ["UUID1"])[0], by_uuid("GPU-nope")[0]
        out["short_name"] = text("nvmlDeviceGetName", h0, 8)
        out["exact_name"] = text("nvmlDeviceGetName", h0, len("NVIDIA A100-SXM4-40GB (simulated)") + 1)
        class Mem2(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint)] + [(k, ctypes.c_ulonglong) for k in ("total", "reserved", "free", "used")]
        m = Mem2(version=0x02000028)
        out["mem_v2"] = [f("nvmlDeviceGetMemoryInfo_v2", h0, ctypes.byref(m)), m.reserved >> 20, m.used >> 20, m.free >> 20]
        out["mem_v1_version"] = f("nvmlDeviceGetMemoryInfo_v2", h0, ctypes.byref(Mem2(version=0x01000020)))
        class Temp(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint), ("sensorType", ctypes.c_uint), ("temperature", ctypes.c_int)]
        t = Temp(version=0x0100000C, sensorType=0)
        out["temp_v"] = [f("nvmlDeviceGetTemperatureV", h0, ctypes.byref(t)), t.temperature]
        out["temp_v_bad"] = f("nvmlDeviceGetTemperatureV", h0, ctypes.byref(Temp(version=0x0200000C)))
        out["threshold"] = uint("nvmlDeviceGetTemperatureThreshold", h0, 0)
        out["threshold_bad"] = uint("nvmlDeviceGetTemperatureThreshold", h0, 99)[0]
        out["clock_bad"] = uint("nvmlDeviceGetClockInfo", h0, 17)[0]
        out["fan"] = uint("nvmlDeviceGetFanSpeed", h0)[0]
        out["retired"] = f("nvmlDeviceGetRetiredPages", h0, 0, ctypes.byref(ctypes.c_uint()), None)
        """,
        {**env, "UUID1": UUID1},
    )
    assert out["bus"][:3] == [[SUCCESS, UUID1]] * 3
    assert out["bus"][3] == [NOT_FOUND, None] and out["bus"][4] == [INVALID_ARGUMENT, None]
    assert out["uuid"] == [SUCCESS, NOT_FOUND]
    assert out["short_name"][0] == INSUFFICIENT_SIZE
    assert out["exact_name"] == [SUCCESS, "NVIDIA A100-SXM4-40GB (simulated)"]
    assert out["mem_v2"] == [SUCCESS, 512, 1024, 40960 - 1536]
    assert out["mem_v1_version"] == ARGUMENT_VERSION_MISMATCH
    assert out["temp_v"] == [SUCCESS, 51] and out["temp_v_bad"] == ARGUMENT_VERSION_MISMATCH
    assert out["threshold"][0] == SUCCESS and out["threshold_bad"] == INVALID_ARGUMENT
    assert out["clock_bad"] == INVALID_ARGUMENT
    assert out["fan"] == NOT_SUPPORTED  # an SXM board has no fan of its own
    assert out["retired"] == NOT_SUPPORTED  # Ampere remaps rows instead of retiring pages


def test_a_lost_gpu_answers_only_who_it_is(lib: Path, env: dict[str, str]) -> None:
    state = Path(env["SRO_SIMNVML_STATE"])
    lost = BASE.replace(
        "mig=1 power_limit=400000 max_sm_clock=1410 max_mem_clock=1215 pcie_gen=4 pcie_width=16 lost=0",
        "mig=1 power_limit=400000 max_sm_clock=1410 max_mem_clock=1215 pcie_gen=4 pcie_width=16 lost=1",
    )
    assert lost != BASE
    state.write_text("\n".join(x for x in lost.splitlines() if not x.startswith("reading index=1 ")) + "\n")
    out = run_nvml(
        lib,
        """
        f("nvmlInit_v2")
        rc, h = handle(1)
        mem = (ctypes.c_ulonglong * 3)()
        out = {"handle": rc, "name": text("nvmlDeviceGetName", h)[0], "uuid": text("nvmlDeviceGetUUID", h),
               "pci": f("nvmlDeviceGetPciInfo_v3", h, ctypes.byref((ctypes.c_char * 80)())),
               "memory": f("nvmlDeviceGetMemoryInfo", h, ctypes.byref(mem)),
               "temp": uint("nvmlDeviceGetTemperature", h, 0)[0], "power": uint("nvmlDeviceGetPowerUsage", h)[0],
               "mig_uuid": by_uuid(os.environ["MIG0"])[0], "other": uint("nvmlDeviceGetPowerUsage", handle(0)[1])[0]}
        """,
        {**env, "MIG0": MIG0},
    )
    assert out["handle"] == SUCCESS and out["name"] == SUCCESS and out["uuid"] == [SUCCESS, UUID1]
    assert out["pci"] == SUCCESS
    assert out["memory"] == out["temp"] == out["power"] == out["mig_uuid"] == GPU_IS_LOST
    assert out["other"] == SUCCESS  # the other GPU answers as before


def test_mig_device_handles(lib: Path, env: dict[str, str]) -> None:
    out = run_nvml(
        lib,
        """
        f("nvmlInit_v2")
        rc, gpu = handle(1)
        mode = [ctypes.c_uint(), ctypes.c_uint()]
        out["mode"] = [f("nvmlDeviceGetMigMode", gpu, *map(ctypes.byref, mode)), mode[0].value]
        out["mode0"] = f("nvmlDeviceGetMigMode", handle(0)[1], *map(ctypes.byref, mode)), mode[0].value
        out["max"] = uint("nvmlDeviceGetMaxMigDeviceCount", gpu)
        mig = ctypes.c_void_p()
        out["by_index"] = f("nvmlDeviceGetMigDeviceHandleByIndex", gpu, 0, ctypes.byref(mig))
        out["hole"] = f("nvmlDeviceGetMigDeviceHandleByIndex", gpu, 5, ctypes.byref(ctypes.c_void_p()))
        out["not_mig_mode"] = f("nvmlDeviceGetMigDeviceHandleByIndex", handle(0)[1], 0, ctypes.byref(ctypes.c_void_p()))
        out["name"] = text("nvmlDeviceGetName", mig)
        out["uuid"] = text("nvmlDeviceGetUUID", mig)
        out["ids"] = uint("nvmlDeviceGetGpuInstanceId", mig), uint("nvmlDeviceGetComputeInstanceId", mig)
        out["is_mig"] = uint("nvmlDeviceIsMigDeviceHandle", mig), uint("nvmlDeviceIsMigDeviceHandle", gpu)
        parent = ctypes.c_void_p()
        f("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig, ctypes.byref(parent))
        out["parent_is_gpu"] = parent.value == gpu.value
        mem = (ctypes.c_ulonglong * 3)()
        out["memory"] = [f("nvmlDeviceGetMemoryInfo", mig, ctypes.byref(mem)), mem[0] >> 20, mem[2] >> 20]
        out["util"] = f("nvmlDeviceGetUtilizationRates", mig, ctypes.byref((ctypes.c_uint * 2)()))
        out["same_by_uuid"] = by_uuid(os.environ["MIG0"])[1].value == mig.value
        """,
        {**env, "MIG0": MIG0},
    )
    assert out["mode"] == [SUCCESS, 1] and out["mode0"] == [SUCCESS, 0]
    assert out["max"] == [SUCCESS, 7] and out["by_index"] == SUCCESS and out["hole"] == NOT_FOUND
    assert out["not_mig_mode"] == INVALID_ARGUMENT
    assert out["name"] == [SUCCESS, "NVIDIA A100-SXM4-40GB MIG 3g.20gb (simulated)"]
    assert out["uuid"] == [SUCCESS, MIG0] and out["ids"] == [[SUCCESS, 1], [SUCCESS, 0]]
    assert out["is_mig"] == [[SUCCESS, 1], [SUCCESS, 0]] and out["parent_is_gpu"]
    assert out["memory"] == [SUCCESS, 20096, 110]  # used counts the MIG device's reservation (v1)
    assert out["util"] == NOT_SUPPORTED and out["same_by_uuid"]


# ---- events -------------------------------------------------------------------------------------------

EVENTS = """
path = os.environ["SRO_SIMNVML_STATE"]
base = open(path).read()
f("nvmlInit_v2")
class Data(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("eventType", ctypes.c_ulonglong), ("eventData", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]
es = ctypes.c_void_p()
f("nvmlEventSetCreate", ctypes.byref(es))
rc0, h0 = handle(0)
rc1, h1 = handle(1)
out["register"] = [f("nvmlDeviceRegisterEvents", h, ctypes.c_ulonglong(8), es) for h in (h0, h1)]
out["register_unsupported"] = f("nvmlDeviceRegisterEvents", h0, ctypes.c_ulonglong(1 << 40), es)
def wait(ms):
    d = Data()
    t = time.monotonic()
    rc = f("nvmlEventSetWait_v2", es, ctypes.byref(d), ctypes.c_uint(ms))
    who = text("nvmlDeviceGetUUID", ctypes.c_void_p(d.device))[1] if rc == 0 else None
    return {"rc": rc, "s": time.monotonic() - t, "type": d.eventType, "xid": d.eventData, "uuid": who,
            "gi": d.gpuInstanceId, "ci": d.computeInstanceId}
out["old_fault"] = wait(150)  # the fault already in the file is not news
import threading
def inject():
    time.sleep(0.3)
    replace(path, base + "fault index=1 mig=-1 xid=48 seq=1700000000000001\\n"
                         "fault index=1 mig=0 xid=31 seq=1700000000000002\\n")
threading.Thread(target=inject).start()
out["first"] = wait(5000)
out["second"] = wait(5000)
out["none_left"] = wait(100)
f("nvmlEventSetFree", es)
out["after_free"] = f("nvmlEventSetWait_v2", es, ctypes.byref(Data()), ctypes.c_uint(10))
"""


def test_fault_lines_are_delivered_as_xid_events(lib: Path, env: dict[str, str]) -> None:
    out = run_nvml(lib, EVENTS, env)
    assert out["register"] == [SUCCESS, SUCCESS] and out["register_unsupported"] == NOT_SUPPORTED
    assert out["old_fault"]["rc"] == TIMEOUT and 0.1 <= out["old_fault"]["s"] < 1.0
    first, second = out["first"], out["second"]
    assert first["rc"] == SUCCESS and first["type"] == 8 and first["xid"] == 48 and first["uuid"] == UUID1
    assert 0.2 < first["s"] < 0.3 + 1.0  # seen within the polling interval after the write
    assert first["gi"] == first["ci"] == 0xFFFFFFFF  # the whole GPU
    assert second["rc"] == SUCCESS and second["xid"] == 31 and second["uuid"] == UUID1  # the parent GPU...
    assert (second["gi"], second["ci"]) == (1, 0)  # ...with the MIG device's instance ids
    assert out["none_left"]["rc"] == TIMEOUT and out["after_free"] == INVALID_ARGUMENT


def test_debug_output_only_when_asked(lib: Path, env: dict[str, str], tmp_path: Path) -> None:
    code = HARNESS + 'f("nvmlInit_v2")\n'
    for debug, expect in ((None, ""), ("1", "simnvml: initialised")):
        child = {**{k: v for k, v in os.environ.items() if not k.startswith("SRO_SIMNVML")}, **env}
        if debug:
            child["SRO_SIMNVML_DEBUG"] = debug
        proc = subprocess.run(
            [sys.executable, "-c", code, str(lib)], capture_output=True, text=True, env=child
        )
        assert proc.returncode == 0 and proc.stdout == ""
        assert proc.stderr.startswith(expect) if expect else proc.stderr == ""
