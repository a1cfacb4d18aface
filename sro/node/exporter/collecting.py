"""Collection off the scrape path: sources read every interval into an immutable snapshot.

Why: a scrape must never wait on a GPU, the kubelet or the API server (dcgm-exporter asks the
kubelet on the scrape path, its own TODO). `Collector.collect()` asks every source once, renders
the exposition text and swaps in a new frozen `Snapshot`; the HTTP handler only hands out the bytes
of the current one. `run()` collects every `interval` seconds on its own thread and at once when
`request()` is called (SIGUSR1, tests).

Sources, each on its own so one failing never hides the others:
- `devices`: the backend's inventory, the telemetry readings, and health from the backend's event
  stream, tracked on a thread with the device plugin's rules (`sro.devices.health`) — including its
  fail-safe: an event stream that breaks marks every device unhealthy until it works again;
- `kubelet`: pod-resources `List` (who holds what); a failure keeps the last answer for up to
  `STALE_AFTER` seconds (a kubelet restart does not stop containers, and series that vanish for one
  interval break every graph), then drops the pod labels;
- `node`: a `get` of this Node (allocatable, stack state labels);
- `config` (with `--config`): the health policy file, re-read when it changes; a malformed edit keeps
  the last good policy;
- resets (part of `devices`, with `read_resets`): a simulated driver's reset counts, read from its
  state file each collection (so they survive this process restarting); None from the reader, as
  on real hardware, leaves `sro_device_resets_total` out.
A source that fails, or answers only in part (a device that stops answering, a load file that cannot
be read), sets `sro_exporter_source_up{source}` to 0, counts in `sro_exporter_collect_errors_total`,
and logs why once per change (not every interval).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sro.devices.health import ALL, HealthPolicy, HealthTracker
from sro.devices.model import Backend, DeviceUUID, EventsStop, HealthEvent, Inventory
from sro.devices.telemetry import Readings, Telemetry
from sro.host.podresources import Assignment
from sro.node.exporter import config as exporter_config
from sro.node.exporter import exposition
from sro.node.exporter.attribution import Attribution, attribute
from sro.node.exporter.exposition import Collected
from sro.node.exporter.nodefacts import NodeFacts
from sro.node.exporter.recipeview import RecipeView

log = logging.getLogger(__name__)

DEVICES, KUBELET, NODE, CONFIG = "devices", "kubelet", "node", "config"
STALE_AFTER = 300.0
EVENT_RETRY = 5.0

BackendOpener = Callable[[], tuple[Backend, Telemetry]]
PodLister = Callable[[], Sequence[Assignment]]
NodeReader = Callable[[], NodeFacts]
ResetsReader = Callable[[], Mapping[DeviceUUID, int] | None]


@dataclass(frozen=True)
class Snapshot:
    text: bytes
    collected: Collected
    number: int = 0  # how many collections made it (0: none yet)
    at: float = 0.0  # time.monotonic() when it was taken


@dataclass
class _Source:
    up: bool = False
    errors: int = 0
    why: str | None = None  # the last failure logged (None: logged as fine)


@dataclass
class _Devices:
    backend: Backend | None = None
    telemetry: Telemetry | None = None
    inventory: Inventory | None = None
    token: object = None
    stop: EventsStop = field(default_factory=EventsStop)
    thread: threading.Thread | None = None


class Collector:
    def __init__(
        self,
        open_devices: BackendOpener,
        domain: str,
        hostname: str,
        simulated: bool,
        list_pods: PodLister | None = None,
        read_node: NodeReader | None = None,
        config_path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        view: RecipeView | None = None,
        read_resets: ResetsReader | None = None,
    ) -> None:
        self.open_devices = open_devices
        self.read_resets = read_resets
        self.view = view or RecipeView()
        self.domain = domain
        self.hostname = hostname
        self.simulated = simulated
        self.list_pods = list_pods
        self.read_node = read_node
        self.config_path = config_path
        self.clock = clock
        self.policy = HealthPolicy()
        self.tracker = HealthTracker(self.policy.ignored_xids, self.policy.recover_after, self.policy.enabled)
        self._health_lock = threading.Lock()
        self._xids: dict[DeviceUUID, int] = {}
        self._devices = _Devices()
        self._sources = {DEVICES: _Source(), KUBELET: _Source(), NODE: _Source()}
        if config_path is not None:
            self._sources[CONFIG] = _Source()
        self._config_ident: object = None
        self._pods: list[Assignment] | None = None
        self._pods_at = 0.0
        self._collect_lock = threading.Lock()
        self._wake = threading.Event()
        self._done = threading.Condition()
        self.snapshot = Snapshot(b"", Collected(hostname))

    # --- sources -------------------------------------------------------------------------
    def problem(self, source: str) -> str | None:
        """Why the source failed in the last collection (None: it answered, or is not used)."""
        s = self._sources.get(source)
        return None if s is None or s.up else s.why

    def _report(self, source: str, why: str | None) -> None:
        """Record one source's outcome; log it when it changes."""
        s = self._sources[source]
        s.up = why is None
        if why is not None:
            s.errors += 1
            if why != s.why:
                log.warning("source %s unavailable: %s (serving the rest)", source, why)
        elif s.why is not None:
            log.info("source %s available again", source)
        s.why = why

    def _load_config(self) -> None:
        if self.config_path is None:
            return
        try:
            st = os.stat(self.config_path)
            ident: object = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            ident = "missing"  # an optional ConfigMap not created: the default policy, not an error
        except OSError as e:
            ident = f"unreadable: {e}"
        if ident == self._config_ident:
            self._report(CONFIG, self._sources[CONFIG].why)  # unchanged: the same outcome as before
            return
        self._config_ident = ident
        if ident == "missing":
            log.info("no config file %s: the default health policy", self.config_path)
            policy = HealthPolicy()
        else:
            try:
                policy = exporter_config.load(self.config_path)
            except exporter_config.ConfigError as e:
                self._report(CONFIG, f"{e} (keeping the previous health policy)")
                return
        self.policy = policy
        with self._health_lock:
            self.tracker.ignored_xids = policy.ignored_xids
            self.tracker.recover_after = policy.recover_after
            self.tracker.enabled = policy.enabled
        self._report(CONFIG, None)

    def _watch_events(self, backend: Backend, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                for ev in backend.events(stop):
                    self.apply_event(ev)
            except Exception as e:  # the event source broke: fail safe, every device unhealthy
                log.error(
                    "health events from %s failed (%s: %s); every device unhealthy until they work",
                    backend.name,
                    type(e).__name__,
                    e,
                )
                log.debug("the health event source's failure", exc_info=True)
                self.apply_event(
                    HealthEvent("lost", None, time.monotonic(), message=f"health source failed: {e}")
                )
                stop.wait(EVENT_RETRY)

    def apply_event(self, ev: HealthEvent) -> None:
        with self._health_lock:
            self.tracker.apply(ev)
            if ev.device is None:
                return
            if ev.kind == "xid" and ev.xid is not None:
                self._xids[ev.device] = ev.xid
            elif ev.kind == "cleared":
                self._xids.pop(ev.device, None)

    def _forget_recovered_xids(self, unhealthy: frozenset[DeviceUUID]) -> None:
        """A device fault's Xid is reported until the device is healthy again. NVML sends no event
        when a fault ends (the simulated backend does: `cleared`), so without this the last Xid of an
        NVIDIA GPU stayed in DCGM_FI_DEV_XID_ERRORS, and SroGpuXidError firing, until the exporter
        restarted, while the device plugin had long announced the GPU healthy. Application Xids never
        make a device unhealthy: they stay as the last Xid seen, as dcgm-exporter reports them."""
        if not self.tracker.enabled:
            return
        for device, xid in list(self._xids.items()):
            if xid not in self.tracker.ignored_xids and device not in unhealthy and ALL not in unhealthy:
                del self._xids[device]

    def _open(self) -> _Devices:
        dev = self._devices
        if dev.backend is None:
            dev.backend, dev.telemetry = self.open_devices()
            dev.stop = EventsStop()
            dev.thread = threading.Thread(
                target=self._watch_events, args=(dev.backend, dev.stop), name="health-events", daemon=True
            )
            dev.thread.start()
        return dev

    def _inventory(self) -> Inventory | None:
        try:
            dev = self._open()
            assert dev.backend is not None
            token = dev.backend.inventory_token()
            if dev.inventory is None or token != dev.token:
                dev.inventory, dev.token = dev.backend.inventory(), token
            return dev.inventory
        except Exception as e:  # backend missing (NVML absent, driver not installed yet): retry next time
            self._report(DEVICES, f"{type(e).__name__}: {e}")
            self._devices.inventory = None
            return None

    def _readings(self, inv: Inventory, attribution: Attribution | None) -> Readings:
        telemetry = self._devices.telemetry
        assert telemetry is not None
        try:
            readings = telemetry.read(inv, attribution.holders() if attribution else {})
        except Exception as e:  # the whole source broke (NVML shut down under us, ...)
            self._report(DEVICES, f"readings: {type(e).__name__}: {e}")
            return Readings()
        problems = [f"device {u} does not answer: {why}" for u, why in sorted(readings.silent.items())]
        problems += list(readings.problems)
        self._report(DEVICES, "; ".join(problems) or None)
        return readings

    def _read_pods(self) -> list[Assignment] | None:
        if self.list_pods is None:
            return None
        now = self.clock()
        try:
            pods = list(self.list_pods())
        except Exception as e:
            stale = self._pods is not None and now - self._pods_at <= STALE_AFTER
            suffix = f" (pod labels from {now - self._pods_at:.0f}s ago)" if stale else ""
            self._report(KUBELET, f"{e}{suffix}")
            if not stale:
                self._pods = None
            return self._pods
        self._pods, self._pods_at = pods, now
        self._report(KUBELET, None)
        return pods

    def _read_node(self) -> NodeFacts | None:
        if self.read_node is None:
            self._report(
                NODE, "no node name (--node-name or $NODE_NAME): allocatable and stack state not reported"
            )
            return None
        try:
            facts = self.read_node()
        except Exception as e:
            self._report(NODE, str(e))
            return None
        self._report(NODE, "; ".join(facts.problems) or None)
        return facts

    def _resets(self) -> Mapping[DeviceUUID, int] | None:
        """The reset counts, or None (no reader, no count here, or it could not be read: then the
        devices source is down for this collection, rather than the counter dropping to 0)."""
        if self.read_resets is None:
            return None
        try:
            return self.read_resets()
        except Exception as e:
            self._report(DEVICES, f"reset counts: {type(e).__name__}: {e}")
            return None

    # --- collection ----------------------------------------------------------------------
    def prime(self, seconds: float) -> None:
        """Open the devices and let the event stream report what is active now (a simulated device
        faulted before the exporter started is never reported healthy): until the source has
        delivered it and waits for its next look, `seconds` at most."""
        try:
            dev = self._open()
        except Exception as e:
            self._report(DEVICES, f"{type(e).__name__}: {e}")
            return
        dev.stop.idle.wait(seconds)

    def collect(self) -> Snapshot:
        """Ask every source once and swap in a new snapshot (never raises for a source's failure)."""
        with self._collect_lock:
            start = self.clock()
            self._load_config()
            pods = self._read_pods()
            inv = self._inventory()
            attribution = attribute(pods, inv, self.domain) if pods is not None and inv is not None else None
            readings = Readings()
            if inv is not None and self.view.telemetry:
                readings = self._readings(inv, attribution)
            elif inv is not None:  # health only: the inventory is all the devices source gives
                self._report(DEVICES, None)
            resets = self._resets() if inv is not None else None
            node = self._read_node()
            now = time.monotonic()
            with self._health_lock:
                unhealthy = frozenset(self.tracker.unhealthy(now))
                self._forget_recovered_xids(unhealthy)
                xids = {self._parent(inv, u): x for u, x in self._xids.items()} if inv else {}
            collected = Collected(
                hostname=self.hostname,
                simulated=self.simulated,
                inventory=inv,
                readings=readings,
                xids=xids,
                unhealthy=unhealthy,
                pods=attribution,
                node=node,
                up={k: s.up for k, s in self._sources.items()},
                errors={k: s.errors for k, s in self._sources.items()},
                duration=self.clock() - start,
                view=self.view,
                resets=resets,
            )
            snap = Snapshot(
                exposition.render(collected).encode(), collected, self.snapshot.number + 1, time.monotonic()
            )
            self.snapshot = snap
        with self._done:
            self._done.notify_all()
        return snap

    @staticmethod
    def _parent(inv: Inventory, uuid: DeviceUUID) -> DeviceUUID:
        for d in inv.devices:
            if uuid == d.uuid or any(m.uuid == uuid for m in d.mig_devices):
                return d.uuid
        return uuid

    def request(self) -> None:
        """Collect now (SIGUSR1, tests) instead of at the end of the interval."""
        self._wake.set()

    def wait_for(self, number: int, timeout: float) -> bool:
        """Wait until snapshot `number` (or a later one) exists."""
        with self._done:
            return self._done.wait_for(lambda: self.snapshot.number >= number, timeout)

    def run(self, stop: threading.Event, interval: float, immediately: bool = True) -> None:
        """Collect every `interval` seconds (and on `request()`) until `stop` is set; `immediately`
        False waits an interval first (the caller has just collected)."""
        if not immediately:
            self._wake.wait(interval)
            self._wake.clear()
        while not stop.is_set():
            try:
                self.collect()
            except Exception:  # a bug, not a source failing: log it and keep serving the last snapshot
                log.exception("collection failed; serving the previous snapshot")
            self._wake.wait(interval)
            self._wake.clear()

    def close(self) -> None:
        dev = self._devices
        dev.stop.set()
        if dev.thread is not None:
            dev.thread.join(timeout=2)
        if dev.backend is not None:
            dev.backend.close()
