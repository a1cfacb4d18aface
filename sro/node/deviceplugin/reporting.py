"""The plugin's health report: its devices' faults and holders, written where discovery reads it.

Why the device plugin writes it: it is the agent that applies the health rules (`sro.devices.health`)
to its devices, so what it reports is exactly what it takes out of allocatable; and it holds no API
token (least privilege), so it writes a file (`sro.devices.healthreport`, one per recipe, atomic)
in a hostPath directory, and discovery carries it to the operator in the node's NodeFeature.

When: at start (once the inventory is read), whenever the faults change (the reporter wakes on the
health board's changes and looks every `INTERVAL`), and when the holders change (read from the
kubelet's pod-resources API every `HOLDERS_EVERY` and at once on a health change, so the pods of a
device that just failed are in the report that announces the failure). Never more often than every
`INTERVAL`, and the file is rewritten only when its content changed. A missing pod-resources socket
(not mounted, kubelet restarting) gives empty holders, logged once: never a crash, never a missing
report. Building the report (`make_report`) is pure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from sro.api.timestamps import now_utc, stamp
from sro.devices.health import ALL
from sro.devices.healthreport import DeviceFault, HealthReport, boot_id, write_report
from sro.devices.model import Inventory
from sro.host.podresources import Assignment, KubeletUnavailable
from sro.node.deviceplugin.announcing import ResourcePlan

log = logging.getLogger(__name__)

INTERVAL = 0.5  # at most one write this often
HOLDERS_EVERY = 2.0  # pod-resources is asked this often (allocations show up within it)


def physical_ids(inv: Inventory) -> dict[str, str]:
    """Every device and MIG UUID -> its physical device's id in the report (the index)."""
    out: dict[str, str] = {}
    for d in inv.devices:
        out[str(d.uuid)] = str(d.index)
        for m in d.mig_devices:
            out[str(m.uuid)] = str(d.index)
    return out


def make_report(
    recipe: str,
    resource: str,
    node: str,
    boot: str,
    updated: str,
    inv: Inventory,
    plans: Sequence[ResourcePlan],
    faults: Mapping[str, tuple[tuple[int, ...], str]],
    assignments: Sequence[Assignment],
) -> HealthReport:
    """The report of the devices `plans` announce, from the health board's faults (key -> Xids,
    reason; `ALL` hits every device) and the kubelet's assignments (only ids `plans` announced)."""
    ids = physical_ids(inv)
    announced = {a.id: ids.get(str(a.unit.parent), "") for p in plans for a in p.devices}
    devices = sorted({i for i in announced.values() if i}, key=_order)
    merged: dict[str, tuple[list[int], list[str]]] = {}
    for key, (xids, reason) in sorted(faults.items()):
        targets = devices if key == str(ALL) else [ids.get(key, "")]
        for device in targets:
            if device not in devices:
                continue  # a device this plugin does not announce (filtered out, another pool)
            seen, why = merged.setdefault(device, ([], []))
            seen.extend(x for x in xids if x not in seen)
            if reason and reason not in why:
                why.append(reason)
    resources = {p.resource for p in plans}
    holders: dict[str, set[str]] = {}
    for a in assignments:
        device = announced.get(a.device_id, "") if a.resource in resources else ""
        if device:
            holders.setdefault(device, set()).add(f"{a.namespace}/{a.pod}")
    return HealthReport(
        recipe=recipe,
        resource=resource,
        node=node,
        boot_id=boot,
        updated=updated,
        devices=tuple(devices),
        faults=tuple(
            DeviceFault(d, tuple(merged[d][0]), "; ".join(merged[d][1])) for d in sorted(merged, key=_order)
        ),
        holders={d: tuple(sorted(p)) for d, p in sorted(holders.items())},
    )


def _order(device: str) -> tuple[int, str]:
    return (0, device.zfill(8)) if device.isdigit() else (1, device)


class HealthReporter:
    """Keeps `<directory>/<recipe>.json` equal to what the plugin knows (see the module doc)."""

    def __init__(
        self,
        directory: Path,
        recipe: str,
        node: str,
        driver_root: Path,
        list_pods: Callable[[], list[Assignment]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.recipe = recipe
        self.node = node
        self.driver_root = driver_root
        self.list_pods = list_pods
        self.clock = clock
        self.last: HealthReport | None = None
        self.writes = 0
        self._assignments: list[Assignment] = []
        self._holders_at = float("-inf")
        self._said = ""  # the pod-resources failure logged last: said once, not every 2 s

    def _holders(self, force: bool) -> list[Assignment]:
        now = self.clock()
        if not force and now - self._holders_at < HOLDERS_EVERY:
            return self._assignments
        self._holders_at = now
        try:
            self._assignments = self.list_pods()
            if self._said:
                log.info("health report: the kubelet's pod-resources API answers again")
            self._said = ""
        except KubeletUnavailable as e:
            if str(e) != self._said:
                log.warning("health report: no holders (pod-resources unavailable): %s", e)
            self._said = str(e)
            self._assignments = []
        return self._assignments

    def update(
        self,
        resource: str,
        inv: Inventory | None,
        plans: Sequence[ResourcePlan],
        faults: Mapping[str, tuple[tuple[int, ...], str]],
        health_changed: bool = False,
    ) -> bool:
        """Write the report when it differs from the last one written; True when it wrote."""
        if inv is None or not plans:
            return False  # nothing served yet (the driver is installing): nothing to report
        report = make_report(
            self.recipe,
            resource,
            self.node,
            boot_id(self.driver_root),
            stamp(now_utc()),
            inv,
            plans,
            faults,
            self._holders(health_changed),
        )
        if report.same_content(self.last):
            return False
        try:
            write_report(self.directory, report)
        except OSError as e:
            log.error("health report %s: cannot write: %s", self.directory, e)
            return False
        if self.last is None or self.last.faults != report.faults:
            log.info(
                "health report: %d device(s), faults: %s",
                len(report.devices),
                ", ".join(f"{f.device} {list(f.xids)}" for f in report.faults) or "none",
            )
        self.last = report
        self.writes += 1
        return True

    def run(
        self,
        stop: threading.Event,
        current: Callable[
            [],
            tuple[str, Inventory | None, Sequence[ResourcePlan], Mapping[str, tuple[tuple[int, ...], str]]],
        ],
        wait_change: Callable[[int, float], int],
    ) -> None:
        """Until `stop`: look every INTERVAL, or as soon as the health board changes (rate-limited)."""
        seen = -1
        while not stop.is_set():
            version = wait_change(seen, INTERVAL)
            changed = version != seen
            seen = version
            try:
                self.update(*current(), health_changed=changed)
            except Exception:  # never end the plugin over its report: log it and look again
                log.exception("health report failed; retrying")
            stop.wait(INTERVAL)
