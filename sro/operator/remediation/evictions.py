"""Which pods leave a node for a remediation, and which evictions to ask for this pass (pure).

Why the upgrade's rules: an eviction goes through the Eviction API, so PodDisruptionBudgets hold it
back and it is asked again next pass; it is asked only while the pod is there and not already
terminating, so an operator restarted mid-step never asks twice for a pod on its way out; static
pods' mirrors and DaemonSet pods are never targets (eviction cannot move them). Unlike an upgrade,
a pod with no controller or an emptyDir volume is evicted too: it holds a device that has failed, so
its work is lost already, and the repair needs the device free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sro.operator.observed import WorkloadPod
from sro.operator.remediation.policy import DRAIN_AND_RESET, REBOOT


def targets(
    action: str,
    pods: Sequence[WorkloadPod],
    devices: Sequence[str],
    holders: Mapping[str, Sequence[str]],
    resource: str,
) -> list[WorkloadPod]:
    """The pods `action` moves off the node: the faulty devices' users (restart-workload,
    reset-device), every pod using the resource too (drain-and-reset), every pod (reboot)."""
    users = {key for d in devices for key in holders.get(d, ())}
    out = []
    for p in pods:
        if p.finished or p.mirror or p.controller == "DaemonSet":
            continue
        if p.key in users or (action == DRAIN_AND_RESET and resource in p.resources) or action == REBOOT:
            out.append(p)
    return out


@dataclass(frozen=True)
class Evictions:
    ask: tuple[tuple[str, str], ...]  # (namespace, name) to evict this pass
    asked: tuple[str, ...]  # every pod asked for so far (the record's `evicted`)
    left: tuple[WorkloadPod, ...]  # the targets still on the node


def evictions(pods: Sequence[WorkloadPod], asked_before: Sequence[str]) -> Evictions:
    """Ask for every target that is there and not terminating; remember who was asked."""
    asked = list(asked_before)
    ask = []
    for p in pods:
        if p.deleting:
            continue
        ask.append((p.namespace, p.name))
        if p.key not in asked:
            asked.append(p.key)
    return Evictions(tuple(ask), tuple(asked), tuple(pods))


def names(pods: Sequence[WorkloadPod], limit: int = 3) -> str:
    words = ", ".join(p.key for p in pods[:limit])
    return words + (f" and {len(pods) - limit} more" if len(pods) > limit else "")
