"""Plan.settled: the node patches whose watch events wake no further pass of their SpecialResource.

The promise behind it: once a settled patch is written, a pass over the same pods plans nothing more
for that node. Checked here as a fixed point over recorded states of every kind a walk meets (fresh,
half-way, validated, failing, tainted, not Ready); a node an upgrade is working on is never settled,
since the upgrade machine reads back what it wrote (its record, the cordon). The operator side:
the written view wakes the other SpecialResources at once and the echo wakes nobody.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    MONITORING,
    RUNTIME,
    driver_revision_label,
)
from sro.operator.handlers import Operator
from sro.operator.observed import NodeInfo, Observed, PodInfo
from sro.operator.plan import NodePatch
from sro.operator.reconcile import reconcile
from sro.operator.taints import taints_after
from tests.unit.operator.test_reconcile import (
    COUNT,
    NOW,
    NS,
    node,
    observed,
    ready_pod,
    sr,
    validation_pod,
)


def written(n: NodeInfo, patch: NodePatch | None) -> NodeInfo:
    """The node as the API server holds it after the merge patch (labels, annotations, taints, cordon)."""
    if patch is None:
        return n

    def merged(old: Any, new: Any) -> dict[str, str]:
        out = dict(old)
        for k, v in new.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    return replace(
        n,
        labels=merged(n.labels, patch.labels),
        annotations=merged(n.annotations, patch.annotations),
        taints=tuple(taints_after(n.taints, patch)) if patch.changes_taints else n.taints,
        unschedulable=n.unschedulable if patch.unschedulable is None else patch.unschedulable,
    )


def _half_way() -> Observed:
    a = node("a", **{COUNT: "8"})
    pods = [ready_pod(DRIVER, "a")]
    pods.append(validation_pod(observed([a], pods), DRIVER_VALIDATION, "a"))
    pods += [ready_pod(RUNTIME, "a"), ready_pod(DEVICE_PLUGIN, "a")]
    return observed([a, node("b")], pods)


def _validated() -> Observed:
    obs = _half_way()
    pods = [*obs.pods, validation_pod(obs, DEVICE_PLUGIN_VALIDATION, "a"), ready_pod(MONITORING, "a")]
    return replace(obs, pods=tuple(pods))


def _failing() -> Observed:
    a = node("a")
    pods = [ready_pod(DRIVER, "a")]
    pods.append(validation_pod(observed([a], pods), DRIVER_VALIDATION, "a", phase="Failed"))
    return observed([a], pods)


SCENARIOS = {
    "fresh nodes, no pods": lambda: observed([node("a"), node("b"), node("cpu", opt_in=False)]),
    "the driver ready": lambda: observed([node("a")], [ready_pod(DRIVER, "a")]),
    "half-way": _half_way,
    "validated": _validated,
    "a failed validation": _failing,
    "a startup taint": lambda: observed(
        [node("a")], the_sr=sr({"recipe": "simulated-gpu", "startupTaint": True})
    ),
    "a node not Ready": lambda: observed([replace(node("a"), ready=False), node("b")]),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_settled_patch_once_written_leaves_the_next_pass_nothing_to_write(name: str) -> None:
    obs = SCENARIOS[name]()
    first = reconcile(obs, NS, NOW)
    assert first.settled, f"{name}: nothing settled ({sorted(first.node_patches)})"
    assert first.settled <= set(first.node_patches)
    after = replace(obs, nodes=tuple(written(n, first.node_patches.get(n.name)) for n in obs.nodes))
    again = reconcile(after, NS, NOW)
    for n in first.settled:
        assert n not in again.node_patches, (name, n, first.node_patches[n], again.node_patches[n])


def test_a_node_an_upgrade_works_on_is_never_settled() -> None:
    nodes = [node(n) for n in ("a", "b")]
    nodes = [replace(n, labels={**n.labels, driver_revision_label("gpus"): "older"}) for n in nodes]
    pods: list[PodInfo] = [replace(ready_pod(DRIVER, n.name), revision="older") for n in nodes]
    plan = reconcile(observed(nodes, pods), NS, NOW)
    upgrading = plan.status.get("driverUpgrade", {}).get("nodes") or {}
    assert upgrading, plan.status  # the test's premise: an upgrade is under way
    assert plan.node_patches and not plan.settled


def test_a_node_leaving_the_selection_is_not_settled() -> None:
    gone = node("a", opt_in=False, **{"sro.dev/gpus.driver": "ready"})
    plan = reconcile(observed([gone, node("b")]), NS, NOW)
    assert "a" in plan.node_patches and "a" not in plan.settled


class _IO:
    def __init__(self) -> None:
        from sro.operator.cluster.cache import ClusterCache

        self.cache = ClusterCache(object(), NS)  # type: ignore[arg-type]
        self.on_settled = None


def _node_doc(labels: dict[str, str], rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "a", "labels": labels, "resourceVersion": rv}, "spec": {}, "status": {}}


def test_the_echo_of_a_settled_write_wakes_no_pass_and_the_others_hear_of_it_at_once() -> None:
    io = _IO()
    op = Operator(io)  # type: ignore[arg-type]
    assert io.on_settled == op.settled_write
    mine, other = op.event_for("gpus"), op.event_for("fpgas")
    listener = io.cache.nodes.listeners[0]
    listener("ADDED", _node_doc({}, "1"))
    mine.clear(), other.clear()

    wrote = _node_doc({"sro.dev/gpus.driver": "ready"}, "2")
    op.settled_write("gpus", wrote)
    assert not mine.is_set() and other.is_set()
    other.clear()
    listener("MODIFIED", wrote)  # the watch event of that very write
    assert not mine.is_set() and not other.is_set()
    # anyone else's change to the node still wakes every pass
    listener("MODIFIED", _node_doc({"sro.dev/gpus.driver": "ready", "sro.dev/gpus.runtime": "ready"}, "3"))
    assert mine.is_set() and other.is_set()
