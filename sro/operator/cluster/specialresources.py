"""The operator's API I/O for SpecialResources: read what one reconcile needs, carry out a plan.

Why separate from the reconcile: this is the only operator code that reads and writes the cluster
for a SpecialResource, and it makes no decisions — it turns API objects into
`sro.operator.observed` records and performs a plan's steps (server-side apply with field manager
`sro`, pod create/delete, node merge patches guarded by resourceVersion, the status subresource).
The same `carry_out` performs a reconcile pass's plan and a teardown's (`sro.operator.teardown`).
Errors on one step are logged and retried on the next pass; they never stop the rest of the plan.
Requests go through `sro.kube` (objects by kind name, eviction, events); Nodes and our pods come
from the watch-fed cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import yaml

from sro.api.names import API_VERSION, DRIVER_REVISION_LABEL, KIND, SPECIALRESOURCE_LABEL, upgrade_state_label
from sro.api.openshift import OPENSHIFT_CRD
from sro.api.specialresource import SpecError
from sro.api.specparsing import parse_spec
from sro.api.yamltext import load_untrusted, yaml_error
from sro.kube.client import AsyncApi
from sro.kube.errors import Errors, describe_error, refusal, refused_for_good, status_code
from sro.kube.eviction import Evictor, post_event
from sro.kube.objects import ALL_NAMESPACES, AsyncObjects, Objects
from sro.operator import teardown
from sro.operator.cluster.cache import ClusterCache
from sro.operator.observed import (
    NodeInfo,
    Observed,
    PodInfo,
    QuotaInfo,
    SpecialResourceInfo,
    WorkloadPod,
    node_from_json,
    sr_from_json,
    workload_from_json,
)
from sro.operator.plan import NodeEvent, NodePatch, Plan
from sro.operator.remediation import record as remediation_record
from sro.operator.states import HARD_REASONS
from sro.operator.taints import taints_after
from sro.operator.teardown import Remains
from sro.operator.upgrade.record import READS_PODS

log = logging.getLogger(__name__)
T = TypeVar("T")

OWNED_KINDS = ("DaemonSet", "ConfigMap", "Service")
# The Prometheus operator's kinds, owned only where its CRDs exist (the monitoring state renders them then)
MONITORING_KINDS = ("ServiceMonitor", "PrometheusRule")
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
# cluster-wide or in any namespace: the partitioning objects, a custom recipe's NodeFeatureRule
ELSEWHERE_KINDS = ("PriorityClass", "ResourceQuota", "LimitRange", "NodeFeatureRule")
CLUSTER_SCOPED = frozenset({"PriorityClass", "NodeFeatureRule"})
LOG_TAIL_LINES = 20
# Pod creations and deletions and node patches of one plan run this many at a time: at 1,000 nodes
# a step reaches every node, and one request after another would make a pass last minutes.
CONCURRENCY = 16
# A plan's objects are applied in three tiers, each one's at once: namespaces, what pods read, what
# starts pods. One by one, a first pass's ~10 took 0.4 s before the node patch that starts the driver.
FIRST_KINDS = frozenset({"Namespace", "CustomResourceDefinition"})
POD_KINDS = frozenset({"DaemonSet", "Deployment", "StatefulSet", "Job", "Pod"})
CONFIG_MAP_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # DNS-1123 subdomain
NOT_LEADING = "not written: this replica no longer holds the leader lease"
# a dry run says what it would do every pass, in the same words: said once per REPEAT_SECONDS
REPEATING_REASONS = frozenset({"RemediationDryRun"})
REPEAT_SECONDS = 600.0


class SpecialResourceIO:
    """One per operator process; remembers what it applied so unchanged objects are not re-sent."""

    def __init__(self, client: AsyncApi, cache: ClusterCache, namespace: str, image: str) -> None:
        self.client = client
        self.objects = AsyncObjects(client)
        self.cache = cache
        self.namespace = namespace
        self.image = image
        self.evictor = Evictor(client)
        self._applied: dict[tuple[str, str], str] = {}
        self._said: dict[tuple[str, str, str, str, str], float] = {}  # repeating events: when said
        # whether this replica still holds the leader lease (`LeaderElection.held`), asked before
        # each batch of a plan's writes so that a replica past its renew deadline sends none
        self.held: Callable[[], bool] = lambda: True
        # SpecialResource -> node -> the API server's refusal of the last patch of that node (a 4xx
        # that no retry mends: admission, RBAC, validation); the next pass shows it as Degraded
        self.refused_patches: dict[str, dict[str, str]] = {}
        # SpecialResource -> the log tails of its failing pods by (uid, restarts, phase, reason):
        # read once per failure, not on every pass (a pass waits for its slowest read, and a failed
        # pod's log is final); an empty tail (perhaps not read) is read again
        self._tails: dict[str, dict[tuple[str, int, str, str], str]] = {}

    # ---- reading ---------------------------------------------------------------------------
    async def get_sr(self, name: str) -> SpecialResourceInfo | None:
        doc = await self.objects.get("SpecialResource", name)
        return None if doc is None else sr_from_json(doc)

    async def _log_tail(self, pod: str) -> str:
        return (await self.objects.log_tail(pod, self.namespace, LOG_TAIL_LINES))[-1024:]

    async def _config_map(self, name: str) -> dict[str, str] | None:
        """The ConfigMap's data in our namespace; None when it is not there (or none is named)."""
        if not name:
            return None
        cm = await self.objects.get("ConfigMap", name, namespace=self.namespace)
        return None if cm is None else dict(cm.get("data") or {})

    async def observe(self, sr: SpecialResourceInfo) -> Observed:
        """Nodes and our pods from the cache; the rest read at once (a pass waits for the slowest
        read, not for their sum: at 1,000 nodes a pass is what a node change waits for)."""
        try:
            spec = parse_spec(sr.name, sr.spec)
            custom_name, recipe_name = spec.custom_manifests, spec.recipe_config_map
        except SpecError:  # the reconcile says why; nothing it names is read
            custom_name = recipe_name = ""
        await self.cache.synced()
        nodes = self.cache.node_infos()
        state_key = upgrade_state_label(sr.name)
        upgrading = [n.name for n in nodes if n.labels.get(state_key) in READS_PODS]
        remediating = isinstance(sr.spec.get("remediation"), Mapping)
        if remediating:  # the nodes in a remediation's eviction step: their pods are read too
            upgrading += [
                n.name
                for n in nodes
                if n.name not in upgrading
                and (rec := remediation_record.read(n, sr.name)) is not None
                and rec.state in remediation_record.READS_PODS
            ]
        prometheus_operator, openshift = await asyncio.gather(
            self.objects.exists("CustomResourceDefinition", SERVICE_MONITOR_CRD),
            self.objects.exists("CustomResourceDefinition", OPENSHIFT_CRD),
        )
        kinds = OWNED_KINDS + (MONITORING_KINDS if prometheus_operator else ())
        run = asyncio.ensure_future
        pods = run(self._pods(sr.name))
        owned_objects = run(asyncio.gather(*(self._owned(sr.name, kind) for kind in kinds)))
        workloads = run(asyncio.gather(*(self._workloads(sr.name, node) for node in upgrading)))
        everyone = run(self.objects.list("SpecialResource"))
        custom = run(self._config_map(custom_name))
        recipe = run(self._recipe(recipe_name))
        namespaces = run(self.objects.list("Namespace"))
        quotas = run(self._quotas(sr.name))
        elsewhere = run(self._owned_elsewhere(sr.name))
        await asyncio.gather(
            pods, owned_objects, workloads, everyone, custom, recipe, namespaces, quotas, elsewhere
        )
        owned = [(kind, md) for found in owned_objects.result() for kind, md in found]
        others = [sr_from_json(doc) for doc in everyone.result()]
        others = [o for o in others if o.name != sr.name and not o.deleting]
        # the others' custom recipes: which extended resource each holds (a conflict is by resource)
        # (only names a ConfigMap can have: another's spec is not parsed here, and a name is a URL path)
        named = {str(o.spec.get("recipeConfigMap") or "") for o in others}
        other_maps = sorted(n for n in named if CONFIG_MAP_NAME.fullmatch(n))
        other_recipes = await asyncio.gather(*(self._recipe(name) for name in other_maps))
        return Observed(
            namespaces=tuple(str(n["metadata"]["name"]) for n in namespaces.result()),
            quotas=tuple(quotas.result()),
            owned_elsewhere=tuple(elsewhere.result()),
            prometheus_operator=prometheus_operator,
            openshift=openshift,
            sr=sr,
            nodes=nodes,
            pods=tuple(pods.result()),
            others=tuple(others),
            other_recipes=dict(zip(other_maps, other_recipes, strict=True)),
            owned=tuple((kind, md["name"]) for kind, md in owned),
            custom_manifests=custom.result(),
            custom_recipe=recipe.result(),
            image=self.image,
            revisions={
                (kind, md["name"]): md["labels"][DRIVER_REVISION_LABEL]
                for kind, md in owned
                if (md.get("labels") or {}).get(DRIVER_REVISION_LABEL)
            },
            workloads=tuple(w for found in workloads.result() for w in found),
            workload_nodes=tuple(upgrading),
            health=self.cache.health if remediating else {},
            refused_patches=dict(self.refused_patches.get(sr.name, {})),
        )

    async def remains(self, sr: str) -> Remains:
        """What a deleted SpecialResource left: its objects here (pods included), its partitioning
        objects elsewhere, and every node (from the cache)."""
        kinds: tuple[str, ...] = (*OWNED_KINDS, "Pod")
        if await self.objects.exists("CustomResourceDefinition", SERVICE_MONITOR_CRD):
            kinds += MONITORING_KINDS
        owned = [(kind, md["name"]) for listed in kinds for kind, md in await self._owned(sr, listed)]
        elsewhere = await self._owned_elsewhere(sr)
        await self.cache.synced()
        return Remains(tuple(owned), tuple(elsewhere), self.cache.node_infos())

    async def _pods(self, sr: str) -> list[PodInfo]:
        """Our pods from the cache, with the log tail of those failing (read once per failure: a
        crash-looping pod's again when it restarts, a Failed pod's once)."""
        pods = self.cache.pods_of(sr)
        failing = {
            (p.uid, p.restarts, p.phase, p.reason): p
            for p in pods
            if p.phase == "Failed" or p.reason in HARD_REASONS or p.restarts >= 3
        }
        known = self._tails.get(sr, {})
        unread = [key for key in failing if not known.get(key)]
        tails = await _bounded([self._log_tail(failing[key].name) for key in unread])
        known = {key: known.get(key, "") for key in failing} | dict(zip(unread, tails, strict=True))
        self._tails[sr] = known  # only the failures there are now
        logs = {p.name: known[key] for key, p in failing.items()}
        return [replace(p, log=logs[p.name]) if p.name in logs else p for p in pods]

    async def _owned(self, sr: str, kind: str) -> list[tuple[str, dict[str, Any]]]:
        found = await self.objects.list(kind, namespace=self.namespace, labels={SPECIALRESOURCE_LABEL: sr})
        return [(kind, doc["metadata"]) for doc in found]

    async def _workloads(self, sr: str, node: str) -> list[WorkloadPod]:
        """The pods on a node in an upgrade's eviction steps: what to wait for and what to evict."""
        pods = await self.objects.list("Pod", namespace=ALL_NAMESPACES, fields={"spec.nodeName": node})
        return [
            workload_from_json(doc)
            for doc in pods
            if (doc["metadata"].get("labels") or {}).get(SPECIALRESOURCE_LABEL) != sr
        ]

    async def _recipe(self, name: str) -> dict[str, Any] | None:
        """recipe.yaml of spec.recipeConfigMap, parsed (a problem with it becomes a one-key mapping
        that the recipe check refuses, naming it)."""
        data = await self._config_map(name)
        if data is None:
            return None
        try:
            loaded = load_untrusted(data.get("recipe.yaml", "")) or {}
        except yaml.YAMLError as e:
            return {"recipe.yaml": f"invalid YAML: {yaml_error(e)}"}
        except Exception as e:  # written by others: any failure is garbage
            return {"recipe.yaml": f"unreadable: {type(e).__name__}"}
        return loaded if isinstance(loaded, dict) else {"recipe.yaml": "not a mapping"}

    async def _quotas(self, sr: str) -> list[QuotaInfo]:
        quotas = []
        for doc in await self.objects.list(
            "ResourceQuota", namespace=ALL_NAMESPACES, labels={SPECIALRESOURCE_LABEL: sr}
        ):
            st = doc.get("status") or {}
            md = doc["metadata"]
            quotas.append(QuotaInfo(md["namespace"], md["name"], st.get("hard") or {}, st.get("used") or {}))
        return quotas

    async def _owned_elsewhere(self, sr: str) -> list[tuple[str, str, str]]:
        """Our objects elsewhere: PriorityClasses and a custom recipe's NodeFeatureRule (cluster-wide),
        quotas and limits (any namespace)."""
        out: list[tuple[str, str, str]] = []
        for kind in ELSEWHERE_KINDS:
            namespace = None if kind in CLUSTER_SCOPED else ALL_NAMESPACES
            for doc in await self.objects.list(kind, namespace=namespace, labels={SPECIALRESOURCE_LABEL: sr}):
                md = doc["metadata"]
                out.append((kind, md.get("namespace") or "", md["name"]))
        return sorted(out)

    # ---- carrying out a plan -------------------------------------------------------------------
    async def carry_out(
        self,
        sr: SpecialResourceInfo,
        plan: Plan,
        owned: Iterable[tuple[str, str]],
        write_status: Callable[[SpecialResourceInfo, Mapping[str, Any]], None] | None = None,
    ) -> list[str]:
        """Perform the plan; returns the steps that failed (logged, retried on the next pass). The
        status is written last, here, or handed to `write_status` (sro.operator.statuswriter)."""
        problems: list[str] = []
        if not self.held():
            return [NOT_LEADING]
        present = set(owned)
        for tier in range(3):
            objs = [
                o for o in plan.apply if (o["kind"] not in FIRST_KINDS) + (o["kind"] in POD_KINDS) == tier
            ]
            oks = await _bounded([self._apply(sr.name, o, present) for o in objs])
            problems += [f"{o['kind']}/{o['metadata']['name']} not applied" for o, ok in zip(objs, oks, strict=True) if not ok]  # fmt: skip
        for kind, name in plan.delete:
            if not await self._delete(kind, name):
                problems.append(f"{kind}/{name} not deleted")
            self._applied.pop((kind, name), None)
            log.info("%s: deleted stale %s/%s", sr.name, kind, name)
        for kind, ns, name in plan.delete_elsewhere:
            if not await self._delete(kind, name, ns or None):
                problems.append(f"{kind} {ns}/{name} not deleted")
            log.info("%s: deleted %s %s/%s", sr.name, kind, ns, name)
        # pods deleted, then pods created, then nodes patched: each batch CONCURRENCY at a time
        node_patches: list[tuple[str, Callable[[], Coroutine[Any, Any, bool]]]] = [
            (f"node {n}: labels and taints not changed", partial(self.patch_node, sr.name, n, patch))
            for n, patch in plan.node_patches.items()
        ]
        batches: list[list[tuple[str, Callable[[], Coroutine[Any, Any, bool]]]]] = [
            [(f"pod {n} not deleted", partial(self._delete, "Pod", n)) for n in plan.delete_pods],
            [(f"pod {p['metadata']['name']} not created", partial(self._create_pod, sr.name, p))
             for p in plan.create_pods],
            node_patches,
            [(f"node {n}: condition {c.get('type')} not set", partial(self.set_condition, sr.name, n, c))
             for n, c in plan.node_conditions.items()],
        ]  # fmt: skip
        unpatched: list[str] = []  # nodes whose patch did not go through
        for batch in batches:
            if not self.held():
                return [*problems, NOT_LEADING]
            oks = await _bounded([step() for _, step in batch])
            problems += [what for (what, _), ok in zip(batch, oks, strict=True) if not ok]
            if batch is node_patches:
                unpatched = [n for n, ok in zip(plan.node_patches, oks, strict=True) if not ok]
        if not self.held():
            return [*problems, NOT_LEADING]
        for namespace, pod_name in plan.evict:
            result = await self.evictor.evict(namespace, pod_name)
            if result.done:
                log.info("%s: evicting %s/%s", sr.name, namespace, pod_name)
            else:
                log.info("%s: %s (retried on the next pass)", sr.name, result.message)
        for ev in plan.events:
            if not self._new_event(sr.name, ev):
                continue
            log.info("%s: node %s: %s: %s", sr.name, ev.node, ev.reason, ev.message)
            await post_event(self.client, "Node", "v1", ev.node, ev.uid, ev.type, ev.reason, ev.message)
            await post_event(
                self.client,
                KIND,
                API_VERSION,
                sr.name,
                sr.uid,
                ev.type,
                ev.reason,
                f"node {ev.node}: {ev.message}",
            )
        waits = plan.status_waits_for(unpatched)
        if waits:  # written by the next pass, once those nodes show what it says
            problems.append(
                f"status not updated: the patch of node(s) {', '.join(waits[:3])} did not go through"
            )
        elif write_status is not None:
            write_status(sr, plan.status)
        elif dict(plan.status) != dict(sr.status) and not await self.patch_status(sr, plan.status):
            problems.append("status not updated")
        return problems

    def _new_event(self, sr: str, ev: NodeEvent) -> bool:
        """False for an event said in the same words within REPEAT_SECONDS: a dry run's (or a
        waiting node's) event comes every pass, and one a minute says it well enough."""
        if ev.reason not in REPEATING_REASONS:
            return True
        key = (sr, ev.node, ev.type, ev.reason, ev.message)
        now = time.monotonic()
        said = self._said.get(key)
        if said is not None and now - said < REPEAT_SECONDS:
            return False
        self._said = {k: t for k, t in self._said.items() if now - t < REPEAT_SECONDS}
        self._said[key] = now
        return True

    async def set_condition(self, sr: str, name: str, condition: Mapping[str, Any]) -> bool:
        """A Node condition (GpuHealthy), merged by type into its status (`$patch: delete`: removed)."""
        try:
            await self.cache.patch_node_condition(name, condition)  # False: gone; the next pass forgets it
            said = (
                f"{condition.get('status')} ({condition.get('reason')})"
                if "status" in condition
                else "removed"
            )
            log.info("%s: node %s: condition %s %s", sr, name, condition.get("type"), said)
            return True
        except Errors as e:
            log.warning("%s: could not set condition on node %s: %s", sr, name, describe_error(e) or e)
            return False

    async def _apply(self, sr: str, obj: Mapping[str, Any], present: set[tuple[str, str]]) -> bool:
        """Server-side apply of one object, skipped when this replica applied the same already."""
        key = (obj["kind"], obj["metadata"]["name"])
        digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
        if self._applied.get(key) == digest and key in present:
            return True
        try:
            await self.objects.apply(obj)
        except Errors as e:
            log.warning("%s: could not apply %s/%s: %s", sr, *key, e)
            return False
        self._applied[key] = digest
        log.info("%s: applied %s/%s", sr, *key)
        return True

    async def _create_pod(self, sr: str, pod: Mapping[str, Any]) -> bool:
        try:
            await self.objects.create(pod)
            log.info("%s: created validation pod %s", sr, pod["metadata"]["name"])
        except Errors as e:
            if status_code(e) != 409:
                log.warning("%s: could not create pod %s: %s", sr, pod["metadata"]["name"], e)
                return False
        return True

    async def _delete(self, kind: str, name: str, namespace: str | None = "") -> bool:
        try:
            await self.objects.delete(kind, name, namespace=self.namespace if namespace == "" else namespace)
        except Errors as e:
            if status_code(e) != 404:
                log.warning("could not delete %s %s: %s", kind, name, e)
                return False
        return True

    async def patch_node(self, sr: str, name: str, patch: NodePatch) -> bool:
        metadata: dict[str, Any] = {}
        if patch.labels:
            metadata["labels"] = dict(patch.labels)
        if patch.annotations:
            metadata["annotations"] = dict(patch.annotations)
        body: dict[str, Any] = {"metadata": metadata}
        if patch.unschedulable is not None:
            body["spec"] = {"unschedulable": patch.unschedulable}
        try:
            if patch.changes_taints:
                # taints are a list: read, change ours, write back guarded by resourceVersion
                node = await self.cache.get_node(name)
                if node is None:
                    return True  # the node left; the next pass forgets it
                taints = taints_after((node.get("spec") or {}).get("taints") or [], patch)
                body["spec"] = {**body.get("spec", {}), "taints": taints}
                metadata["resourceVersion"] = node["metadata"]["resourceVersion"]
            await self.cache.patch_node(name, body)  # False: the node left; the next pass forgets it
            self.refused_patches.get(sr, {}).pop(name, None)
            return True
        except Errors as e:
            log.warning("%s: could not patch node %s: %s", sr, name, describe_error(e) or e)
            if refused_for_good(e):
                self.refused_patches.setdefault(sr, {})[name] = refusal(e)[:240]
            return False

    async def patch_status(self, sr: SpecialResourceInfo, status: Mapping[str, Any]) -> bool:
        try:
            await self.objects.merge_patch(
                "SpecialResource", sr.name, {"status": merge_patch(sr.status, status)}, status=True
            )
            return True
        except Errors as e:
            log.warning("%s: could not update the status: %s", sr.name, e)
            return False

    async def rule_labels_gone(self, sr: str, timeout: float = 30.0) -> list[str]:
        """Wait until no node carries a label the NodeFeatureRule step applied for `sr`
        (`teardown.rule_labels_left`); the problem when some still do after `timeout` seconds."""
        left = await _while_left(lambda: teardown.rule_labels_left(sr, self.cache.node_infos()), timeout, 0.5)
        return [f"NodeFeatureRule labels still on {'; '.join(left[:3])}"] if left else []

    async def pods_gone(self, sr: str, timeout: float = 60.0) -> list[str]:
        """Wait until the SpecialResource's pods are gone (the driver unloads and the runtime files go
        as the pods stop); the problem when some are still there after `timeout` seconds."""
        left = await _while_left(lambda: sorted(p.name for p in self.cache.pods_of(sr)), timeout, 1.0)
        return [f"pods still terminating: {', '.join(left)}"] if left else []


async def _while_left(left: Callable[[], list[str]], timeout: float, interval: float) -> list[str]:
    """Ask `left()` every `interval` seconds until it is empty or `timeout` has passed; what is left."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (now := left()) and loop.time() <= deadline:
        await asyncio.sleep(interval)
    return now


async def _bounded(steps: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run the steps CONCURRENCY at a time; their results in the steps' order."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(step: Coroutine[Any, Any, T]) -> T:
        async with gate:
            return await step

    return list(await asyncio.gather(*(one(s) for s in steps)))


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning `old` into `new`: keys that went away are nulled, at every depth
    (lists are replaced whole, as merge patches do)."""
    out: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            out[key] = merge_patch(before, value)
        else:
            out[key] = value
    out.update({k: None for k in old if k not in new})
    return out


def read_for_status(
    objects: Objects, name: str | None = None
) -> tuple[list[SpecialResourceInfo], list[NodeInfo]]:
    """The SpecialResources (one, or all) and every Node, for `sro status` and `sro upgrade`."""
    docs = [objects.get("SpecialResource", name)] if name else objects.list("SpecialResource")
    return [sr_from_json(doc) for doc in docs], [node_from_json(doc) for doc in objects.list("Node")]
