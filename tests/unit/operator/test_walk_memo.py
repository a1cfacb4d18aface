"""The walks of steady nodes kept between passes (`WalkMemo`): the same plan as without it, and a
node walked again as soon as its record, its pods' or the spec change."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    MONITORING,
    RUNTIME,
)
from sro.operator import walk as walk_module
from sro.operator.observed import NodeInfo, Observed, PodInfo
from sro.operator.plan import Plan
from sro.operator.reconcile import reconcile
from sro.operator.walk import WalkMemo
from tests.unit.operator.test_reconcile import (
    COUNT,
    NOW,
    NS,
    node,
    observed,
    ready_pod,
    sr,
    validation_pod,
    with_labels,
)


def steady(names: list[str]) -> Observed:
    """Nodes that walked every state: labels, annotations and pods as the passes left them."""
    nodes = [node(n, **{COUNT: "8"}) for n in names]
    pods: list[PodInfo] = [
        ready_pod(s, n) for n in names for s in (DRIVER, RUNTIME, DEVICE_PLUGIN, MONITORING)
    ]
    obs = observed(nodes, pods)
    pods += [validation_pod(obs, v, n) for n in names for v in (DRIVER_VALIDATION, DEVICE_PLUGIN_VALIDATION)]
    for _ in range(3):  # the labels and the reached annotation written by the first passes
        plan = reconcile(observed(nodes, pods), NS, NOW)
        nodes = [with_labels(n, plan) for n in nodes]
    return observed(nodes, pods, the_sr=replace(sr(), status=plan.status))


def same(a: Plan, b: Plan) -> bool:
    return (a.status, a.node_patches, a.create_pods, a.delete_pods, a.rows) == (
        b.status,
        b.node_patches,
        b.create_pods,
        b.delete_pods,
        b.rows,
    )


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes `walk` was called for."""
    called: list[str] = []
    real = walk_module.walk

    def counting(ctx, chain, node: NodeInfo, pods, now):  # type: ignore[no-untyped-def]
        called.append(node.name)
        return real(ctx, chain, node, pods, now)

    monkeypatch.setattr(walk_module, "walk", counting)
    return called


def test_steady_nodes_are_not_walked_again_and_the_plan_is_the_same(walks: list[str]) -> None:
    obs = steady(["a", "b", "c"])
    memo = WalkMemo()
    first = reconcile(obs, NS, NOW, memo=memo)
    assert not first.node_patches and first.status["validatedCount"] == 3
    walks.clear()
    again = reconcile(obs, NS, NOW, memo=memo)
    assert walks == []
    assert same(again, first) and same(again, reconcile(obs, NS, NOW))


def test_a_node_whose_record_changed_is_walked_again(walks: list[str]) -> None:
    obs = steady(["a", "b", "c"])
    memo = WalkMemo()
    reconcile(obs, NS, NOW, memo=memo)
    # b relabelled out of the selection: its record is a new object; a and c are kept
    moved = [
        replace(n, labels={k: v for k, v in n.labels.items() if k != "sro.dev/simulated-gpu.enabled"})
        if n.name == "b"
        else n
        for n in obs.nodes
    ]
    changed = replace(obs, nodes=tuple(moved))
    walks.clear()
    plan = reconcile(changed, NS, NOW, memo=memo)
    assert walks == []  # b is not selected any more: nothing walks it, its labels are taken back
    assert "b" in plan.node_patches and same(plan, reconcile(changed, NS, NOW))
    # back in, and a's driver pod restarted (a new record, not ready): a is walked and loses its
    # later states; b too (what left a pass is forgotten); c is kept
    pods = tuple(replace(p, ready=False) if p.name == f"{DRIVER}-a" else p for p in obs.pods)
    walks.clear()
    plan = reconcile(replace(obs, pods=pods), NS, NOW, memo=memo)
    assert walks == ["a", "b"]
    assert plan.node_patches["a"].labels and same(plan, reconcile(replace(obs, pods=pods), NS, NOW))


def test_an_equal_record_that_is_another_object_is_walked_again(walks: list[str]) -> None:
    """Identity, not equality: the cache replaces a record on every event, and an equal copy costs
    one walk, never a stale row."""
    obs = steady(["a"])
    memo = WalkMemo()
    reconcile(obs, NS, NOW, memo=memo)
    walks.clear()
    reconcile(replace(obs, nodes=tuple(replace(n) for n in obs.nodes)), NS, NOW, memo=memo)
    assert walks == ["a"]


def test_a_changed_spec_walks_every_node_again(walks: list[str]) -> None:
    obs = steady(["a", "b"])
    memo = WalkMemo()
    reconcile(obs, NS, NOW, memo=memo)
    spec = {"recipe": "simulated-gpu", "startupTaint": True}
    other = replace(obs, sr=replace(obs.sr, spec=spec))
    walks.clear()
    plan = reconcile(other, NS, NOW, memo=memo)
    assert sorted(walks) == ["a", "b"]
    assert same(plan, reconcile(other, NS, NOW))


def test_a_node_with_work_left_is_never_kept(walks: list[str]) -> None:
    """A walk that still changes something (here: a failed validation waiting out its pause) reads the
    clock: it is made again on every pass."""
    obs = steady(["a"])
    pods = tuple(
        replace(p, phase="Failed", message="no device") if p.state == DEVICE_PLUGIN_VALIDATION else p
        for p in obs.pods
    )
    failing = replace(obs, pods=pods)
    memo = WalkMemo()
    reconcile(failing, NS, NOW, memo=memo)
    walks.clear()
    reconcile(failing, NS, NOW, memo=memo)
    assert walks == ["a"]
