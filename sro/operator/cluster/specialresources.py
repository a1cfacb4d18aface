"""The operator's API I/O: read what one SpecialResource's reconcile needs, carry out its plan, and
remove everything on deletion.

Why separate from the reconcile: this is the only operator code that talks to the API server, and
it makes no decisions — it turns API objects into `sro.operator.observed` records and performs the
plan's steps (server-side apply with field manager `sro`, pod create/delete, node merge patches
guarded by resourceVersion, the status subresource). Errors on one node's patch are logged and
retried on the next pass; they never stop the rest of the plan.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import httpx
import yaml
from lightkube import ALL_NS, ApiError, AsyncClient, codecs
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, LimitRange, Namespace, Node, Pod, ResourceQuota, Service
from lightkube.resources.scheduling_v1 import PriorityClass
from lightkube.types import PatchType

from sro.api.names import (
    API_VERSION,
    DRIVER_REVISION_LABEL,
    FIELD_MANAGER,
    GROUP,
    KIND,
    PLURAL,
    SPECIALRESOURCE_LABEL,
    VERSION,
    upgrade_state_label,
)
from sro.api.openshift import OPENSHIFT_CRD
from sro.kube.client import describe_error
from sro.kube.eviction import Evictor, post_event
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
from sro.operator.reconcile import NodePatch, Plan, release, taints_after
from sro.operator.states import HARD_REASONS
from sro.operator.upgrade import READS_PODS

log = logging.getLogger(__name__)
T = TypeVar("T")

SpecialResource = create_global_resource(GROUP, VERSION, KIND, PLURAL)
OWNED_KINDS: Mapping[str, Any] = {"DaemonSet": DaemonSet, "ConfigMap": ConfigMap, "Service": Service}
# The Prometheus operator's kinds, owned only where its CRDs exist (the monitoring state renders them then)
MONITORING_KINDS: Mapping[str, Any] = {
    "ServiceMonitor": create_namespaced_resource(
        "monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors"
    ),
    "PrometheusRule": create_namespaced_resource(
        "monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules"
    ),
}
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
ELSEWHERE_KINDS: Mapping[str, Any] = {
    "PriorityClass": PriorityClass,
    "ResourceQuota": ResourceQuota,
    "LimitRange": LimitRange,
}
LOG_TAIL_LINES = 20
# Pod creations and deletions and node patches of one plan run this many at a time: at 1,000 nodes
# a step reaches every node, and one request after another would make a pass last minutes.
CONCURRENCY = 16
Errors = (ApiError, httpx.HTTPError, OSError)


def _code(e: Exception) -> int:
    return int(getattr(getattr(e, "status", None), "code", 0) or 0)


def _dict(obj: Any) -> dict[str, Any]:
    return dict(obj.to_dict() if hasattr(obj, "to_dict") else obj)


class SpecialResourceIO:
    """One per operator process; remembers what it applied so unchanged objects are not re-sent."""

    def __init__(self, client: AsyncClient, cache: ClusterCache, namespace: str, image: str) -> None:
        self.client = client
        self.cache = cache
        self.namespace = namespace
        self.image = image
        self.evictor = Evictor(client)
        self._applied: dict[tuple[str, str], str] = {}

    # ---- reading ---------------------------------------------------------------------------
    async def get_sr(self, name: str) -> SpecialResourceInfo | None:
        try:
            return sr_from_json(_dict(await self.client.get(SpecialResource, name)))
        except ApiError as e:
            if _code(e) == 404:
                return None
            raise

    async def _log_tail(self, pod: str) -> str:
        lines: list[str] = []
        try:
            async for line in self.client.log(pod, namespace=self.namespace, tail_lines=LOG_TAIL_LINES):
                lines.append(line)
        except Errors:
            return ""
        return "".join(lines)[-1024:]

    async def _exists(self, res: Any, name: str) -> bool:
        try:
            await self.client.get(res, name)
        except ApiError as e:
            if _code(e) == 404:
                return False
            raise
        return True

    async def _config_map(self, name: str) -> dict[str, str] | None:
        """The ConfigMap's data in our namespace; None when it is not there (or none is named)."""
        if not name:
            return None
        try:
            cm = await self.client.get(ConfigMap, name, namespace=self.namespace)
        except ApiError as e:
            if _code(e) == 404:
                return None
            raise
        return dict(cm.data or {})

    async def observe(self, sr: SpecialResourceInfo) -> Observed:
        """Nodes and our pods from the cache; the rest read at once (a pass waits for the slowest
        read, not for their sum: at 1,000 nodes a pass is what a node change waits for)."""
        await self.cache.synced()
        nodes = self.cache.node_infos()
        state_key = upgrade_state_label(sr.name)
        upgrading = [n.name for n in nodes if n.labels.get(state_key) in READS_PODS]
        prometheus_operator, openshift = await asyncio.gather(
            self._exists(CustomResourceDefinition, SERVICE_MONITOR_CRD),
            self._exists(CustomResourceDefinition, OPENSHIFT_CRD),
        )
        kinds = {**OWNED_KINDS, **(MONITORING_KINDS if prometheus_operator else {})}
        run = asyncio.ensure_future
        pods = run(self._pods(sr.name))
        owned_objects = run(asyncio.gather(*(self._owned(sr.name, kind, res) for kind, res in kinds.items())))
        workloads = run(asyncio.gather(*(self._workloads(sr.name, node) for node in upgrading)))
        everyone = run(self._special_resources())
        custom = run(self._config_map(str(sr.spec.get("customManifests") or "")))
        recipe = run(self._recipe(str(sr.spec.get("recipeConfigMap") or "")))
        namespaces = run(self._namespaces())
        quotas = run(self._quotas(sr.name))
        elsewhere = run(self._owned_elsewhere(sr.name))
        await asyncio.gather(
            pods, owned_objects, workloads, everyone, custom, recipe, namespaces, quotas, elsewhere
        )
        owned = [(kind, md) for found in owned_objects.result() for kind, md in found]
        return Observed(
            namespaces=tuple(namespaces.result()),
            quotas=tuple(quotas.result()),
            owned_elsewhere=tuple(elsewhere.result()),
            prometheus_operator=prometheus_operator,
            openshift=openshift,
            sr=sr,
            nodes=nodes,
            pods=tuple(pods.result()),
            others=tuple(o for o in everyone.result() if o.name != sr.name and not o.deleting),
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
        )

    async def _pods(self, sr: str) -> list[PodInfo]:
        """Our pods from the cache, with the log tail of those failing."""
        pods = self.cache.pods_of(sr)
        failing = [p for p in pods if p.phase == "Failed" or p.reason in HARD_REASONS or p.restarts >= 3]
        tails = await _bounded([self._log_tail(p.name) for p in failing])
        logs = {p.name: tail for p, tail in zip(failing, tails, strict=True)}
        return [replace(p, log=logs[p.name]) if p.name in logs else p for p in pods]

    async def _owned(self, sr: str, kind: str, res: Any) -> list[tuple[str, dict[str, Any]]]:
        labels: dict[str, Any] = {SPECIALRESOURCE_LABEL: sr}
        return [
            (kind, _dict(o)["metadata"])
            async for o in self.client.list(res, namespace=self.namespace, labels=labels)
        ]

    async def _workloads(self, sr: str, node: str) -> list[WorkloadPod]:
        """The pods on a node in an upgrade's eviction steps: what to wait for and what to evict."""
        found = []
        async for p in self.client.list(Pod, namespace=ALL_NS, fields={"spec.nodeName": node}):
            doc = _dict(p)
            if (doc["metadata"].get("labels") or {}).get(SPECIALRESOURCE_LABEL) != sr:
                found.append(workload_from_json(doc))
        return found

    async def _special_resources(self) -> list[SpecialResourceInfo]:
        return [sr_from_json(_dict(o)) async for o in self.client.list(SpecialResource)]

    async def _recipe(self, name: str) -> dict[str, Any] | None:
        """recipe.yaml of spec.recipeConfigMap, parsed (a problem with it becomes a one-key mapping
        that the recipe check refuses, naming it)."""
        data = await self._config_map(name)
        if data is None:
            return None
        try:
            loaded = yaml.safe_load(data.get("recipe.yaml", "")) or {}
        except yaml.YAMLError as e:
            return {"recipe.yaml": f"invalid YAML: {e}"}
        return loaded if isinstance(loaded, dict) else {"recipe.yaml": "not a mapping"}

    async def _namespaces(self) -> list[str]:
        return [str(_dict(n)["metadata"]["name"]) async for n in self.client.list(Namespace)]

    async def _quotas(self, sr: str) -> list[QuotaInfo]:
        quotas = []
        async for q in self.client.list(ResourceQuota, namespace=ALL_NS, labels={SPECIALRESOURCE_LABEL: sr}):
            doc = _dict(q)
            st = doc.get("status") or {}
            md = doc["metadata"]
            quotas.append(QuotaInfo(md["namespace"], md["name"], st.get("hard") or {}, st.get("used") or {}))
        return quotas

    async def _owned_elsewhere(self, sr: str) -> list[tuple[str, str, str]]:
        """Our partitioning objects: PriorityClasses (cluster-wide), quotas and limits (any namespace)."""
        selector: dict[str, Any] = {SPECIALRESOURCE_LABEL: sr}
        out: list[tuple[str, str, str]] = []
        for kind, res in ELSEWHERE_KINDS.items():
            namespace = None if kind == "PriorityClass" else ALL_NS
            async for o in self.client.list(res, namespace=namespace, labels=selector):
                md = _dict(o)["metadata"]
                out.append((kind, md.get("namespace") or "", md["name"]))
        return sorted(out)

    # ---- carrying out a plan -------------------------------------------------------------------
    async def carry_out(self, sr: SpecialResourceInfo, plan: Plan, owned: Iterable[tuple[str, str]]) -> int:
        """Perform the plan; returns how many steps failed (logged, retried on the next pass)."""
        failures = 0
        present = set(owned)
        for obj in plan.apply:
            key = (obj["kind"], obj["metadata"]["name"])
            digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
            if self._applied.get(key) == digest and key in present:
                continue
            try:
                await self.client.apply(codecs.from_dict(obj), field_manager=FIELD_MANAGER, force=True)
                self._applied[key] = digest
                log.info("%s: applied %s/%s", sr.name, *key)
            except Errors as e:
                failures += 1
                log.warning("%s: could not apply %s/%s: %s", sr.name, *key, e)
        for kind, name in plan.delete:
            failures += not await self._delete({**OWNED_KINDS, **MONITORING_KINDS}[kind], name)
            self._applied.pop((kind, name), None)
            log.info("%s: deleted stale %s/%s", sr.name, kind, name)
        for kind, ns, name in plan.delete_elsewhere:
            failures += not await self._delete(ELSEWHERE_KINDS[kind], name, ns or None)
            log.info("%s: deleted %s %s/%s", sr.name, kind, ns, name)
        oks = await _bounded([self._delete(Pod, name) for name in plan.delete_pods])
        oks += await _bounded([self._create_pod(sr.name, pod) for pod in plan.create_pods])
        oks += await _bounded([self.patch_node(sr.name, n, patch) for n, patch in plan.node_patches.items()])
        failures += sum(1 for ok in oks if not ok)
        for namespace, pod_name in plan.evict:
            result = await self.evictor.evict(namespace, pod_name)
            if result.done:
                log.info("%s: evicting %s/%s", sr.name, namespace, pod_name)
            else:
                log.info("%s: %s (retried on the next pass)", sr.name, result.message)
        for ev in plan.events:
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
        if dict(plan.status) != dict(sr.status):
            failures += not await self.patch_status(sr, plan.status)
        return failures

    async def _create_pod(self, sr: str, pod: Mapping[str, Any]) -> bool:
        try:
            await self.client.create(codecs.from_dict(dict(pod)))
            log.info("%s: created validation pod %s", sr, pod["metadata"]["name"])
        except Errors as e:
            if _code(e) != 409:
                log.warning("%s: could not create pod %s: %s", sr, pod["metadata"]["name"], e)
                return False
        return True

    async def _delete(self, res: Any, name: str, namespace: str | None = "") -> bool:
        try:
            await self.client.delete(res, name, namespace=self.namespace if namespace == "" else namespace)
        except Errors as e:
            if _code(e) != 404:
                log.warning("could not delete %s %s: %s", res.__name__, name, e)
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
            return True
        except Errors as e:
            log.warning("%s: could not patch node %s: %s", sr, name, describe_error(e) or e)
            return False

    async def patch_status(self, sr: SpecialResourceInfo, status: Mapping[str, Any]) -> bool:
        body = merge_patch(sr.status, status)
        try:
            await self.client.patch(
                SpecialResource.Status, sr.name, {"status": body}, patch_type=PatchType.MERGE
            )
            return True
        except Errors as e:
            log.warning("%s: could not update the status: %s", sr.name, e)
            return False

    # ---- removal ----------------------------------------------------------------------------
    async def remove_all(self, sr: str, resource: str | None, timeout: float = 60.0) -> list[str]:
        """Delete what `sr` created and take its node labels, annotations and taints back; wait
        until its pods are gone (the driver unloads and the runtime files go as the pods stop).
        Returns what could not be removed (empty when all is gone)."""
        selector: dict[str, Any] = {SPECIALRESOURCE_LABEL: sr}
        kinds = [*OWNED_KINDS.values(), Pod]
        if await self._exists(CustomResourceDefinition, SERVICE_MONITOR_CRD):
            kinds += MONITORING_KINDS.values()
        for res in kinds:
            async for o in self.client.list(res, namespace=self.namespace, labels=selector):
                await self._delete(res, _dict(o)["metadata"]["name"])
        for kind, ns, name in await self._owned_elsewhere(sr):
            await self._delete(ELSEWHERE_KINDS[kind], name, ns or None)
        self._applied.clear()  # other SpecialResources re-send theirs once: cheap, and never stale
        problems: list[str] = []
        await self.cache.synced()
        patches = {n.name: release(sr, resource, n) for n in self.cache.node_infos()}
        todo = {name: patch for name, patch in patches.items() if patch is not None}
        oks = await _bounded([self.patch_node(sr, name, patch) for name, patch in todo.items()])
        problems += [
            f"node {name}: labels and taints not removed"
            for name, ok in zip(todo, oks, strict=True)
            if not ok
        ]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            left = sorted(p.name for p in self.cache.pods_of(sr))
            if not left:
                break
            if loop.time() > deadline:
                problems.append(f"pods still terminating: {', '.join(left)}")
                break
            await asyncio.sleep(1)
        return problems


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


def read_for_status(client: Any, name: str | None = None) -> tuple[list[SpecialResourceInfo], list[NodeInfo]]:
    """The SpecialResources (one, or all) and every Node, for `sro status` (a sync lightkube Client)."""
    if name:
        srs = [sr_from_json(_dict(client.get(SpecialResource, name)))]
    else:
        srs = [sr_from_json(_dict(o)) for o in client.list(SpecialResource)]
    nodes = [node_from_json(_dict(n)) for n in client.list(Node)]
    return srs, nodes
