"""The `nvml` device backend: real NVIDIA GPUs through nvidia-ml-py (`import pynvml`).

Why these calls: they are the ones NVIDIA's own device plugin relies on (inventory by index, UUID,
minor number, PCI bus id, memory, CUDA compute capability; NVLink state and remote PCI info per
link for topology; MIG mode and MIG device handles; an event set for Xid critical errors and ECC
errors), so behaviour matches the reference on real hardware. Every call that a GPU or driver may
not support is guarded: a missing feature gives an empty field, never a failed inventory. The
fail-safes follow NVIDIA's: an event-wait error marks every device unhealthy. The NUMA node falls
back to sysfs (`numa_node` of the PCI device) under an injected sys root.
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sro.devices.model import Device, DeviceUUID, HealthEvent, HealthKind, Inventory, MigDevice

log = logging.getLogger(__name__)

NVLINK_MAX_LINKS = 18
WAIT_MS = 1000
_MIG_NAME = re.compile(r"(\d+g\.\d+gb(?:\+\w+)?)")
ALL_INSTANCES = 0xFFFFFFFF


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def mig_profile(name: str) -> str:
    """'NVIDIA A100-SXM4-40GB MIG 1g.5gb' -> '1g.5gb' ('' when the name has none)."""
    m = _MIG_NAME.search(name)
    return m.group(1) if m else ""


def normalize_bus_id(bus_id: str) -> str:
    """NVML reports '00000000:3B:00.0'; sysfs and the kubelet use '0000:3b:00.0'."""
    bus_id = bus_id.lower()
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id


def health_kind(event_type: int, nvml: Any) -> HealthKind | None:
    if event_type & nvml.nvmlEventTypeXidCriticalError:
        return "xid"
    if event_type & nvml.nvmlEventTypeDoubleBitEccError:
        return "ecc-double-bit"
    if event_type & nvml.nvmlEventTypeSingleBitEccError:
        return "ecc-single-bit"
    return None


NVML_LIBRARY = "libnvidia-ml.so.1"
LIBRARY_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib64",
    "lib",
)


def preload_nvml(driver_root: Path) -> Path | None:
    """Load the driver's NVML from a mounted driver root (the plugin's container has none).

    pynvml then opens "libnvidia-ml.so.1" by name, and the dynamic loader hands back the library
    already loaded under that soname, so no LD_LIBRARY_PATH pointing at the host's libraries.
    """
    for d in LIBRARY_DIRS:
        path = driver_root / d / NVML_LIBRARY
        if path.exists():
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            log.info("loaded NVML from %s", path)
            return path
    return None


class NvmlBackend:
    name = "nvml"

    def __init__(self, sys_root: Path = Path("/sys"), driver_root: Path | None = None) -> None:
        import pynvml  # imported here so that nodes without the library can still run the simulated backend

        if driver_root is not None:
            preload_nvml(driver_root)
        self.nvml: Any = pynvml
        self.sys_root = sys_root
        self.nvml.nvmlInit()
        self._lock = threading.Lock()

    def _try(self, fn: Any, *args: Any, default: Any = None) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError as e:
            log.debug("nvml %s%s: %s", getattr(fn, "__name__", fn), args, e)
            return default

    def _numa(self, handle: Any, bus_id: str) -> int | None:
        node = self._try(getattr(self.nvml, "nvmlDeviceGetNumaNodeId", lambda h: None), handle)
        if isinstance(node, int) and node >= 0:
            return node
        try:
            value = int((self.sys_root / "bus/pci/devices" / bus_id / "numa_node").read_text().strip())
        except (OSError, ValueError):
            return None
        return value if value >= 0 else None

    def _nvlink_peers(self, handle: Any) -> dict[str, int]:
        """remote PCI bus id -> number of active links."""
        peers: dict[str, int] = {}
        for link in range(NVLINK_MAX_LINKS):
            try:
                if self.nvml.nvmlDeviceGetNvLinkState(handle, link) != self.nvml.NVML_FEATURE_ENABLED:
                    continue
                remote = normalize_bus_id(
                    _text(self.nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
                )
            except self.nvml.NVMLError:
                if link == 0:
                    break  # no NVLink on this GPU
                continue
            peers[remote] = peers.get(remote, 0) + 1
        return peers

    def _mig_devices(self, handle: Any, parent: DeviceUUID) -> tuple[bool, tuple[MigDevice, ...]]:
        mode = self._try(self.nvml.nvmlDeviceGetMigMode, handle)
        if not mode or mode[0] != self.nvml.NVML_DEVICE_MIG_ENABLE:
            return False, ()
        out = []
        for i in range(self._try(self.nvml.nvmlDeviceGetMaxMigDeviceCount, handle, default=0)):
            mh = self._try(self.nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
            if mh is None:
                continue
            mem = self._try(self.nvml.nvmlDeviceGetMemoryInfo, mh)
            out.append(
                MigDevice(
                    uuid=DeviceUUID(_text(self.nvml.nvmlDeviceGetUUID(mh))),
                    parent_uuid=parent,
                    index=i,
                    profile=mig_profile(_text(self._try(self.nvml.nvmlDeviceGetName, mh, default=""))),
                    memory_mib=int(mem.total // (1 << 20)) if mem else 0,
                    gi_id=self._try(self.nvml.nvmlDeviceGetGpuInstanceId, mh, default=-1),
                    ci_id=self._try(self.nvml.nvmlDeviceGetComputeInstanceId, mh, default=-1),
                )
            )
        return True, tuple(out)

    def inventory(self) -> Inventory:
        with self._lock:
            count = self.nvml.nvmlDeviceGetCount()
            raw = []
            for index in range(count):
                h = self.nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = DeviceUUID(_text(self.nvml.nvmlDeviceGetUUID(h)))
                bus_id = normalize_bus_id(_text(self.nvml.nvmlDeviceGetPciInfo(h).busId))
                minor = self._try(self.nvml.nvmlDeviceGetMinorNumber, h, default=index)
                cc = self._try(self.nvml.nvmlDeviceGetCudaComputeCapability, h, default=(0, 0))
                mem = self.nvml.nvmlDeviceGetMemoryInfo(h)
                mig_enabled, migs = self._mig_devices(h, uuid)
                raw.append((index, h, uuid, bus_id, minor, cc, mem, mig_enabled, migs))
            by_bus = {r[3]: r[2] for r in raw}
            devices = []
            for index, h, uuid, bus_id, minor, cc, mem, mig_enabled, migs in raw:
                links = {by_bus[b]: n for b, n in self._nvlink_peers(h).items() if b in by_bus}
                devices.append(
                    Device(
                        uuid=uuid,
                        index=index,
                        minor=minor,
                        device_node=f"/dev/nvidia{minor}",
                        pci_bus_id=bus_id,
                        product=_text(self.nvml.nvmlDeviceGetName(h)),
                        memory_mib=int(mem.total // (1 << 20)),
                        compute_capability=f"{cc[0]}.{cc[1]}",
                        numa_node=self._numa(h, bus_id),
                        nvlinks=links,
                        mig_enabled=mig_enabled,
                        mig_devices=migs,
                    )
                )
            version = _text(self._try(self.nvml.nvmlSystemGetDriverVersion, default=""))
        return Inventory(backend="nvml", devices=tuple(devices), driver_version=version)

    def _event_device(self, data: Any, inv: Inventory) -> DeviceUUID | None:
        uuid = DeviceUUID(_text(self.nvml.nvmlDeviceGetUUID(data.device)))
        gi, ci = (
            getattr(data, "gpuInstanceId", ALL_INSTANCES),
            getattr(data, "computeInstanceId", ALL_INSTANCES),
        )
        if gi != ALL_INSTANCES:
            for d in inv.devices:
                for m in d.mig_devices:
                    if d.uuid == uuid and m.gi_id == gi and ci in (ALL_INSTANCES, m.ci_id):
                        return m.uuid
        return uuid

    def events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        nvml = self.nvml
        inv = self.inventory()
        mask = (
            nvml.nvmlEventTypeXidCriticalError
            | nvml.nvmlEventTypeDoubleBitEccError
            | nvml.nvmlEventTypeSingleBitEccError
        )
        event_set = nvml.nvmlEventSetCreate()
        try:
            for d in inv.devices:
                h = nvml.nvmlDeviceGetHandleByUUID(d.uuid)
                supported = self._try(nvml.nvmlDeviceGetSupportedEventTypes, h, default=mask)
                try:
                    nvml.nvmlDeviceRegisterEvents(h, mask & supported, event_set)
                except nvml.NVMLError_NotSupported:
                    log.warning(
                        "GPU %s (%s) is too old for health events; health checks off for it", d.index, d.uuid
                    )
                except nvml.NVMLError as e:  # unwatchable: unhealthy until the plugin restarts (as NVIDIA)
                    msg = f"cannot watch health events: {e}"
                    yield HealthEvent("lost", d.uuid, time.monotonic(), sticky=True, message=msg)
            while not stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait_v2(event_set, WAIT_MS)
                except nvml.NVMLError_Timeout:
                    continue
                except nvml.NVMLError as e:
                    yield HealthEvent("lost", None, time.monotonic(), message=f"NVML event wait failed: {e}")
                    stop.wait(1.0)
                    continue
                kind = health_kind(data.eventType, nvml)
                if kind is None:
                    continue
                try:
                    device = self._event_device(data, inv)
                except nvml.NVMLError as e:  # an event for a device we cannot name: all of them (fail safe)
                    yield HealthEvent(
                        "lost", None, time.monotonic(), message=f"event from unknown device: {e}"
                    )
                    continue
                xid = int(data.eventData) if kind == "xid" else None
                yield HealthEvent(
                    kind, device, time.monotonic(), xid=xid, message=f"NVML {kind} {xid or ''}".strip()
                )
        finally:
            self._try(nvml.nvmlEventSetFree, event_set)

    def inventory_token(self) -> object:
        return None  # GPUs come and go only with a driver reload, which restarts the plugin's pod

    def close(self) -> None:
        self._try(self.nvml.nvmlShutdown)
