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
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sro.local.native import NATIVE_DIR, NativeBuildError, build_simnvml
from tests import simnvml
from tests.simnvml import (
    DRIVER_NOT_LOADED,
    FIXTURE,
    INVALID_ARGUMENT,
    SUCCESS,
    UNINITIALIZED,
    UNKNOWN,
    run_nvml,
)

BASE = FIXTURE.read_text()
CODES = {*range(0, 30), UNKNOWN}

# the library's fixtures, asked for by name (tests/simnvml.py)
simnvml_build, lib, env = simnvml.simnvml_build, simnvml.lib, simnvml.env


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
    layouts: dict[str, Any] = json.loads(
        subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    )
    return layouts


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
    out = run_nvml(lib, CALL_ALL, {**child_env, "INIT": "1" if init else "0"}, timeout=120)
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
    out = run_nvml(
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
    out = run_nvml(
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
    out = run_nvml(
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
    out = run_nvml(
        lib, 'out["init"] = f("nvmlInit_v2"); out["name"] = text("nvmlDeviceGetName", handle(1)[1])', env
    )
    assert out == {"init": SUCCESS, "name": [SUCCESS, "NVIDIA A100-SXM4-40GB (simulated)"]}


def test_state_changes_are_read_live_and_handles_survive(lib: Path, env: dict[str, str]) -> None:
    out = run_nvml(
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
    assert run_nvml(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", body, no_state) == {
        "init": SUCCESS,
        "n": 2,
    }
    assert run_nvml(lib, body, no_state)["init"] == DRIVER_NOT_LOADED


# ---- the build ----------------------------------------------------------------------------------------


def test_build_is_cached_by_source_and_names_gcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    build = build_simnvml(tmp_path / "out")
    built_at = build.library.stat().st_mtime_ns
    assert (
        build_simnvml(tmp_path / "out").library.stat().st_mtime_ns == built_at
    )  # unchanged sources: no compile
    dynamic = subprocess.run(["objdump", "-p", str(build.library)], capture_output=True, text=True).stdout
    assert re.search(r"SONAME\s+libnvidia-ml\.so\.1", dynamic)
    if build.smi is not None:
        smi = subprocess.run(["objdump", "-p", str(build.smi)], capture_output=True, text=True).stdout
        assert re.search(r"NEEDED\s+libnvidia-ml\.so\.1", smi)
        assert "$ORIGIN/../lib/x86_64-linux-gnu" in smi
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(NativeBuildError, match="apt-get install gcc"):
        build_simnvml(tmp_path / "elsewhere")
