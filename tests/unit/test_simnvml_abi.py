"""The simulated libnvidia-ml.so.1's C ABI: layouts, return codes and NVML's rules, through ctypes.

Why this way: a real NVML client knows the library only by its symbols, the numbers it returns and
the bytes it writes, so that is what is checked, against nvidia-ml-py's own ctypes classes and
constants where they exist. Every library call runs in a child process (the library's state is
global, and a crash must fail a test, not the test run). State files are written here by hand in
the design's format (tests/fixtures/simnvml/two-a100.state and edits of it), so a change on either
side of that contract shows up here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sro.local.native import NATIVE_DIR, SimNvmlBuild
from tests.simnvml import make_nodes, run_python, simnvml_build  # noqa: F401  (the session fixture)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "simnvml" / "two-a100.state"
BASE = FIXTURE.read_text()
UUID0 = "GPU-5f0e2b8a-0000-4000-8000-000000000000"
UUID1 = "GPU-5f0e2b8a-0000-4000-8000-000000000001"
MIG0 = "MIG-aaaaaaaa-0000-4000-8000-000000000000"

# NVML's return codes (nvml.h; nvidia-ml-py has the same numbers)
SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED = 0, 1, 2, 3
NOT_FOUND, INSUFFICIENT_SIZE, DRIVER_NOT_LOADED, TIMEOUT = 6, 7, 9, 10
GPU_IS_LOST, ARGUMENT_VERSION_MISMATCH, UNKNOWN = 15, 25, 999
CODES = {*range(0, 30), UNKNOWN}

# Loaded by every child: the library, a call helper, and `out` (printed as JSON at the end).
HARNESS = """
import ctypes, json, os, sys, time
L = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
def f(name, *args):
    fn = getattr(L, name)
    fn.restype = ctypes.c_int
    return fn(*args)
def handle(i):
    h = ctypes.c_void_p()
    rc = f("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(i), ctypes.byref(h))
    return rc, h
def by_uuid(u):
    h = ctypes.c_void_p()
    rc = f("nvmlDeviceGetHandleByUUID", u.encode(), ctypes.byref(h))
    return rc, h
def text(name, h, size=96):
    buf = ctypes.create_string_buffer(size)
    rc = f(name, h, buf, ctypes.c_uint(size))
    return [rc, buf.value.decode()]
def uint(name, h, *args):
    v = ctypes.c_uint(12345)
    rc = f(name, h, *args, ctypes.byref(v))
    return [rc, v.value]
def replace(path, content):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(content)
    os.replace(tmp, path)
out = {}
"""


def run(lib: Path, body: str, env: dict[str, str], timeout: float = 30) -> Any:
    """HARNESS + body against `lib` in a child process; its `out`."""
    code = HARNESS + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    return run_python(code, [str(lib)], env, timeout)


@pytest.fixture
def lib(simnvml_build: SimNvmlBuild) -> Path:  # noqa: F811
    return simnvml_build.library


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A state file (the fixture) and device nodes for both of its GPUs."""
    state = tmp_path / "state"
    state.write_text(BASE)
    dev = make_nodes(tmp_path / "dev", [0, 1])
    return {"SRO_SIMNVML_STATE": str(state), "SRO_SIMNVML_DEV_ROOT": str(dev)}


# ---- layouts and constants against nvidia-ml-py ---------------------------------------------------

# nvml.h struct -> (nvidia-ml-py's ctypes class, its field names in order)
STRUCTS = {
    "nvmlPciInfo_t": "nvmlPciInfo_t",
    "nvmlMemory_t": "c_nvmlMemory_t",
    "nvmlMemory_v2_t": "c_nvmlMemory_v2_t",
    "nvmlUtilization_t": "c_nvmlUtilization_t",
    "nvmlEventData_t": "c_nvmlEventData_t",
    "nvmlFieldValue_t": "c_nvmlFieldValue_t",
    "nvmlValue_t": "c_nvmlValue_t",
    "nvmlProcessInfo_t": "c_nvmlProcessInfo_v2_t",
    "nvmlDeviceAttributes_t": "c_nvmlDeviceAttributes",
    "nvmlTemperature_v1_t": "c_nvmlTemperature_v1_t",
}
# where nvml.h and nvidia-ml-py 13 differ on purpose: the number of links the library models (18,
# nvml.h's for the 550 driver branch; 13.x bindings allow 36) and sensor counts nvml.h never exported
DIFFERENT = {"NVML_NVLINK_MAX_LINKS", "NVML_TEMPERATURE_COUNT"}


def _header_constants() -> list[str]:
    header = (NATIVE_DIR / "nvml.h").read_text()
    names = re.findall(r"^\s+(NVML_\w+) = ", header, re.M)
    names += re.findall(r"^#define ((?:NVML_|nvml)\w+) [^(\s]", header, re.M)
    return [n for n in dict.fromkeys(names) if not n.endswith("_FMT") and n != "NVML_API_VERSION_STR"]


def _c_layouts(tmp_path: Path) -> dict[str, Any]:
    """sizeof/offsetof of nvml.h's structs and the values of its constants, from a C program."""
    import pynvml

    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "nvml.h"', "int main(void) {"]
    lines.append('printf("{\\"sizes\\": {");')
    for i, (c_name, py_name) in enumerate(STRUCTS.items()):
        fields = [name for name, *_ in getattr(pynvml, py_name)._fields_]
        offsets = ", ".join(f'\\"{fld}\\": %zu' for fld in fields)
        args = ", ".join(f"offsetof({c_name}, {fld})" for fld in fields)
        sep = "," if i else ""
        lines.append(f'printf("{sep}\\"{c_name}\\": [%zu, {{{offsets}}}]", sizeof({c_name}), {args});')
    lines.append('printf("}, \\"constants\\": {");')
    for i, name in enumerate(_header_constants()):
        sep = "," if i else ""
        lines.append(f'printf("{sep}\\"{name}\\": %lld", (long long)({name}));')
    lines.append('printf("}}\\n"); return 0; }')
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run(
        ["gcc", "-Wall", "-Werror", f"-I{NATIVE_DIR}", "-o", str(exe), str(src)],
        check=True,
        capture_output=True,
    )
    return json.loads(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)


def test_struct_layouts_and_constants_are_nvidia_s(tmp_path: Path) -> None:
    import ctypes

    import pynvml

    c = _c_layouts(tmp_path)
    for c_name, py_name in STRUCTS.items():
        cls = getattr(pynvml, py_name)
        size, offsets = c["sizes"][c_name]
        assert size == ctypes.sizeof(cls), c_name
        assert offsets == {name: getattr(cls, name).offset for name, *_ in cls._fields_}, c_name
    compared = 0
    for name, value in c["constants"].items():
        if name in DIFFERENT or not hasattr(pynvml, name):
            continue
        assert value == getattr(pynvml, name), name
        compared += 1
    assert compared > 100  # the return codes, enums, event and reason masks, field ids, version words
    assert c["constants"]["nvmlMemory_v2"] == pynvml.nvmlMemory_v2 == 0x02000028


# ---- every exported symbol, with null and garbage arguments -----------------------------------------


def _exports(lib: Path) -> list[str]:
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], check=True, capture_output=True, text=True)
    return sorted(line.split()[-1] for line in nm.stdout.splitlines() if " T " in line)


