"""The NodeFeatureRule loop (sro/operator/nfd_handlers.py) against a fake API: patch order, absent
CRDs said once, a conflict re-planned at once, a failing node retried, problems logged once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from sro.nfd.ownership import RULES_OWNED_ANNOTATION
from sro.operator.cluster.nfdrules import CrdMissing, Snapshot
from sro.operator.nfd_handlers import DEBOUNCE, RESYNC, RETRY, NodeFeatureRuleLoop
from sro.operator.observed import node_from_json

pytestmark = pytest.mark.timeout(30)

NFD = "feature.node.kubernetes.io/"
RULE = {
    "metadata": {"name": "r"},
    "spec": {"rules": [
        {"name": "everyone", "labels": {"x": "1"}, "extendedResources": {"example.com/w": "2"}},
        {"name": "bad", "labels": {"y": "1"}, "matchFeatures": [{"feature": "a.b", "matchExpressions": {"k": {"op": "Gt", "value": ["x"]}}}]},
    ]},
}  # fmt: skip


class FakeIO:
    def __init__(self) -> None:
        self.crds = True
        self.node: dict[str, Any] = {
            "metadata": {"name": "n1", "resourceVersion": "1"},
            "status": {"capacity": {}},
        }
        self.calls: list[str] = []
        self.results: list[str] = []  # forced results of patch_node

    async def observe(self) -> Snapshot:
        if not self.crds:
            raise CrdMissing("NodeFeatureRule: not served")
        return Snapshot([node_from_json(self.node)], [], [RULE])

    async def patch_node(
        self, name: str, labels: Mapping[str, str | None], annotations: Mapping[str, str | None],
        taints: list[dict[str, Any]] | None, resource_version: str,
    ) -> str:  # fmt: skip
        self.calls.append(f"metadata {sorted(labels)} rv={resource_version}")
        if self.results:
            return self.results.pop(0)
        md = self.node["metadata"]
        md.setdefault("labels", {}).update(labels)
        md.setdefault("annotations", {}).update(annotations)
        return "ok"

    async def patch_capacity(self, name: str, capacity: Mapping[str, str | None]) -> str:
        self.calls.append(f"capacity {dict(capacity)}")
        self.node["status"]["capacity"].update(capacity)
        return "ok"


def run(loop: NodeFeatureRuleLoop) -> float:
    return asyncio.run(loop.run_pass())


def test_record_first_then_capacity_then_nothing(caplog: pytest.LogCaptureFixture) -> None:
    io = FakeIO()
    loop = NodeFeatureRuleLoop(io)  # type: ignore[arg-type]
    caplog.set_level(logging.INFO)
    assert run(loop) == RESYNC
    assert io.calls == [f"metadata ['{NFD}x'] rv=1", "capacity {'example.com/w': '2'}"]
    assert RULES_OWNED_ANNOTATION in io.node["metadata"]["annotations"]
    io.calls.clear()
    run(loop)
    assert io.calls == []  # converged: no request
    assert caplog.text.count("NodeFeatureRule r spec.rules[1].matchFeatures[0].matchExpressions.k.value") == 1


def test_absent_crds_said_once_and_no_change(caplog: pytest.LogCaptureFixture) -> None:
    io = FakeIO()
    io.crds = False
    loop = NodeFeatureRuleLoop(io)  # type: ignore[arg-type]
    caplog.set_level(logging.INFO)
    assert run(loop) == RESYNC and run(loop) == RESYNC
    assert caplog.text.count("not served") == 1 and io.calls == []
    io.crds = True
    run(loop)
    assert "are served" in caplog.text and io.calls


def test_conflict_replans_at_once_and_failure_retries() -> None:
    io = FakeIO()
    loop = NodeFeatureRuleLoop(io)  # type: ignore[arg-type]
    io.results = ["conflict"]
    assert run(loop) == DEBOUNCE and not any(c.startswith("capacity") for c in io.calls)
    io.results = ["ServerError: 500"]
    assert run(loop) == RETRY
    assert run(loop) == RESYNC


def test_node_events_wake_only_on_what_the_step_reads() -> None:
    loop = NodeFeatureRuleLoop(FakeIO())  # type: ignore[arg-type]
    node = {"metadata": {"name": "n1", "labels": {"a": "1"}}, "status": {"capacity": {"cpu": "4"}}}
    assert loop.node_changed(node, deleted=False)
    heartbeat = {**node, "status": {**node["status"], "conditions": [{"type": "Ready"}]}}
    assert not loop.node_changed(heartbeat, deleted=False)
    assert loop.node_changed({**node, "metadata": {"name": "n1", "labels": {"a": "2"}}}, deleted=False)
    assert loop.node_changed(node, deleted=True)


def test_the_step_joins_the_operators_registry() -> None:
    """command.py registers the step into the SpecialResource registry: distinct handler ids, one of
    each; Nodes and pods are not watched by kopf but by the shared cache, which wakes both."""
    import httpx

    from sro.operator.cluster.cache import ClusterCache
    from sro.operator.cluster.specialresources import SpecialResourceIO
    from sro.operator.handlers import Operator, build_registry
    from sro.operator.nfd_handlers import register

    cache = ClusterCache(httpx.AsyncClient(), "sro-system")
    op = Operator(SpecialResourceIO(object(), cache, "sro-system", "img"))  # type: ignore[arg-type]
    registry = register(build_registry(op), object(), cache)
    ids = [h.id for h in registry._changing.get_all_handlers() + registry._watching.get_all_handlers()]
    ids += [h.id for h in registry._activities.get_all_handlers()]
    assert len(ids) == len(set(ids))
    names = {i.rsplit(".", 1)[-1] for i in ids}  # ids are qualified by the defining function
    assert {"nodefeaturerule_event", "nodefeature_event", "spec_changed"} <= names
    watched = {s.plural for s in registry._watching.get_all_selectors()}
    assert "nodes" not in watched and "pods" not in watched, watched
    assert len(cache.nodes.listeners) == 2 and len(cache.pods.listeners) == 1
