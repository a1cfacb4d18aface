"""kopf glue for NodeFeatureRules: events wake one loop that runs the pure step over the whole cluster.

Thin on purpose: a pass is `observe` (sro/operator/cluster/nfdrules) → `plan`
(sro/operator/nodefeaturerules, pure) → a metadata patch, then a capacity patch, per node that changes. Any NodeFeatureRule or
NodeFeature event (in the operator's namespace; kopf watches namespaced kinds there only) and any
change of a node's labels, annotations, taints or capacity wakes the loop; a burst makes one pass
(passes start `DEBOUNCE` apart at the least, `sro.operator.wakeloop`), and a full pass runs every `RESYNC` seconds anyway, which catches NodeFeatures other
vendors write in their own namespaces. When the NFD CRDs are not installed the loop says so once and
looks again every `RESYNC` seconds, changing nothing. A bad rule is logged once (and posted as a
warning event on its NodeFeatureRule) naming the object and the field; it is skipped and every other
rule applies. A node whose patch fails (or conflicts) is retried on the next pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from sro.api.nfd_crds import NFD_GROUP, NFD_VERSION, NODE_FEATURE_RULES, NODE_FEATURES
from sro.kube.objects import AsyncObjects
from sro.operator.cluster.cache import ClusterCache
from sro.operator.cluster.nfdrules import CrdMissing, NodeFeatureRuleIO
from sro.operator.nodefeaturerules import NodeChange, parse_rule_object, plan
from sro.operator.nodewatch import NodeWatch, rules_view
from sro.operator.wakeloop import WakeLoop, run_alongside

log = logging.getLogger("sro.operator.nodefeaturerules")
DEBOUNCE = 0.5
RESYNC = 60.0
RETRY = 3.0


def describe(change: NodeChange) -> str:
    parts = [f"+{k}={v}" if v is not None else f"-{k}" for k, v in change.labels.items()]
    parts += [f"annotation {'+' if v is not None else '-'}{k}" for k, v in change.annotations.items()
              if not k.startswith("sro.dev/")]  # fmt: skip
    parts += [f"capacity {k}={v if v is not None else '(removed)'}" for k, v in change.capacity.items()]
    if change.taints is not None:
        parts.append("taints: " + (", ".join(f"{t['key']}:{t['effect']}" for t in change.taints) or "none"))
    return ", ".join(parts) or "ownership record"


class NodeFeatureRuleLoop:
    """One loop per operator; `poke` wakes it."""

    def __init__(self, io: NodeFeatureRuleIO) -> None:
        self.io = io
        self.passes = WakeLoop(
            self.run_pass, what="NodeFeatureRule pass", log=log, retry=RETRY, spacing=DEBOUNCE
        )
        self.nodes = NodeWatch(rules_view)
        self._said: set[str] = set()  # problems already logged (said once while they last)
        self._crds_missing = False

    def poke(self) -> None:
        self.passes.poke()

    def _say(self, messages: list[str]) -> None:
        for m in messages:
            if m not in self._said:
                log.warning("%s", m)
        self._said = set(messages)

    async def run_pass(self) -> float:
        """One pass; returns seconds until the next one at the latest."""
        try:
            snap = await self.io.observe()
        except CrdMissing as e:
            if not self._crds_missing:
                log.warning("NodeFeatureRules not evaluated: %s; looking again every %gs", e, RESYNC)
                self._crds_missing = True
            return RESYNC
        if self._crds_missing:
            log.info("NodeFeature and NodeFeatureRule are served: evaluating NodeFeatureRules")
            self._crds_missing = False
        changes, problems = plan(snap.nodes, snap.node_features, snap.rules)
        said = [str(p) for p in problems]
        wait = RESYNC
        for change in changes:
            said += [str(w) for w in change.warnings]
            said += [f"node {change.name}: {s} left alone (set by someone else)" for s in change.skipped]
            if not change.changed:
                continue
            result = "ok"
            if change.metadata_changed:
                result = await self.io.patch_node(
                    change.name,
                    change.labels,
                    change.annotations,
                    None if change.taints is None else [dict(t) for t in change.taints],
                    change.resource_version,
                )
            if result == "ok" and change.capacity:
                result = await self.io.patch_capacity(change.name, change.capacity)
            if result == "ok":
                log.info("node %s: %s", change.name, describe(change))
            elif result == "conflict":
                wait = min(wait, DEBOUNCE)  # the node changed under us: plan again at once
            elif result != "gone":
                log.warning("node %s: could not apply NodeFeatureRule outputs: %s", change.name, result)
                wait = min(wait, RETRY)
        self._say(said)
        return wait

    def node_changed(self, body: Mapping[str, Any], deleted: bool) -> bool:
        """Only what the step reads or writes matters: labels, annotations, taints, capacity."""
        return self.nodes.changed(body, deleted)


def register(
    registry: kopf.OperatorRegistry, objects: AsyncObjects, cache: ClusterCache
) -> kopf.OperatorRegistry:
    """Add the NodeFeatureRule step's handlers to the operator's registry (and return it); its nodes
    and their events come from the operator's cache."""
    loop = NodeFeatureRuleLoop(NodeFeatureRuleIO(objects, cache))
    cache.nodes.listeners.append(loop.nodes.waking(loop.poke))

    run_alongside(registry, loop.passes, "nodefeaturerules")

    @kopf.on.event(NFD_GROUP, NFD_VERSION, NODE_FEATURE_RULES, registry=registry)
    async def nodefeaturerule_event(body: kopf.Body, type: str | None, **_: Any) -> None:
        loop.poke()
        if type != "DELETED":
            bad = parse_rule_object(body).problems
            if bad:  # the admin sees it on the object too (kubectl describe nfr NAME); the loop logs it
                kopf.warn(body, reason="InvalidRule", message="; ".join(str(p) for p in bad)[:1000])

    @kopf.on.event(NFD_GROUP, NFD_VERSION, NODE_FEATURES, registry=registry)
    async def nodefeature_event(**_: Any) -> None:
        loop.poke()

    # The handlers are async on purpose: kopf runs sync handlers in a thread pool, and an
    # asyncio.Event set from another thread does not wake the loop waiting on it.
    return registry


def main() -> None:
    """Only this step, standalone, with $KUBECONFIG (development and the e2e test):
    `python -m sro.operator.nfd_handlers`. The operator runs it alongside the SpecialResources."""
    from sro.kube.client import async_client, async_http

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kopf").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)

    async def run() -> None:
        registry = kopf.OperatorRegistry()

        @kopf.on.login(registry=registry)
        def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
            return kopf.login_with_kubeconfig(**kwargs)

        cache = ClusterCache(async_http(), "default")  # its pods are not read; its nodes are
        watching = asyncio.create_task(cache.run())
        register(registry, AsyncObjects(async_client()), cache)
        try:
            await kopf.operator(registry=registry, standalone=True, clusterwide=True)
        finally:
            watching.cancel()

    asyncio.run(run())


if __name__ == "__main__":
    main()