def test_exports_are_nvml_functions_only(lib: Path) -> None:
    names = _exports(lib)
    assert all(n.startswith("nvml") for n in names), [n for n in names if not n.startswith("nvml")]
    header = (NATIVE_DIR / "nvml.h").read_text()
    assert [n for n in names if not re.search(rf"\b{n}\(", header)] == []  # each one declared in nvml.h
    # the ones nvidia-ml-py's wrappers resolve on the paths sro and common clients take
    needed = {
        "nvmlInitWithFlags",
        "nvmlInit_v2",
        "nvmlShutdown",
        "nvmlErrorString",
        "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetHandleByPciBusId_v2",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetNvLinkRemotePciInfo_v2",
        "nvmlEventSetWait_v2",
        "nvmlDeviceGetAttributes_v2",
        "nvmlSystemGetCudaDriverVersion_v2",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetTemperatureV",
    }
    assert needed <= set(names)


def _first_parameters() -> dict[str, str]:
    """function -> the type of its first parameter, from nvml.h's prototypes."""
    header = (NATIVE_DIR / "nvml.h").read_text()
    return dict(
        re.findall(
            r"^(?:nvmlReturn_t|const char \*)(?:\s|\*)*(nvml\w+)\(\s*(?:const )?(\w+)\s+\w", header, re.M
        )
    )


CALL_ALL = """
names = json.loads(os.environ["NAMES"])
lifetime = {"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown"}
takes_handle = set(json.loads(os.environ["TAKES_HANDLE"]))
init = os.environ["INIT"] == "1"
scratch = [ctypes.addressof(ctypes.create_string_buffer(4096)) for _ in range(6)]
keep = []
foreign = ctypes.create_string_buffer(b"\\xa5" * 4095)  # memory the library never handed out
patterns = {
    "null": ([None] * 6, names),
    # a handle (device or event set) that is not one: a small number, or someone else's memory
    "garbage-handle": ([ctypes.c_void_p(0x10)] + scratch[1:], takes_handle),
    "foreign-handle": ([ctypes.addressof(foreign)] + scratch[1:], takes_handle),
}
if init:
    f("nvmlInit_v2")
    device_fns = [n for n in takes_handle if n.startswith("nvmlDevice")]
    patterns["handle-null-outputs"] = ([handle(0)[1]] + [None] * 5, device_fns)
for pattern, (args, fns) in patterns.items():
    for name in sorted(fns):
        if name == "nvmlErrorString" or (not init and name in lifetime):
            continue  # (init and shutdown themselves: test_init_is_reference_counted)
        print(pattern, name, file=sys.stdout, flush=True)  # the last line names a crash's culprit
        rc = f(name, *args)
        out.setdefault(pattern, {})[name] = rc
        if init:  # whatever the call did to init/shutdown, the next one starts initialised once
            while f("nvmlShutdown") == 0:
                pass
            f("nvmlInit_v2")
"""


