"""The plugin's life: config and inventory (re)loads, health threads, and the kubelet-socket watch.

Why a watch loop rather than events: every failure the plugin must survive shows up as a state it
can look at every 200 ms with a stat(): the kubelet socket is missing (kubelet down: keep serving,
wait), has a new identity (kubelet restarted and wiped the directory: restart our servers and
register again, timing it), our own socket is gone or the server no longer answers its own
GetDevicePluginOptions (restart it, with backoff), the config file changed (reload; a malformed
file is logged and the last good config kept), the inventory is not there yet (the simulated
driver not installed: retry). Nothing here exits the process; only `stop` ends `run`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sro.api.recipes import Recipe
from sro.api.yamltext import load_yaml_file
from sro.devices.health import HealthTracker
from sro.devices.model import Backend, EventsStop, HealthEvent, Inventory
from sro.node.deviceplugin import announcing, drivermounts
from sro.node.deviceplugin.config import (
    RUNTIMES_FILE,
    ConfigError,
    PluginConfig,
    default_config,
    parse_config,
    parse_runtimes,
)
from sro.node.deviceplugin.core import HealthBoard, ResourceCore
from sro.node.deviceplugin.reporting import HealthReporter
from sro.node.deviceplugin.server import KUBELET_SOCKET, PluginServer, RegistrationError, register

log = logging.getLogger(__name__)

Identity = tuple[int, int]
PRIME_SECONDS = 0.3  # the simulated backend reads its fault state at once; NVML has no history


def load_config(
    path: Path | None, recipe: Recipe, resource_override: str | None = None, node_name: str = ""
) -> PluginConfig:
    """Parse the config file (ConfigError naming the file and field when malformed), with the
    defaults of this node's runtime (`runtimes.yaml` beside it, when there is one)."""
    cdi_runtime = False
    if path is not None and node_name and (path.parent / RUNTIMES_FILE).exists():
        cdi_nodes = load_yaml_file(path.parent / RUNTIMES_FILE, parse_runtimes, ConfigError)
        cdi_runtime = node_name in cdi_nodes
    config = default_config(recipe, cdi_runtime)
    if path is not None:
        config = load_yaml_file(path, lambda doc: parse_config(doc, recipe, cdi_runtime), ConfigError)
    if resource_override:
        config = replace(config, resource_name=resource_override)
    return config


def _identity(path: Path) -> Identity | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


@dataclass
class _Slot:
    server: PluginServer
    next_try: float = 0.0
    backoff: float = 0.5
    restarts: list[float] = field(default_factory=list)


