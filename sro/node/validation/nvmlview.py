"""What NVML shows inside a workload container, asked the way a CUDA program's libraries do.

Why its own path: the runtime hook injects `libnvidia-ml.so.1` into the container; loading it by
soname (ctypes: the linker cache the hook's ldconfig wrote) and asking it which GPUs it sees proves
the library works there and sees exactly the granted GPU — the device cgroup and the injected device
nodes decide what NVML lists, on real hardware and on sro's simulated NVIDIA driver alike (whose
library lists a GPU only when the container has its /dev/nvidia<minor>). nvidia-ml-py is not used:
the check must run against whatever library the container got, with no Python binding between.

`ask` talks to the library; `check` is pure.
"""

from __future__ import annotations

import ctypes
import fnmatch
from dataclasses import dataclass

from sro.api.recipes import Recipe
from sro.node.validation.report import Result
from sro.node.validation.tools import Listed

NVML_SONAME = "libnvidia-ml.so.1"
UUID_BUFFER = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE
NVML_SUCCESS = 0


@dataclass(frozen=True)
class NvmlGpu:
    uuid: str
    minor: int | None  # None: NVML would not say


@dataclass(frozen=True)
class NvmlView:
    """NVML's answer in the container; `error` says why there is none (load or init failed)."""

    gpus: tuple[NvmlGpu, ...] = ()
    error: str = ""
    driver_version: str = ""


def _error_string(lib: ctypes.CDLL, rc: int) -> str:
    fn = lib.nvmlErrorString
    fn.restype = ctypes.c_char_p
    text = fn(ctypes.c_int(rc))
    return f"{text.decode(errors='replace') if text else 'unknown error'} ({rc})"


def ask(soname: str = NVML_SONAME) -> NvmlView:
    """Load NVML by soname, list its GPUs (UUID, minor), shut it down; never raises."""
    try:
        lib = ctypes.CDLL(soname)
    except OSError as e:
        return NvmlView(error=f"{soname} does not load: {e}")
    try:
        rc = lib.nvmlInit_v2()
        if rc != NVML_SUCCESS:
            return NvmlView(error=f"nvmlInit_v2 failed: {_error_string(lib, rc)}")
        try:
            return _gpus(lib)
        finally:
            lib.nvmlShutdown()
    except AttributeError as e:  # a library without NVML's symbols
        return NvmlView(error=f"{soname} is not NVML: {e}")


def _gpus(lib: ctypes.CDLL) -> NvmlView:
    count = ctypes.c_uint()
    rc = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    if rc != NVML_SUCCESS:
        return NvmlView(error=f"nvmlDeviceGetCount_v2 failed: {_error_string(lib, rc)}")
    gpus = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        rc = lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle))
        if rc != NVML_SUCCESS:
            return NvmlView(error=f"nvmlDeviceGetHandleByIndex_v2({index}) failed: {_error_string(lib, rc)}")
        buf = ctypes.create_string_buffer(UUID_BUFFER)
        rc = lib.nvmlDeviceGetUUID(handle, buf, ctypes.c_uint(UUID_BUFFER))
        if rc != NVML_SUCCESS:
            return NvmlView(error=f"nvmlDeviceGetUUID({index}) failed: {_error_string(lib, rc)}")
        minor = ctypes.c_uint()
        has_minor = lib.nvmlDeviceGetMinorNumber(handle, ctypes.byref(minor)) == NVML_SUCCESS
        gpus.append(NvmlGpu(buf.value.decode(errors="replace"), minor.value if has_minor else None))
    version = ctypes.create_string_buffer(80)
    has_version = lib.nvmlSystemGetDriverVersion(version, ctypes.c_uint(80)) == NVML_SUCCESS
    return NvmlView(tuple(gpus), driver_version=version.value.decode(errors="replace") if has_version else "")


def observe(recipe: Recipe, caps: tuple[str, ...]) -> tuple[NvmlView | None, str]:
    """NVML's view for an NVML recipe whose container asked for the group holding the library, or
    None and why it was not asked (`skipped: ...`)."""
    if recipe.backend != "nvml":
        return None, f"skipped: {recipe.name} devices are not NVML's"
    groups = [
        c for c, pats in recipe.libraries.items() if any(fnmatch.fnmatchcase(NVML_SONAME, p) for p in pats)
    ]
    if not groups:
        return None, f"skipped: the recipe lists no {NVML_SONAME}"
    if not set(groups) & set(caps):
        return None, f"skipped: the container did not ask for the {groups[0]!r} group that holds NVML"
    return ask(), ""


# -- pure ----------------------------------------------------------------------------------------


def check(
    view: NvmlView | None,
    note: str,
    granted: str | None,
    usable_minor: int | None,
    listed: tuple[Listed, ...],
    hint: str,
) -> Result:
    """NVML loads and lists exactly the granted GPU: its UUID the one the allocation names (when it
    names a UUID) and the one the tool lists, its minor the one device node the container can use.
    `note` says why NVML was not asked (`skipped: ...`, or a failure)."""
    name = "nvml"
    if view is None:
        if note.startswith("skipped"):
            return Result.skipped(name, note.removeprefix("skipped: "))
        return Result.failed(name, note, f"{note}; {hint}")
    if view.error:
        return Result.failed(
            name, f"{NVML_SONAME} does not work", f"{view.error}: NVML does not work in the container; {hint}"
        )
    details = [f"{g.uuid} (minor {g.minor if g.minor is not None else '?'})" for g in view.gpus]
    if len(view.gpus) != 1:
        return Result.failed(
            name,
            f"NVML lists {len(view.gpus)} GPUs",
            f"NVML ({NVML_SONAME}) lists {len(view.gpus)} GPUs in the container, expected exactly the "
            "granted one: the device nodes the container has are not the allocation's",
            details,
        )
    gpu = view.gpus[0]
    problems = []
    if granted is not None and not granted.isdigit() and gpu.uuid != granted:
        problems.append(f"NVML lists {gpu.uuid}, but the allocation names {granted}")
    if len(listed) == 1 and listed[0].uuid != gpu.uuid:
        problems.append(f"NVML lists {gpu.uuid}, but the tool lists {listed[0].uuid}")
    if usable_minor is not None and gpu.minor is not None and gpu.minor != usable_minor:
        problems.append(
            f"NVML's GPU has minor {gpu.minor}, but the usable device node has minor {usable_minor}"
        )
    if problems:
        return Result.failed(name, "NVML lists another GPU", f"{problems[0]}; {hint}", details)
    version = f", driver {view.driver_version}" if view.driver_version else ""
    return Result.passed(name, f"{NVML_SONAME} loads and lists the granted GPU {gpu.uuid}{version}", details)