@pytest.mark.parametrize("init", [False, True], ids=["uninitialised", "initialised"])
def test_every_export_survives_null_and_garbage_arguments(lib: Path, env: dict[str, str], init: bool) -> None:
    names = _exports(lib)
    first = _first_parameters()
    takes_handle = sorted(n for n in names if first.get(n) in ("nvmlDevice_t", "nvmlEventSet_t"))
    assert len(takes_handle) > 80
    child_env = {**env, "NAMES": json.dumps(names), "TAKES_HANDLE": json.dumps(takes_handle)}
    out = run(lib, CALL_ALL, {**child_env, "INIT": "1" if init else "0"}, timeout=120)
    lifetime = {"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown"}
    assert set(out["null"]) == set(names) - {"nvmlErrorString"} - (set() if init else lifetime)
    assert set(out["foreign-handle"]) == set(takes_handle)
    for pattern, results in out.items():
        for name, rc in results.items():
            assert rc in CODES, (pattern, name, rc)
            if name in lifetime:
                continue
            if not init:
                assert rc == UNINITIALIZED, (pattern, name, rc)
            else:
                assert rc != SUCCESS, (pattern, name)  # nothing valid was asked
            if init and pattern.endswith("-handle"):
                assert rc == INVALID_ARGUMENT, (pattern, name, rc)


def test_error_strings(lib: Path) -> None:
    out = run(
        lib,
        """
        L.nvmlErrorString.restype = ctypes.c_char_p
        out = {str(c): L.nvmlErrorString(c).decode() for c in (0, 1, 2, 3, 6, 7, 9, 10, 15, 25, 999, 12345, -1)}
        """,
        {},
    )
    assert out["0"] == "Success" and out["1"] == "Uninitialized" and out["2"] == "Invalid Argument"
    assert out["3"] == "Not Supported" and out["6"] == "Not Found" and out["7"] == "Insufficient Size"
    assert out["9"] == "Driver Not Loaded" and out["10"] == "Timeout" and out["15"] == "GPU is lost"
    assert out["25"] == "Argument version mismatch" and out["999"] == "Unknown Error"
    assert out["12345"] == out["-1"] == "Unknown Error"


# ---- lifetime and the state file ---------------------------------------------------------------------


def test_init_is_reference_counted(lib: Path, env: dict[str, str]) -> None:
    out = run(
        lib,
        """
        n = ctypes.c_uint()
        out["before"] = f("nvmlDeviceGetCount_v2", ctypes.byref(n))
        out["shutdown_first"] = f("nvmlShutdown")
        out["inits"] = [f("nvmlInit_v2"), f("nvmlInitWithFlags", 0), f("nvmlInit")]
        out["shutdowns"] = []
        for _ in range(3):
            out["shutdowns"].append(f("nvmlShutdown"))
            out.setdefault("count_after", []).append(f("nvmlDeviceGetCount_v2", ctypes.byref(n)))
        out["extra_shutdown"] = f("nvmlShutdown")
        """,
        env,
    )
    assert out["before"] == out["shutdown_first"] == UNINITIALIZED
    assert out["inits"] == [SUCCESS] * 3 and out["shutdowns"] == [SUCCESS] * 3
    assert out["count_after"] == [SUCCESS, SUCCESS, UNINITIALIZED]  # usable until the last shutdown
    assert out["extra_shutdown"] == UNINITIALIZED


CORRUPT = {
    "empty": "",
    "not-the-format": "hello world\n",
    "no-header": BASE.split("\n", 1)[1],
    "newer-format": BASE.replace("version=1", "version=2", 1),
    "missing-key": BASE.replace(" minor=1 ", " "),
    "bad-number": BASE.replace("memory=40960", "memory=lots", 1),
    "bad-escape": BASE.replace("NVIDIA%20A100", "NVIDIA%2", 1),
    "token-without-value": BASE.replace("lost=0\n", "lost=0 stray\n", 1),
    "same-index-twice": BASE.replace("gpu index=1 ", "gpu index=0 "),
    "reading-of-no-gpu": BASE
    + "reading index=5 "
    + BASE.split("reading index=0 ", 1)[1].split("\n", 1)[0]
    + "\n",
    "nul-byte": BASE.replace("NVIDIA", "NVI\0DIA", 1),
}


