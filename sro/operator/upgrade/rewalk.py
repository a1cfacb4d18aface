"""What a new driver invalidates on a node, and the smaller walk that validates it again (pure).

Why not walk the whole chain again: the first walk of a node tears down every later state when the
driver is not ready, because nothing later can run before a driver exists. After an upgrade most of
the chain is still good: the runtime's hook and CDI specs follow the driver's files by themselves
(`sro.node.runtime.cdikeeper` rewrites them when the driver's device list or libraries change),
feature discovery is a label, and the simulated driver's exporter re-reads its inventory at each
collection. Tearing them down and starting them one after another is what made "validate again" take
three times the by-hand steps. What a new driver does invalidate:

  * `driver-validation`: it proved the old driver; it runs again on the new one.
  * `device-plugin`: it found the driver's libraries (the `mounts` strategy) and opened its devices
    at start; its pods of before the move are restarted once the new driver is validated.
  * `device-plugin-validation`: a workload through the plugin, run again on the new plugin.
  * `monitoring`, on a real NVIDIA driver only (the `nvml` backend): the exporter maps libnvidia-ml
    of the old driver, so it is restarted too — beside the plugin, not after it: it depends on the
    driver's validation only.

The per-node order stays the product's promise for what is walked again: driver → driver validation
→ device plugin → device-plugin validation (`AFTER`). The unaffected states keep running and keep
their `ready` labels; the invalidated ones show `revalidating` until they pass again (the states'
DaemonSets are gated on `ready` or `revalidating`, so the states after them keep their pods).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    MONITORING,
    upgrade_annotation,
)
from sro.operator.observed import NodeInfo, PodInfo
from sro.operator.rendering import Context
from sro.operator.upgrade.record import DRIVER_REPLACED, Record

# What each invalidated state waits for before it is judged again (the earlier ones, transitively).
AFTER: Mapping[str, tuple[str, ...]] = {
    DRIVER_VALIDATION: (DRIVER,),
    DEVICE_PLUGIN: (DRIVER, DRIVER_VALIDATION),
    DEVICE_PLUGIN_VALIDATION: (DRIVER, DRIVER_VALIDATION, DEVICE_PLUGIN),
    MONITORING: (DRIVER, DRIVER_VALIDATION),
}
# The DaemonSet states whose pods of before the move are restarted (the driver's own are replaced
# by its DaemonSets, one per revision).
RESTARTED = (DEVICE_PLUGIN, MONITORING)


def invalidated(ctx: Context) -> frozenset[str]:
    """The states a new driver invalidates on a node (the driver itself included)."""
    out = {DRIVER, DRIVER_VALIDATION, DEVICE_PLUGIN, DEVICE_PLUGIN_VALIDATION}
    if ctx.recipe.backend == "nvml" and not ctx.simulated_driver:
        out.add(MONITORING)
    return frozenset(out)


@dataclass(frozen=True)
class Rewalk:
    """A node validating its new driver: the states walked again and the pods of before the move."""

    states: frozenset[str]
    stale: frozenset[str]  # uids of the invalidated states' pods that ran on the old driver

    def waits(self, state: str, again: set[str], chain: Sequence[str]) -> bool:
        """True while a state this one comes after (and that is enabled) has not passed again."""
        return any(s in chain and s not in again for s in AFTER.get(state, ()))


def rewalk_of(ctx: Context, node: NodeInfo) -> Rewalk | None:
    """The smaller walk for a node whose driver was just replaced; None for every other node (a
    node's first walk, a failed upgrade put back on its old driver: the whole chain, as always)."""
    rec = Record.from_json(node.annotations.get(upgrade_annotation(ctx.sr), ""), f"node {node.name}")
    if rec is None or rec.state != DRIVER_REPLACED:
        return None
    return Rewalk(invalidated(ctx), frozenset(rec.stale))


def stale_pods(ctx: Context, node: str, pods: Sequence[PodInfo]) -> tuple[str, ...]:
    """Uids of the pods to restart once the new driver is validated, taken when the driver label
    moves (so a pod the DaemonSet makes afterwards is never mistaken for one of before)."""
    states = invalidated(ctx) & set(RESTARTED)
    return tuple(sorted(p.uid for p in pods if p.node == node and p.state in states and p.uid))
