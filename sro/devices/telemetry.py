"""Device readings (utilisation, memory, temperature, power, clocks, error counters) per backend.

Why apart from `model.Backend`: the device plugin needs only the inventory and health events; the
exporter also needs readings, and those differ in kind between the backends — NVML asks the GPUs,
the simulated driver has nothing to ask and follows a model (`sro.devices.simreadings`) of the pods
that hold its devices and the load the user set. Both return the same record, readings keyed by DCGM
field names (`sro.devices.fields`), so the exporter does not care which one it talks to.

Bad input: a device that does not answer is left out of `values` and named in `silent` with the
reason (the others are still read); a damaged load file is reported in `problems` and ignored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sro.devices import driverstate, simreadings
from sro.devices import fields as f
from sro.devices.model import Backend, DeviceUUID, Inventory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Readings:
    values: Mapping[DeviceUUID, Mapping[str, float]] = field(default_factory=dict)  # GPU or MIG UUID
    silent: Mapping[DeviceUUID, str] = field(default_factory=dict)  # did not answer: why
    problems: tuple[str, ...] = ()  # inputs that could not be read (the rest was)


class Telemetry(Protocol):
    def read(self, inv: Inventory, holders: Mapping[DeviceUUID, int]) -> Readings:
        """Readings of every device of `inv`; `holders` counts the containers holding each device
        (GPU or MIG UUID), which only a simulated device's readings depend on."""
        ...


class SimulatedTelemetry:
    """The model's readings for the simulated driver's devices (its fault and load files)."""

    def __init__(
        self, driver_root: Path, seed: str = "sro", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.driver_root = driver_root
        self.seed = seed
        self.clock = clock
        self.state = simreadings.SimState()
        self._last: float | None = None

    def read(self, inv: Inventory, holders: Mapping[DeviceUUID, int]) -> Readings:
        problems = []
        try:
            faults = driverstate.read_faults(self.driver_root)
        except (driverstate.DriverStateError, OSError) as e:
            problems.append(f"fault state ignored: {e}")
            faults = {}
        try:
            loads = driverstate.read_loads(self.driver_root)
        except (driverstate.DriverStateError, OSError) as e:
            problems.append(f"load state ignored: {e}")
            loads = {}
        now = self.clock()
        dt = 0.0 if self._last is None else now - self._last
        self._last = now
        result = simreadings.step(self.state, inv, holders, loads, faults, dt, self.seed)
        self.state = result.state
        return Readings(result.readings, result.silent, tuple(problems))


MIB = 1 << 20


class NvmlTelemetry:
    """Readings through NVML, the calls nvidia-smi and dcgm-exporter's NVML fallbacks make.

    Each reading a GPU does not support is left out; a GPU whose handle or memory query fails (lost,
    fallen off the bus, driver gone) is `silent` with NVML's error.
    """

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def _get(self, fn: Callable[..., Any], *args: Any) -> Any:
        """The call's result, or None when this GPU does not support it; GPU_IS_LOST propagates."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as e:
            if isinstance(e, self.nvml.NVMLError_GpuIsLost):
                raise
            return None

    def _memory(self, handle: Any) -> dict[str, float]:
        nvml = self.nvml
        try:
            mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
            reserved = int(mem.reserved // MIB)
        except (nvml.NVMLError_FunctionNotFound, nvml.NVMLError_NotSupported, TypeError):
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            reserved = 0
        return {
            f.FB_FREE: int(mem.free // MIB),
            f.FB_USED: int(mem.used // MIB),
            f.FB_RESERVED: reserved,
        }

    def _gpu(self, handle: Any) -> dict[str, float]:
        nvml = self.nvml
        values = self._memory(handle)
        util = self._get(nvml.nvmlDeviceGetUtilizationRates, handle)
        if util is not None:
            values[f.GPU_UTIL] = util.gpu
            values[f.MEM_COPY_UTIL] = util.memory
        simple: tuple[tuple[str, Callable[..., Any], tuple[Any, ...], Callable[[Any], float]], ...] = (
            (f.SM_CLOCK, nvml.nvmlDeviceGetClockInfo, (nvml.NVML_CLOCK_SM,), int),
            (f.MEM_CLOCK, nvml.nvmlDeviceGetClockInfo, (nvml.NVML_CLOCK_MEM,), int),
            (f.GPU_TEMP, nvml.nvmlDeviceGetTemperature, (nvml.NVML_TEMPERATURE_GPU,), int),
            (f.POWER_USAGE, nvml.nvmlDeviceGetPowerUsage, (), lambda mw: mw / 1000),
            (f.TOTAL_ENERGY, nvml.nvmlDeviceGetTotalEnergyConsumption, (), int),
            (f.PCIE_REPLAY, nvml.nvmlDeviceGetPcieReplayCounter, (), int),
            (f.ENC_UTIL, nvml.nvmlDeviceGetEncoderUtilization, (), lambda r: r[0]),
            (f.DEC_UTIL, nvml.nvmlDeviceGetDecoderUtilization, (), lambda r: r[0]),
        )
        for name, fn, args, convert in simple:
            value = self._get(fn, handle, *args)
            if value is not None:
                values[name] = convert(value)
        ecc = (
            (f.ECC_SBE_VOL, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC),
            (f.ECC_DBE_VOL, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
            (f.ECC_SBE_AGG, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC),
            (f.ECC_DBE_AGG, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC),
        )
        for name, kind, counter in ecc:
            value = self._get(nvml.nvmlDeviceGetTotalEccErrors, handle, kind, counter)
            if value is not None:
                values[name] = int(value)
        rows = self._get(nvml.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            correctable, uncorrectable, _pending, failed = rows
            values[f.CORRECTABLE_REMAPPED_ROWS] = int(correctable)
            values[f.UNCORRECTABLE_REMAPPED_ROWS] = int(uncorrectable)
            values[f.ROW_REMAP_FAILURE] = 1 if failed else 0
        return values

    def read(self, inv: Inventory, holders: Mapping[DeviceUUID, int]) -> Readings:
        nvml = self.nvml
        values: dict[DeviceUUID, Mapping[str, float]] = {}
        silent: dict[DeviceUUID, str] = {}
        for d in inv.devices:
            try:
                values[d.uuid] = self._gpu(nvml.nvmlDeviceGetHandleByUUID(d.uuid))
                for m in d.mig_devices:
                    values[m.uuid] = self._memory(nvml.nvmlDeviceGetHandleByUUID(m.uuid))
            except nvml.NVMLError as e:
                values.pop(d.uuid, None)
                silent[d.uuid] = f"NVML: {e}"
        return Readings(values, silent)


def open_telemetry(backend: Backend, seed: str = "sro") -> Telemetry:
    """The readings source that goes with an open backend (`sro.devices.open_backend`)."""
    from sro.devices.nvml import NvmlBackend
    from sro.devices.simulated import SimulatedBackend

    if isinstance(backend, SimulatedBackend):
        return SimulatedTelemetry(backend.driver_root, seed)
    if isinstance(backend, NvmlBackend):
        return NvmlTelemetry(backend.nvml)  # the module the backend initialised
    raise ValueError(f"no readings for the {backend.name} backend")