class Plugin:
    def __init__(
        self,
        recipe: Recipe,
        backend: Backend,
        plugin_dir: Path,
        config_path: Path | None = None,
        resource_override: str | None = None,
        driver_root_seen: Path | None = None,
        poll: float = 0.2,
        liveness_every: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        ready_file: Path | None = None,
        node_name: str = "",
        reporter: HealthReporter | None = None,
    ) -> None:
        self.recipe = recipe
        self.node_name = node_name  # finds this node's runtime in runtimes.yaml
        self.backend = backend
        self.plugin_dir = plugin_dir
        self.kubelet_socket = plugin_dir / KUBELET_SOCKET
        self.config_path = config_path
        self.resource_override = resource_override
        self.driver_root_seen = driver_root_seen or Path(recipe.driver_root)
        self.poll = poll
        self.liveness_every = liveness_every
        self.clock = clock
        self.config = default_config(recipe)
        self.tracker = HealthTracker(
            self.config.ignored_xids, self.config.recover_after, self.config.health_enabled
        )
        self.board = HealthBoard(self.tracker)
        self.slots: list[_Slot] = []
        self.inventory: Inventory | None = None
        self.registration_latencies: list[float] = []  # seconds from kubelet socket creation to Register
        self._config_ident: object = False  # (config file identity, inventory token) last loaded
        self._kubelet: Identity | None = None
        self._kubelet_appeared = 0.0
        self._last_liveness = 0.0
        self._next_load = 0.0
        self._restart_requested = False
        self.ready_file = ready_file  # exists while `ready()`: the pod's readiness probe tests it
        self._ready = False
        self._problem = ""  # the last load problem logged: a waiting plugin says it once, not every 2 s
        self.reporter = reporter  # writes the node's health report (None: no report)

    def request_restart(self) -> None:
        """Rebuild and re-register everything on the next loop (SIGHUP, as NVIDIA's plugin does)."""
        self._restart_requested = True

    # --- configuration and inventory -------------------------------------------------------
    def load(self) -> bool:
        """(Re)build plans and servers when the config file changed or nothing is served yet."""
        # the config file's identity and the backend's inventory token: either changing rebuilds
        ident = (_identity(self.config_path) if self.config_path else None, self.backend.inventory_token())
        if self._restart_requested:
            self._restart_requested = False
            self._config_ident = False
        if self.slots and ident == self._config_ident:
            return False
        now = self.clock()
        if not self.slots and now < self._next_load and ident == self._config_ident:
            return False
        self._config_ident = ident
        self._next_load = now + 2.0
        try:
            config = load_config(self.config_path, self.recipe, self.resource_override, self.node_name)
            inv = self.backend.inventory()
            plans = announcing.plan(inv, config)
        except ConfigError as e:
            self._log_problem(f"configuration rejected (keeping the previous one): {e}")
            return False
        except Exception as e:  # inventory not there yet: the driver may still be installing
            self._log_problem(
                f"cannot read the {self.backend.name} inventory (retrying every 2s; not ready until then): {e}"
            )
            return False
        self._problem = ""
        files = (
            drivermounts.find(self.recipe, self.driver_root_seen)
            if "mounts" in config.list_strategies
            else []
        )
        self.config, self.inventory = config, inv
        self.tracker.ignored_xids = config.ignored_xids
        self.tracker.recover_after = config.recover_after
        self.tracker.enabled = config.health_enabled
        for slot in self.slots:
            slot.server.stop()
        self.slots = [
            _Slot(PluginServer(ResourceCore(p, self.recipe, config, self.board, files), self.plugin_dir))
            for p in plans
        ]
        for slot in self.slots:
            slot.server.start()
        log.info(
            "%s backend: %d devices; announcing %s",
            self.backend.name,
            len(inv.devices),
            ", ".join(f"{p.resource}={len(p.devices)}" for p in plans),
        )
        self._kubelet = None  # register the new servers
        return True

    def _log_problem(self, message: str) -> None:
        if message != self._problem:
            log.error("%s", message)
        else:
            log.debug("%s", message)
        self._problem = message

    # --- readiness ---------------------------------------------------------------------------
    def ready(self) -> bool:
        """Every resource is served and registered with the kubelet that runs now."""
        return (
            bool(self.slots)
            and self._kubelet is not None
            and all(
                s.server.grpc_server is not None and s.server.registered_with == self._kubelet
                for s in self.slots
            )
        )

    def _mark_ready(self, ready: bool) -> None:
        if ready == self._ready:
            return
        self._ready = ready
        log.info("%s", "ready: every resource registered with the kubelet" if ready else "not ready")
        if self.ready_file is None:
            return
        if ready:
            self.ready_file.write_text("ready\n")
        else:
            self.ready_file.unlink(missing_ok=True)

    # --- health ----------------------------------------------------------------------------
    def _monitor(self, stop: threading.Event) -> None:
        said = ""  # the failure logged last: one that persists is said once, not every retry
        while not stop.is_set():
            try:
                for ev in self.backend.events(stop):
                    self.board.apply(ev)
            except Exception as e:  # the event source broke: fail safe, every device unhealthy
                why = f"{type(e).__name__}: {e}"
                log.log(
                    logging.ERROR if why != said else logging.DEBUG,
                    "health events from %s failed (%s); marking every device unhealthy",
                    self.backend.name,
                    why,
                )
                said = why
                log.debug("the health event source's failure", exc_info=True)
                self.board.apply(
                    HealthEvent("lost", None, time.monotonic(), message=f"health source failed: {e}")
                )
                stop.wait(5.0)

    def _ticker(self, stop: threading.Event) -> None:
        while not stop.is_set():
            due = self.board.tick()
            wait = 0.25 if due is None else min(0.25, max(0.01, due - time.monotonic()))
            stop.wait(wait)

    def report_inputs(
        self,
    ) -> tuple[str, Inventory | None, list[announcing.ResourcePlan], dict[str, tuple[tuple[int, ...], str]]]:
        """What the health report is made of now: resource, inventory, plans, the board's faults."""
        plans = [slot.server.core.plan for slot in list(self.slots)]
        return self.config.resource_name, self.inventory, plans, dict(self.board.faults)

    # --- kubelet ---------------------------------------------------------------------------
    def _restart(self, slot: _Slot, why: str) -> None:
        now = self.clock()
        if now < slot.next_try:
            return
        slot.restarts = [t for t in slot.restarts if now - t < 3600] + [now]
        # back off when restarts pile up (NVIDIA gives up after 5 an hour; we keep trying, slower)
        slot.backoff = 0.5 if len(slot.restarts) <= 5 else min(30.0, slot.backoff * 2)
        log.warning(
            "%s: restarting gRPC server (%s; %d restarts in the last hour)",
            slot.server.resource,
            why,
            len(slot.restarts),
        )
        try:
            slot.server.start()
            slot.next_try = 0.0
        except Exception:
            log.exception(
                "%s: gRPC server failed to start; retrying in %.1fs", slot.server.resource, slot.backoff
            )
            slot.next_try = now + slot.backoff

    def watch_once(self) -> None:
        ident = _identity(self.kubelet_socket)
        now = self.clock()
        if ident is None:
            if self._kubelet is not None:
                log.warning("kubelet socket %s is gone; waiting for the kubelet", self.kubelet_socket)
                for slot in self.slots:
                    slot.server.registered_with = None
            self._kubelet = None
            return
        if ident != self._kubelet:
            self._kubelet = ident
            self._kubelet_appeared = ident[1] / 1e9
            log.info(
                "kubelet socket %s (re)created; (re)starting servers and registering", self.kubelet_socket
            )
            for slot in self.slots:
                # a new kubelet wipes the directory: a server started before its socket needs a new one
                if slot.server.started_at <= self._kubelet_appeared:
                    slot.next_try = 0.0
                    self._restart(slot, "the kubelet restarted")
        check_liveness = now - self._last_liveness >= self.liveness_every
        if check_liveness:
            self._last_liveness = now
        for slot in self.slots:
            server = slot.server
            if server.grpc_server is None or not server.socket_present():
                self._restart(slot, "its socket disappeared")
            elif check_liveness and not server.alive():
                self._restart(slot, "it stopped answering")
            if server.grpc_server is None or server.registered_with == ident or now < slot.next_try:
                continue
            try:
                register(self.kubelet_socket, server.endpoint, server.resource)
            except RegistrationError as e:
                slot.backoff = min(5.0, slot.backoff * 2)
                slot.next_try = now + slot.backoff
                log.error("%s (retrying in %.1fs)", e, slot.backoff)
                continue
            server.registered_with = ident
            slot.backoff = 0.5
            latency = max(0.0, time.time() - self._kubelet_appeared)
            self.registration_latencies.append(latency)
            log.info(
                "%s: registered with the kubelet %.3fs after its socket appeared", server.resource, latency
            )

    def run(self, stop: threading.Event) -> None:
        events = EventsStop()  # the health source's own stop flag: its first wait ends the prime
        threads = [
            threading.Thread(target=self._monitor, args=(events,), name="health-monitor", daemon=True),
            threading.Thread(target=self._ticker, args=(stop,), name="health-ticker", daemon=True),
        ]
        if self.reporter is not None:
            threads.append(
                threading.Thread(
                    target=self.reporter.run,
                    args=(stop, self.report_inputs, self.board.wait_change),
                    name="health-report",
                    daemon=True,
                )
            )
        for t in threads:
            t.start()
        # let the backend report faults that are already active before the first device list goes
        # out, so a device faulted before the plugin started is never announced healthy: until the
        # source has delivered them and waits for its next look, PRIME_SECONDS at most
        events.idle.wait(PRIME_SECONDS)
        try:
            if self.ready_file is not None:  # one a restarted container left in its pod's emptyDir
                self.ready_file.unlink(missing_ok=True)
            while not stop.is_set():
                try:
                    self.load()
                    self.watch_once()
                    self._mark_ready(self.ready())
                except Exception:  # never exit on a surprise: log it and look again
                    log.exception("device plugin loop failed; continuing")
                stop.wait(self.poll)
        finally:
            events.set()
            if self.ready_file is not None:
                self.ready_file.unlink(missing_ok=True)
            for slot in self.slots:
                slot.server.stop()
            self.backend.close()
            for t in threads:
                t.join(timeout=2)
