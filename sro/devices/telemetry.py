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


class SimulatedTelemetry(simreadings.Stepper):
    """The model's readings for the simulated driver's devices (its fault and load files)."""

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
        dt = self.elapsed()
        result = simreadings.step(self.state, inv, holders, loads, faults, dt, self.seed)
        self.state = result.state
        return Readings(result.readings, result.silent, tuple(problems))


MIB = 1 << 20
KIB = 1 << 10
ALL_LINKS = 0xFFFFFFFF  # an NVLink field's scopeId for the sum over every link
NO_NVLINK = (0.0, 0.0)  # the answer for a GPU without NVLink (compared by identity)
FIRST_WINDOW = 0.1  # seconds between the two samples of a GPU's first NVLink rate
# nvmlValueType_t -> the member of nvmlValue_t that holds it
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_value(value: Any, nvml: Any) -> float | None:
    """A `nvmlFieldValue_t`'s number; None when NVML returned an error for this field."""
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        return None
    member = VALUE_MEMBERS.get(int(value.valueType))
    return None if member is None else float(getattr(value.value, member))


class NvmlTelemetry:
    """Readings through NVML, the calls nvidia-smi and dcgm-exporter's NVML fallbacks make.

    Each reading a GPU does not support is left out; a GPU whose handle or memory query fails (lost,
    fallen off the bus, driver gone) is `silent` with NVML's error. Memory temperature is the field
    value `NVML_FI_DEV_MEMORY_TEMP`, as DCGM reads it. Three readings are worked out: PCIe
    throughput (`nvmlDeviceGetPcieThroughput`, KB/s) also in bytes/s as DCGM's profiling fields give
    it; the NVLink rate from NVML's cumulative KiB counters over all links (`nvmlDeviceGetFieldValues`,
    `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX`, scope all links) between two collections — a GPU's
    first collection samples twice, `FIRST_WINDOW` apart — and 0 on a GPU without NVLink; the vGPU
    license status from `nvmlDeviceGetGridLicensableFeatures`: 1 when a licensed feature is
    enabled, 0 on a GPU that has none or does not do vGPU licensing at all.
    """

    def __init__(
        self,
        nvml: Any,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.nvml = nvml
        self.clock = clock
        self.sleep = sleep
        self._links_before: dict[DeviceUUID, tuple[float, float, float]] = {}  # (at, tx KiB, rx KiB)

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
        memory_temp = self._field(handle, nvml.NVML_FI_DEV_MEMORY_TEMP)
        if memory_temp is not None:
            values[f.MEMORY_TEMP] = int(memory_temp)
        values.update(self._pcie(handle))
        license_status = self._vgpu_license(handle)
        if license_status is not None:
            values[f.VGPU_LICENSE_STATUS] = license_status
        return values

    def _field(self, handle: Any, field_id: int) -> float | None:
        """One NVML field value (`nvmlDeviceGetFieldValues`, as DCGM reads memory temperature)."""
        got = self._get(self.nvml.nvmlDeviceGetFieldValues, handle, [field_id])
        return None if got is None else field_value(got[0], self.nvml)

    def _pcie(self, handle: Any) -> dict[str, float]:
        nvml = self.nvml
        out: dict[str, float] = {}
        for counter, kbps, bps in (
            (nvml.NVML_PCIE_UTIL_TX_BYTES, f.PCIE_TX_THROUGHPUT, f.PCIE_TX_BYTES),
            (nvml.NVML_PCIE_UTIL_RX_BYTES, f.PCIE_RX_THROUGHPUT, f.PCIE_RX_BYTES),
        ):
            value = self._get(nvml.nvmlDeviceGetPcieThroughput, handle, counter)
            if value is not None:
                out[kbps], out[bps] = int(value), int(value) * KIB
        return out

    def _vgpu_license(self, handle: Any) -> int | None:
        nvml = self.nvml
        try:
            features = nvml.nvmlDeviceGetGridLicensableFeatures(handle)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            return 0  # no vGPU licensing on this GPU or driver: no license held
        except nvml.NVMLError as e:
            if isinstance(e, nvml.NVMLError_GpuIsLost):
                raise
            return None
        if not features.isGridLicenseSupported:
            return 0
        count = min(int(features.licensableFeaturesCount), len(features.gridLicensableFeatures))
        return int(any(features.gridLicensableFeatures[i].featureState == 1 for i in range(count)))

    def _nvlink_kib(self, handle: Any) -> tuple[float, float] | None:
        """KiB sent and received over all NVLinks since the driver loaded; (0, 0) on a GPU without
        NVLink; None when NVML cannot tell (the GPU's other readings still stand)."""
        nvml = self.nvml
        fields = [
            (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
            (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
        ]
        try:
            got = nvml.nvmlDeviceGetFieldValues(handle, fields)
        except nvml.NVMLError as e:
            log.debug("NVLink counters: %s", e)
            return None
        tx, rx = (field_value(v, nvml) for v in got)
        if tx is not None and rx is not None:
            return tx, rx
        if all(v.nvmlReturn == nvml.NVML_ERROR_NOT_SUPPORTED for v in got):
            return NO_NVLINK
        return None

    def _nvlink(self, handles: Mapping[DeviceUUID, Any]) -> dict[DeviceUUID, dict[str, float]]:
        """Each GPU's NVLink counters and its rate since the previous collection."""
        now: dict[DeviceUUID, tuple[float, float, float]] = {}
        out: dict[DeviceUUID, dict[str, float]] = {}
        for uuid, handle in handles.items():
            kib = self._nvlink_kib(handle)
            if kib is NO_NVLINK:  # nothing moves over links a GPU does not have
                out[uuid] = {f.NVLINK_TX_KIB: 0, f.NVLINK_RX_KIB: 0, f.NVLINK_BANDWIDTH_TOTAL: 0}
            elif kib is not None:
                now[uuid] = (self.clock(), *kib)
        first = [u for u in now if u not in self._links_before]
        if first:  # no earlier sample: this one is the earlier, another follows a moment later
            self._links_before.update({u: now.pop(u) for u in first})
            self.sleep(FIRST_WINDOW)
            for uuid in first:
                kib = self._nvlink_kib(handles[uuid])
                if kib is not None and kib is not NO_NVLINK:
                    now[uuid] = (self.clock(), *kib)
        for uuid, (at, tx, rx) in now.items():
            before_at, before_tx, before_rx = self._links_before[uuid]
            dt = at - before_at
            moved = max(tx - before_tx, 0.0) + max(rx - before_rx, 0.0)  # a driver reload resets them
            out[uuid] = {
                f.NVLINK_TX_KIB: tx,
                f.NVLINK_RX_KIB: rx,
                f.NVLINK_BANDWIDTH_TOTAL: round(moved * KIB / 1e6 / dt, 3) if dt > 0 else 0,
            }
            self._links_before[uuid] = (at, tx, rx)
        return out

    def read(self, inv: Inventory, holders: Mapping[DeviceUUID, int]) -> Readings:
        nvml = self.nvml
        values: dict[DeviceUUID, dict[str, float]] = {}
        silent: dict[DeviceUUID, str] = {}
        handles: dict[DeviceUUID, Any] = {}
        for d in inv.devices:
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(d.uuid)
                values[d.uuid] = self._gpu(handle)
                for m in d.mig_devices:
                    values[m.uuid] = self._memory(nvml.nvmlDeviceGetHandleByUUID(m.uuid))
                handles[d.uuid] = handle
            except nvml.NVMLError as e:
                values.pop(d.uuid, None)
                silent[d.uuid] = f"NVML: {e}"
        for uuid, link in self._nvlink(handles).items():
            values[uuid].update(link)
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