def test_missing_and_corrupt_state(lib: Path, env: dict[str, str], tmp_path: Path) -> None:
    for name, text in CORRUPT.items():
        (tmp_path / name).write_text(text)
    out = run(
        lib,
        """
        base = os.environ["SRO_SIMNVML_STATE"]
        out["missing"] = [f("nvmlInit_v2"), f("nvmlShutdown")]
        for name in json.loads(os.environ["CORRUPT"]):
            os.environ["SRO_SIMNVML_STATE"] = os.path.join(os.path.dirname(base), name)
            out[name] = [f("nvmlInit_v2"), f("nvmlShutdown")]
        os.environ["SRO_SIMNVML_STATE"] = base + ".good"
        out["good"] = [f("nvmlInit_v2"), f("nvmlShutdown")]
        """,
        {**env, "SRO_SIMNVML_STATE": str(tmp_path / "absent"), "CORRUPT": json.dumps(list(CORRUPT))},
    )
    assert out.pop("missing") == [DRIVER_NOT_LOADED, UNINITIALIZED]
    assert out.pop("good") == [DRIVER_NOT_LOADED, UNINITIALIZED]  # ".good" does not exist either
    assert out == {name: [UNKNOWN, UNINITIALIZED] for name in CORRUPT}


def test_unknown_kinds_and_keys_are_ignored(lib: Path, env: dict[str, str]) -> None:
    state = Path(env["SRO_SIMNVML_STATE"])
    state.write_text(BASE.replace("lost=0\n", "lost=0 color=blue\n") + "hologram index=0 x=1\n\n")
    out = run(
        lib, 'out["init"] = f("nvmlInit_v2"); out["name"] = text("nvmlDeviceGetName", handle(1)[1])', env
    )
    assert out == {"init": SUCCESS, "name": [SUCCESS, "NVIDIA A100-SXM4-40GB (simulated)"]}


def test_state_changes_are_read_live_and_handles_survive(lib: Path, env: dict[str, str]) -> None:
    out = run(
        lib,
        """
        path = os.environ["SRO_SIMNVML_STATE"]
        base = open(path).read()
        f("nvmlInit_v2")
        rc, h = handle(0)
        util = ctypes.c_uint * 2
        def utilization():
            u = util()
            return [f("nvmlDeviceGetUtilizationRates", h, ctypes.byref(u)), u[0]]
        out["first"] = utilization()
        replace(path, base.replace("util=42 ", "util=97 "))
        out["changed"] = utilization()
        replace(path, "garbage\\n")
        out["corrupt"] = utilization()
        os.unlink(path)
        out["gone"] = utilization()
        replace(path, base.replace("util=42 ", "util=5 "))
        out["back"] = utilization()
        """,
        env,
    )
    assert out["first"] == [SUCCESS, 42] and out["changed"] == [SUCCESS, 97]
    assert out["corrupt"][0] == UNKNOWN and out["gone"][0] == DRIVER_NOT_LOADED
    assert out["back"] == [SUCCESS, 5]  # the same handle, after the file came back


def test_state_found_from_the_library_s_own_place(lib: Path, env: dict[str, str], tmp_path: Path) -> None:
    """No $SRO_SIMNVML_STATE: <root>/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 reads
    <root>/run/sro-simnvml/state; a library outside a library directory finds none."""
    root = tmp_path / "driver"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "run/sro-simnvml").mkdir(parents=True)
    shutil.copy(lib, root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.90.07")
    (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.550.90.07")
    (root / "run/sro-simnvml/state").write_text(BASE)
    no_state = {"SRO_SIMNVML_DEV_ROOT": env["SRO_SIMNVML_DEV_ROOT"]}
    body = 'n = ctypes.c_uint(); out["init"] = f("nvmlInit_v2"); f("nvmlDeviceGetCount_v2", ctypes.byref(n)); out["n"] = n.value'
    assert run(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", body, no_state) == {
        "init": SUCCESS,
        "n": 2,
    }
    assert run(lib, body, no_state)["init"] == DRIVER_NOT_LOADED


# ---- devices ------------------------------------------------------------------------------------------


def test_only_gpus_with_their_device_node_are_visible(lib: Path, env: dict[str, str], tmp_path: Path) -> None:
    dev = tmp_path / "container-dev"
    make_nodes(dev, [1])
    (dev / "nvidia0").write_text("")  # not a char device: not NVIDIA's node
    os.mknod(dev / "nvidia2", 0o666 | 0o020000, os.makedev(42, 2))  # another driver's major
    out = run(
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
    out = run(
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
    out = run(
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
    out = run(
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
    out = run(lib, EVENTS, env)
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
