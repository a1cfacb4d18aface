"""kopf glue: one daemon per SpecialResource runs reconcile passes; events wake it; a finalizer cleans up.

Thin on purpose: a pass is `observe` (sro/operator/cluster) → `reconcile` (pure) → `carry_out`
(sro/operator/cluster); a deleted SpecialResource is `remains` → `teardown.plan` (pure) → the same
`carry_out`. The daemon sleeps until the plan's requeue time or until a pod of its SpecialResource
(at once when the walk acts on the change: `podwatch`), or what the reconcile reads of a node
(`nodewatch`: its selection, kernel/OS and sro labels, taints, cordon, devices), changes — so a
state that becomes ready on a node is acted on within a second, a thousand kubelets' status updates
wake nothing, and nothing polls faster than it must. Nodes and pods are watched once
for the whole operator by `sro.operator.cluster.cache`; a pass reads its records instead of listing the
cluster. One broken node never stops the others, because each step of a plan is carried out
independently. The status a pass makes is written behind it (`statuswriter`: at 1,000 nodes that
write alone held the next node change back by up to a second). A pass that raises (a bug, input nobody foresaw)
shows as Degraded (`PassFailed`, the error in one line), is logged once per distinct error and is
retried after 1 s, doubling to 60 s (`WakeLoop`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

import kopf

from sro.api.names import GROUP, PLURAL, READY, SPECIALRESOURCE_LABEL, VERSION
from sro.operator import metrics, teardown
from sro.operator.admission import Refusal, refusal_plan
from sro.operator.cluster.specialresources import SpecialResourceIO
from sro.operator.identity import identified
from sro.operator.nodewatch import NodeWatch
from sro.operator.observed import SpecialResourceInfo, sr_from_json
from sro.operator.plan import Plan
from sro.operator.podwatch import LATER, PodWatch
from sro.operator.reconcile import reconcile
from sro.operator.remediation import metrics as remediation_metrics
from sro.operator.statuswriter import StatusWriter
from sro.operator.wakeloop import WakeLoop, one_line
from sro.operator.walk import WalkMemo

log = logging.getLogger("sro.operator")
FINALIZER = f"{GROUP}/finalizer"
# seconds between the starts of two passes: twice the last pass's length, within these bounds
# (WakeLoop.gap: at most half the time in passes; a one-node pass of 0.1 s is not held back 0.5 s)
MIN_PASS_INTERVAL = 0.5
MIN_PASS_GAP = 0.1


def describe(sr: str, plan: Plan) -> list[str]:
    """What a plan changes on nodes, in words for the log."""
    lines = []
    prefix = f"{GROUP}/{sr}."
    for node, patch in sorted(plan.node_patches.items()):
        gained = [k.removeprefix(prefix) for k, v in patch.labels.items() if v == READY]
        lost = [k.removeprefix(prefix) for k, v in patch.labels.items() if v is None]
        if gained:
            lines.append(f"node {node}: ready: {', '.join(gained)}")
        if lost:
            row = next((r for r in plan.rows if r.name == node), None)
            why = f" ({row.failing}: {row.reason} {row.message})" if row and row.failing else ""
            lines.append(f"node {node}: no longer ready: {', '.join(lost)}{why}")
        for t in patch.add_taints:
            lines.append(f"node {node}: taint {t['key']}={t['value']}:{t['effect']} added")
        for key, _value in patch.remove_taints:
            lines.append(f"node {node}: taint {key} removed")
    return lines


class Operator:
    """The state kopf's handlers share: the API I/O and a wake-up event per SpecialResource."""

    def __init__(self, io: SpecialResourceIO) -> None:
        self.io = io
        self.wake: dict[str, asyncio.Event] = {}
        self.nodes = NodeWatch()
        self.pods = PodWatch()
        self._later: dict[str, asyncio.TimerHandle] = {}  # per SpecialResource: a pod event's wake-up
        self._generations: dict[str, int] = {}
        # the refusal last logged per SpecialResource (uid, reason, message): said once, not every
        # pass, even while its status cannot be written (the pass is then retried every 3 s)
        self._refusals: dict[str, tuple[str, str, str]] = {}
        # the ConfigMaps each SpecialResource's spec names (a custom recipe, custom manifests): an
        # edit of one wakes those passes at once (a fixed recipe recovers in a second, not a minute)
        self.config_maps: dict[str, frozenset[str]] = {}
        # per SpecialResource, the walks of its steady nodes kept from its last pass (WalkMemo)
        self.walks: dict[str, WalkMemo] = {}
        # the statuses, written behind the passes (a 1,000-node status no longer holds the next pass)
        self.status = StatusWriter(self._patch_status, io.get_sr, self._status_failed)
        io.cache.nodes.listeners.append(self.nodes.waking(self.poke))
        io.cache.pods.listeners.append(self.pod_event)
        io.cache.health_listeners.append(self.poke)  # a device's health report changed on a node

    def generation_changed(self, name: str, generation: int) -> bool:
        """True when the SpecialResource's spec changed since last seen (its status changes are ours)."""
        seen = self._generations.get(name)
        self._generations[name] = generation
        return seen is not None and seen != generation

    def event_for(self, name: str) -> asyncio.Event:
        return self.wake.setdefault(name, asyncio.Event())

    def poke(self, name: str | None = None) -> None:
        for sr, ev in self.wake.items():
            if name is None or sr == name:
                ev.set()

    async def run_pass(self, name: str) -> float:
        """One reconcile pass; returns seconds until the next one at the latest."""
        sr = await self.io.get_sr(name)
        if sr is None or sr.deleting:
            return 5.0
        sr = self.status.view(sr)  # the status still being written is the one the pass builds on
        metrics.RECONCILIATIONS.labels(name).inc()
        with metrics.PASS_SECONDS.labels(name).time():
            try:
                return await self._pass(name, sr)
            except Exception as e:
                await self._degrade(sr, e)
                raise  # the WakeLoop logs it once per distinct error and backs off

    async def _degrade(self, sr: SpecialResourceInfo, error: Exception) -> None:
        """Show a pass that raised as Degraded (`PassFailed`, the error in one line); best effort:
        when the status cannot be written either, the loop's log line is all there is."""
        plan = refusal_plan(sr, Refusal("PassFailed", f"the reconcile pass failed: {one_line(error)}"))
        try:
            await self.io.carry_out(sr, plan, (), self.status.write)
        except Exception as e:  # the same broken API, most likely: not worth a second traceback
            log.debug("%s: Degraded status not written: %s", sr.name, one_line(e))

    async def _pass(self, name: str, sr: SpecialResourceInfo) -> float:
        self.config_maps[name] = frozenset(
            str(sr.spec[k]) for k in ("recipeConfigMap", "customManifests") if sr.spec.get(k)
        )
        observed = await self.io.observe(sr)
        plan = reconcile(observed, self.io.namespace, memo=self.walks.setdefault(name, WalkMemo()))
        self.nodes.read_by(name, plan.label_keys)
        for line in describe(name, plan):
            log.info("%s: %s", name, line)
        if not plan.deployable:
            cond = plan.status["conditions"][-1]
            refusal = (sr.uid, cond["reason"], cond["message"])
            if (
                sr.status.get("conditions") != plan.status["conditions"]
                and self._refusals.get(name) != refusal
            ):
                log.warning("%s: not deployed: %s: %s", name, cond["reason"], cond["message"])
            self._refusals[name] = refusal
        else:
            self._refusals.pop(name, None)
        failures = await self.io.carry_out(sr, plan, observed.owned, self.status.write)
        metrics.record(name, plan.rows, [s for s, mode in plan.status["states"].items() if mode == "enabled"])
        metrics.record_upgrades(name, (plan.status.get("driverUpgrade") or {}).get("nodes") or {})
        if plan.remediation is not None:
            remediation_metrics.observe(name, plan.remediation)
        elif plan.deployable:  # spec.remediation removed: its series go
            remediation_metrics.forget(name)
        if failures:
            metrics.ERRORS.labels(name).inc()
        if self.io.refused_patches.get(name, {}) != observed.refused_patches:
            # a patch refused, or one refused went through: the status says so now
            return min(plan.requeue, 1.0)
        return 3.0 if failures else plan.requeue

    async def _patch_status(self, sr: SpecialResourceInfo, status: Mapping[str, Any]) -> bool:
        return self.io.held() and await self.io.patch_status(sr, status)

    def _status_failed(self, name: str) -> None:
        """A status write failed (the patch logged why): counted, and a pass runs again in 3 s."""
        metrics.ERRORS.labels(name).inc()
        asyncio.get_running_loop().call_later(3.0, self.poke, name)

    def config_map_changed(self, name: str) -> None:
        for sr, names in self.config_maps.items():
            if name in names:
                self.poke(sr)

    def pod_event(self, kind: str, body: Mapping[str, Any] | None) -> None:
        """A pod of a SpecialResource changed: wake that SpecialResource's pass (all after a fresh
        list) at once when the walk acts on the change, `podwatch.LATER` seconds on otherwise."""
        if body is None:  # a fresh list: every pass runs, and pods gone meanwhile are forgotten
            self.pods = PodWatch()
            self.poke()
            return
        sr = str(((body.get("metadata") or {}).get("labels") or {}).get(SPECIALRESOURCE_LABEL, ""))
        if self.pods.urgent(kind, body):
            later = self._later.pop(sr, None)
            if later is not None:
                later.cancel()  # the pass now reads what that event changed too
            self.poke(sr)
        elif sr not in self._later:  # else one wake-up is already set for it
            self._later[sr] = asyncio.get_running_loop().call_later(LATER, self._poke_later, sr)

    def _poke_later(self, sr: str) -> None:
        self._later.pop(sr, None)
        self.poke(sr)


SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def in_cluster_login() -> kopf.ConnectionInfo | None:
    """The pod's service account, with the API server's address from the environment.

    kopf's own `login_with_service_account` names `kubernetes.default.svc`, which needs cluster DNS;
    the kubelet's KUBERNETES_SERVICE_HOST/PORT work everywhere (client-go does the same).
    """
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host or not os.path.exists(f"{SERVICE_ACCOUNT}/token"):
        return None
    with open(f"{SERVICE_ACCOUNT}/token") as f:
        token = f.read().strip()
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    namespace = None
    if os.path.exists(f"{SERVICE_ACCOUNT}/namespace"):
        with open(f"{SERVICE_ACCOUNT}/namespace") as f:
            namespace = f.read().strip()
    return kopf.ConnectionInfo(
        server=server,
        ca_path=f"{SERVICE_ACCOUNT}/ca.crt",
        scheme="Bearer",
        token=token,
        default_namespace=namespace,
    )


def build_registry(op: Operator) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 270
        # kopf waits this long for more events of an object before handling them (0.1 s by default),
        # so a new SpecialResource's daemon, and its first pass, started that much later; our
        # handlers are cheap and SpecialResources few, so a short window costs nothing
        settings.batching.batch_window = 0.02
        settings.watching.client_timeout = 300

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # kopf's writes (finalizers, its annotations) name this replica too (sro.operator.identity)
        if os.environ.get("KUBECONFIG"):
            return identified(kopf.login_with_kubeconfig(**kwargs))
        return identified(in_cluster_login() or kopf.login_with_kubeconfig(**kwargs))

    @kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, cancellation_backoff=3, cancellation_timeout=10)
    async def walk_states(name: str, stopped: kopf.DaemonStopped, **_: Any) -> None:
        log.info("%s: watching", name)
        passes = WakeLoop(
            lambda: op.run_pass(name),
            what=f"{name}: reconcile pass",
            log=log,
            retry=1.0,  # doubling to 60 s while it keeps failing (WakeLoop)
            spacing=MIN_PASS_INTERVAL,
            min_spacing=MIN_PASS_GAP,
            on_failure=metrics.ERRORS.labels(name).inc,
            wake=op.event_for(name),
        )
        await passes.run(stopped)
        op.wake.pop(name, None)

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    async def remove(name: str, body: kopf.Body, **_: Any) -> None:
        log.info("%s: deleted; removing its DaemonSets, pods, node labels and taints", name)
        sr = sr_from_json(body)
        await op.status.settled(name)  # no status write of its passes is left behind the teardown
        remains = await op.io.remains(name)
        problems = await op.io.carry_out(sr, teardown.plan(sr, remains), remains.owned)
        problems += await op.io.pods_gone(name)
        problems += await op.io.rule_labels_gone(name)
        if problems:
            raise kopf.TemporaryError(f"cleanup not finished: {'; '.join(problems)}", delay=5)
        metrics.forget(name)
        remediation_metrics.forget(name)
        op.nodes.forget(name)
        op.config_maps.pop(name, None)
        op.walks.pop(name, None)
        op.status.forget(name)
        op.io.refused_patches.pop(name, None)  # a SpecialResource of this name applied again starts afresh
        log.info("%s: everything it created is gone", name)

    # The event handler is async so that kopf runs it in the event loop: asyncio.Event.set() is
    # not safe from the thread a sync handler would run in (a lost wake-up costs a whole requeue).
    # Node and pod events come from the cache's watches (sro.operator.cluster.cache), in the same loop.
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def spec_changed(name: str, meta: Mapping[str, Any], **_: Any) -> None:
        if op.generation_changed(name, int(meta.get("generation") or 0)):
            op.poke(name)

    # a ConfigMap of our namespace (kopf serves only it) that a SpecialResource names was edited
    @kopf.on.event("v1", "configmaps", registry=registry)
    async def config_map_changed(name: str, **_: Any) -> None:
        op.config_map_changed(name)

    return registry
