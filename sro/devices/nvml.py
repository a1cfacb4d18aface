"""The `nvml` device backend: real NVIDIA GPUs through nvidia-ml-py (`import pynvml`).

Why these calls: they are the ones NVIDIA's own device plugin relies on (inventory by index, UUID,
minor number, PCI bus id, memory, CUDA compute capability; NVLink state and remote PCI info per
link for topology; MIG mode and MIG device handles; an event set for Xid critical errors and ECC
errors), so behaviour matches the reference on real hardware. Every call that a GPU or driver may
not support is guarded: a missing feature gives an empty field, never a failed inventory; a GPU
that has fallen off the bus (Xid 79: NVML answers only its identity, GPU_IS_LOST to the rest) is
listed with what it still tells, so the others are served and it can be announced unhealthy. The
fail-safes follow NVIDIA's: an event-wait error marks every device unhealthy (logged once; the
devices come back when waiting works again). The NUMA node falls back to sysfs (`numa_node` of the
PCI device) under an injected sys root.

Why lost GPUs are probed: NVML has no "cleared" event, so an Xid is a point in time and the health
rules (`sro.devices.health`) bring the device back after a quiet period. That is right for an Xid
the GPU survives, wrong for one it does not: a lost GPU must stay unhealthy while it is lost. So a
GPU that NVML calls lost (at start, or after an Xid) is a sticky fault, and a lost GPU is asked
again every event-wait round (`LOST_WAIT_MS` while one is lost); once it answers, the fault is cleared and the
quiet period runs. NVIDIA's plugin never brings a device back (k8s-device-plugin's "no way to
recover from the Unhealthy state"); `recoverAfterSeconds: null` keeps that behaviour here. Probing
can only tell "lost", never "fine after an Xid" (a GPU answers NVML right after most Xids), so it
never shortens the quiet period.

The simulated NVIDIA driver's library says so in every product name (" (simulated)"): such an
inventory is marked simulated, so what is built on it (exporter labels, validation) says so too.
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
LOST_WAIT_MS = 200  # the event wait while a GPU is lost: it is asked again after each
SIMULATED_MARK = " (simulated)"  # how the simulated NVIDIA driver's NVML ends every product name
# NVIDIA's MIG capability device nodes (/proc/driver/nvidia-caps/mig-minors, a fixed layout): for
# the GPU of minor g, GPU instance i, compute instance c the access node's minor is
# 3 + g*135 + i*9 + 1 + c, under /dev/nvidia-caps
MIG_CAP_NODE = "/dev/nvidia-caps/nvidia-cap{minor}"
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


def mig_cap_node(gpu_minor: int, gi: int, ci: int) -> str:
    """The capability node a container needs for MIG device (gi, ci) of a GPU ('' if unnumbered)."""
    if not (0 <= gi < 15 and 0 <= ci < 8) or gpu_minor < 0:
        return ""
    return MIG_CAP_NODE.format(minor=3 + gpu_minor * 135 + gi * 9 + 1 + ci)


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
        self._partial: frozenset[DeviceUUID] = frozenset()  # listed while lost: identity only
        self._token = 0  # bumped when a GPU listed while lost answers again (read the inventory again)

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

    def _mig_devices(self, handle: Any, parent: DeviceUUID, minor: int) -> tuple[bool, tuple[MigDevice, ...]]:
        mode = self._try(self.nvml.nvmlDeviceGetMigMode, handle)
        if not mode or mode[0] != self.nvml.NVML_DEVICE_MIG_ENABLE:
            return False, ()
        out = []
        for i in range(self._try(self.nvml.nvmlDeviceGetMaxMigDeviceCount, handle, default=0)):
            mh = self._try(self.nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
            if mh is None:
                continue
            mem = self._try(self.nvml.nvmlDeviceGetMemoryInfo, mh)
            gi = self._try(self.nvml.nvmlDeviceGetGpuInstanceId, mh, default=-1)
            ci = self._try(self.nvml.nvmlDeviceGetComputeInstanceId, mh, default=-1)
            out.append(
                MigDevice(
                    uuid=DeviceUUID(_text(self.nvml.nvmlDeviceGetUUID(mh))),
                    parent_uuid=parent,
                    index=i,
                    profile=mig_profile(_text(self._try(self.nvml.nvmlDeviceGetName, mh, default=""))),
                    memory_mib=int(mem.total // (1 << 20)) if mem else 0,
                    gi_id=gi,
                    ci_id=ci,
                    device_node=mig_cap_node(minor, gi, ci),
                )
            )
        return True, tuple(out)

    def inventory(self) -> Inventory:
        with self._lock:
            count = self.nvml.nvmlDeviceGetCount()
            raw = []
            partial: set[DeviceUUID] = set()
            for index in range(count):
                try:
                    h = self.nvml.nvmlDeviceGetHandleByIndex(index)
                    uuid = DeviceUUID(_text(self.nvml.nvmlDeviceGetUUID(h)))
                    bus_id = normalize_bus_id(_text(self.nvml.nvmlDeviceGetPciInfo(h).busId))
                except self.nvml.NVMLError_GpuIsLost as e:  # not even its name: nothing to announce
                    log.warning("GPU %d is lost and NVML cannot name it (%s); not listed", index, e)
                    continue
                minor = self._try(self.nvml.nvmlDeviceGetMinorNumber, h, default=index)
                cc = self._try(self.nvml.nvmlDeviceGetCudaComputeCapability, h, default=(0, 0))
                try:
                    memory_mib = int(self.nvml.nvmlDeviceGetMemoryInfo(h).total // (1 << 20))
                except self.nvml.NVMLError_GpuIsLost:  # fallen off the bus: listed by what it still tells
                    if uuid not in self._partial:  # said once, not at every read
                        log.warning("GPU %d (%s) is lost: listed by its identity only", index, uuid)
                    memory_mib = 0
                    partial.add(uuid)
                mig_enabled, migs = self._mig_devices(h, uuid, minor)
                raw.append((index, h, uuid, bus_id, minor, cc, memory_mib, mig_enabled, migs))
            by_bus = {r[3]: r[2] for r in raw}
            devices = []
            for index, h, uuid, bus_id, minor, cc, memory_mib, mig_enabled, migs in raw:
                links = {by_bus[b]: n for b, n in self._nvlink_peers(h).items() if b in by_bus}
                product = _text(self.nvml.nvmlDeviceGetName(h))
                devices.append(
                    Device(
                        uuid=uuid,
                        index=index,
                        minor=minor,
                        device_node=f"/dev/nvidia{minor}",
                        pci_bus_id=bus_id,
                        product=product,
                        memory_mib=memory_mib,
                        compute_capability=f"{cc[0]}.{cc[1]}",
                        numa_node=self._numa(h, bus_id),
                        nvlinks=links,
                        mig_enabled=mig_enabled,
                        mig_devices=migs,
                        simulated=product.endswith(SIMULATED_MARK),
                    )
                )
            version = _text(self._try(self.nvml.nvmlSystemGetDriverVersion, default=""))
            self._partial = frozenset(partial)
        simulated = bool(devices) and all(d.simulated for d in devices)
        return Inventory(backend="nvml", devices=tuple(devices), driver_version=version, simulated=simulated)

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

    def _is_lost(self, handle: Any) -> bool | None:
        """True: NVML calls the GPU lost; False: it answers; None: NVML cannot tell now."""
        try:
            self.nvml.nvmlDeviceGetMemoryInfo(handle)
        except self.nvml.NVMLError_GpuIsLost:
            return True
        except self.nvml.NVMLError:
            return None
        return False

    def _register(self, event_set: Any, d: Device, handle: Any, mask: int) -> HealthEvent | bool:
        """Watch one GPU's events: True when done (or the GPU is too old for events, which is logged:
        NVIDIA's plugin skips those too), False when it is lost (the probe reports that; it is
        registered once it answers), else the event to report: it cannot be watched."""
        nvml = self.nvml
        supported = self._try(nvml.nvmlDeviceGetSupportedEventTypes, handle, default=mask)
        try:
            nvml.nvmlDeviceRegisterEvents(handle, mask & supported, event_set)
        except nvml.NVMLError_NotSupported:
            log.warning("GPU %s (%s) is too old for health events; health checks off for it", d.index, d.uuid)
        except nvml.NVMLError_GpuIsLost:
            return False
        except nvml.NVMLError as e:  # unwatchable: unhealthy until the plugin restarts (as NVIDIA)
            return HealthEvent(
                "lost", d.uuid, time.monotonic(), sticky=True, message=f"cannot watch health events: {e}"
            )
        return True

    def events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        nvml = self.nvml
        inv = self.inventory()
        by_uuid = inv.by_uuid()
        parents = {m.uuid: d.uuid for d in inv.devices for m in d.mig_devices}
        mask = (
            nvml.nvmlEventTypeXidCriticalError
            | nvml.nvmlEventTypeDoubleBitEccError
            | nvml.nvmlEventTypeSingleBitEccError
        )
        event_set = nvml.nvmlEventSetCreate()
        handles: dict[DeviceUUID, Any] = {}
        lost: set[DeviceUUID] = set()
        unwatched: set[DeviceUUID] = set()  # lost when registered: registered once they answer
        failing = ""  # the event wait's error while it fails ('' while it works)

        def probe(uuids: list[DeviceUUID]) -> Iterator[HealthEvent]:
            for uuid in uuids:
                now_lost = self._is_lost(handles[uuid])
                if now_lost and uuid not in lost:
                    lost.add(uuid)
                    yield HealthEvent(
                        "lost", uuid, time.monotonic(), sticky=True, message="GPU is lost (NVML)"
                    )
                elif now_lost is False and uuid in lost:
                    lost.discard(uuid)
                    if uuid in self._partial:
                        self._token += 1  # its record was identity only: the inventory is read again
                    if uuid in unwatched:
                        done = self._register(event_set, by_uuid[uuid], handles[uuid], mask)
                        if isinstance(done, HealthEvent):
                            unwatched.discard(uuid)
                            yield done
                            continue
                        if done:
                            unwatched.discard(uuid)
                    log.info("GPU %s answers NVML again", uuid)
                    yield HealthEvent("cleared", uuid, time.monotonic(), message="GPU answers NVML again")

        try:
            for d in inv.devices:
                handles[d.uuid] = nvml.nvmlDeviceGetHandleByUUID(d.uuid)
                done = self._register(event_set, d, handles[d.uuid], mask)
                if isinstance(done, HealthEvent):
                    yield done
                elif not done:
                    unwatched.add(d.uuid)
            yield from probe(list(handles))  # a GPU lost before we started
            while not stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait_v2(event_set, LOST_WAIT_MS if lost else WAIT_MS)
                except nvml.NVMLError_Timeout:
                    data = None
                except nvml.NVMLError as e:
                    if str(e) != failing:  # once per failure, not every round
                        failing = str(e)
                        yield HealthEvent(
                            "lost",
                            None,
                            time.monotonic(),
                            sticky=True,
                            message=f"NVML event wait failed: {e}",
                        )
                    stop.wait(1.0)
                    continue
                if failing:
                    failing = ""
                    log.info("NVML event wait works again")
                    yield HealthEvent(
                        "cleared", None, time.monotonic(), message="NVML event wait works again"
                    )
                named: list[DeviceUUID] = []
                if data is not None:
                    event = self._health_event(data, inv)
                    if event is not None:
                        yield event
                        if event.device is not None:
                            named.append(parents.get(event.device, event.device))
                yield from probe([u for u in handles if u in lost or u in named])
        finally:
            self._try(nvml.nvmlEventSetFree, event_set)

    def _health_event(self, data: Any, inv: Inventory) -> HealthEvent | None:
        nvml = self.nvml
        kind = health_kind(data.eventType, nvml)
        if kind is None:
            return None
        try:
            device = self._event_device(data, inv)
        except nvml.NVMLError as e:  # an event for a device we cannot name: all of them (fail safe)
            return HealthEvent("lost", None, time.monotonic(), message=f"event from unknown device: {e}")
        xid = int(data.eventData) if kind == "xid" else None
        return HealthEvent(
            kind, device, time.monotonic(), xid=xid, message=f"NVML {kind} {xid or ''}".strip()
        )

    def inventory_token(self) -> object:
        # GPUs come and go only with a driver reload, which restarts the plugin's pod; a GPU listed
        # while lost is read again once it answers
        return self._token

    def close(self) -> None:
        self._try(self.nvml.nvmlShutdown)
