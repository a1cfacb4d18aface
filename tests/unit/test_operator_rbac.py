"""The operator's roles hold exactly the (verb, resource) pairs its code sends, both ways.

How the code's calls are found: the operator's own I/O (`SpecialResourceIO`: a pass's reads, the
teardown's reads, carrying out a plan with every kind of step; the NodeFeatureRule step's reads and
patches; the watch-fed cache; the leader Lease) runs against a recording fake API server
(httpx.MockTransport under the real lightkube client, as in production), and every request is
named the way the API server's RBAC names it. kopf's own calls go through aiohttp, not httpx, so
they are listed in `KOPF` from kopf's source, each with where it is sent. The kinds a plan applies
and deletes are the ones the I/O lists to find what it owns (`OWNED_KINDS`, `MONITORING_KINDS`,
`ELSEWHERE_KINDS`); a second test checks that the templates render no other kind.

A verb in a role that nothing sends fails, and so does a request no role allows. The OpenShift
role (`sro.install.scc.operator_rules`, narrowed by resourceNames) is its own, tested with the SCCs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User

from sro.api.names import NAMESPACE, SPECIALRESOURCE_LABEL
from sro.install.objects import INSTALL_KINDS, objects
from sro.kube.client import request_kind
from sro.kube.leases import KubeLease, LeaderElection
from sro.kube.objects import AsyncObjects
from sro.manifests import components, render
from sro.operator.cluster.cache import ClusterCache
from sro.operator.cluster.nfdrules import NodeFeatureRuleIO
from sro.operator.cluster.specialresources import (
    CLUSTER_SCOPED,
    ELSEWHERE_KINDS,
    MONITORING_KINDS,
    OWNED_KINDS,
    SpecialResourceIO,
)
from sro.operator.observed import sr_from_json
from sro.operator.plan import NodeEvent, NodePatch, Plan

pytestmark = pytest.mark.timeout(60)

NS = NAMESPACE
VERBS = {"GET": "get", "LIST": "list", "WATCH": "watch", "POST": "create", "PATCH": "patch",
         "PUT": "update", "DELETE": "delete"}  # fmt: skip
CLUSTER = "*"  # a request not confined to the operator's namespace: only a ClusterRole allows it

# kopf's own requests (aiohttp), as the operator runs it: `kopf.operator(standalone=True,
# namespaces=[NAMESPACE])` (sro/operator/commands.py), handlers on SpecialResources (cluster-scoped),
# NodeFeatures and NodeFeatureRules (sro/operator/handlers.py, nfd_handlers.py). In kopf's source:
KOPF: frozenset[tuple[str, str, str]] = frozenset({
    # _core/reactor/queueing.py watcher -> _cogs/clients/watching.py: list, then watch, every resource
    # it serves; cluster-scoped SpecialResources and NodeFeatureRules cluster-wide, NodeFeatures in
    # the namespaces it serves (ours)
    ("list", "specialresources", CLUSTER), ("watch", "specialresources", CLUSTER),
    ("list", "nodefeaturerules", CLUSTER), ("watch", "nodefeaturerules", CLUSTER),
    ("list", "nodefeatures", NS), ("watch", "nodefeatures", NS),
    # the ConfigMaps of our namespace (sro/operator/handlers.py: a custom recipe edited wakes its passes)
    ("list", "configmaps", NS), ("watch", "configmaps", NS),
    # _core/reactor/observation.py resource_observer: watches CRDs for resources that come and go
    ("list", "customresourcedefinitions", CLUSTER), ("watch", "customresourcedefinitions", CLUSTER),
    # _core/reactor/observation.py namespace_observer: not clusterwide, so it lists and watches
    # namespaces to match its namespace patterns
    ("list", "namespaces", CLUSTER), ("watch", "namespaces", CLUSTER),
    # _cogs/clients/patching.py patch_obj: the finalizer and its progress annotations (merge patch
    # of the object), its progress in the status (merge patch of /status, a subresource here)
    ("patch", "specialresources", CLUSTER), ("patch", "specialresources/status", CLUSTER),
    # _cogs/clients/events.py post_event: a cluster-scoped object's events go to the context's
    # default namespace (in a pod: its own, ours), POSTed as core/v1 Events
    ("create", "events", NS),
})  # fmt: skip


def _scope(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        return NS if parts[1] == NS else CLUSTER
    return CLUSTER


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "5", "labels": {}},
        "spec": {"taints": [{"key": "example.com/x", "effect": "NoSchedule"}]},
        "status": {"capacity": {}},
    }


SR = {
    "apiVersion": "sro.dev/v1alpha1",
    "kind": "SpecialResource",
    "metadata": {"name": "gpus", "uid": "uid-gpus", "resourceVersion": "3"},
    # a recipe and custom manifests from ConfigMaps: what a pass reads for them is read too
    "spec": {"recipe": "my-gpu", "recipeConfigMap": "my-recipe", "customManifests": "my-manifests"},
    "status": {"phase": "x"},
}


class RecordingApi:
    """Answers every request plausibly and records (verb, resource, scope) as RBAC names them."""

    def __init__(self) -> None:
        self.calls: set[tuple[str, str, str]] = set()
        self.patches: list[tuple[str, str, bytes]] = []  # (path, content type, body) of each PATCH

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH":
            self.patches.append((request.url.path, request.headers.get("content-type", ""), request.content))
        watch = request.url.params.get("watch") in ("1", "true")
        verb, resource = request_kind(request.method, request.url.path, watch)
        if not resource:  # discovery (/api/v1, /apis/...): not a resource, RBAC's non-resource URLs
            return httpx.Response(200, json={"resources": [{"name": "pods/eviction", "group": "policy",
                                                            "version": "v1"}]})  # fmt: skip
        self.calls.add((VERBS[verb], resource, _scope(request.url.path)))
        if "apply-patch" in request.headers.get("content-type", ""):
            # server-side apply creates what is missing, and the API server then checks `create`
            # too (k8s.io/apiserver endpoints/handlers/patch.go, createAuthorizerAttributes)
            self.calls.add(("create", resource, _scope(request.url.path)))
        name = request.url.path.rstrip("/").split("/")[-1]
        if verb == "WATCH":
            await asyncio.sleep(0.05)
            return httpx.Response(200, content=b"")
        if verb == "LIST":
            items = [_node("n1")] if resource == "nodes" else []
            return httpx.Response(200, json={"kind": "List", "apiVersion": "v1",
                                             "metadata": {"resourceVersion": "7"}, "items": items})  # fmt: skip
        if resource == "pods/log":
            return httpx.Response(200, text="a log line\n")
        if resource.startswith("nodes"):
            return httpx.Response(200, json=_node(name))
        if resource.startswith("specialresources"):
            return httpx.Response(200, json=SR)
        if resource == "customresourcedefinitions":  # the Prometheus operator's and OpenShift's are there
            return httpx.Response(200, json={"apiVersion": "apiextensions.k8s.io/v1",
                                             "kind": "CustomResourceDefinition", "metadata": {"name": name},
                                             "spec": {"group": "g", "names": {"kind": "K", "plural": "ks"},
                                                      "scope": "Namespaced", "versions": []}})  # fmt: skip
        if verb in ("create", "patch") or request.method in ("POST", "PATCH", "PUT"):
            try:
                body = json.loads(request.content or b"{}")
            except ValueError:
                body = {}
            if not isinstance(body, dict) or "kind" not in body:
                body = {"metadata": {"name": name}}
            body.setdefault("metadata", {}).setdefault("resourceVersion", "9")
            return httpx.Response(201 if request.method == "POST" else 200, json=body)
        if verb == "DELETE":
            return httpx.Response(200, json={"kind": "Status", "apiVersion": "v1", "status": "Success"})
        return httpx.Response(
            404, json={"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                       "reason": "NotFound", "message": "not found"},
        )  # fmt: skip


def _client(api: RecordingApi) -> tuple[AsyncClient, httpx.AsyncClient]:
    config = KubeConfig.from_one(cluster=Cluster(server="https://api"), user=User(token="t"))
    client = AsyncClient(config=config, field_manager="sro")
    http = httpx.AsyncClient(transport=httpx.MockTransport(api), base_url="https://api")
    client._client._client = http  # lightkube's httpx client, as sro.kube.client.lightkube_http reads it
    return client, httpx.AsyncClient(transport=httpx.MockTransport(api), base_url="https://api")


def _rendered() -> list[dict[str, Any]]:
    """Every object the operator renders from the templates (not what `sro install` owns)."""
    values = dict(
        namespace=NS, image="i", pull_policy="Never", sr="gpus", name="x", node="n1", check="driver"
    )
    docs: list[dict[str, Any]] = []
    for component in components():
        if component in ("operator", "discovery", "node-report"):
            continue
        for recipe in ("simulated-gpu", "nvidia-gpu"):
            try:
                found = render(component, recipe=recipe, driver_image="d", prometheus_operator=True, **values)
            except ValueError:
                continue
            docs += [d for d in found if d["kind"] not in INSTALL_KINDS]
    return docs


SPECS = {"PriorityClass": {"value": 1000}, "LimitRange": {"spec": {"limits": []}}}


def _an(kind: str) -> dict[str, Any]:
    for doc in _rendered():
        if doc["kind"] == kind:
            return doc
    api_version = {"DaemonSet": "apps/v1", "PriorityClass": "scheduling.k8s.io/v1",
                   "ServiceMonitor": "monitoring.coreos.com/v1",
                   "PrometheusRule": "monitoring.coreos.com/v1",
                   "NodeFeatureRule": "nfd.k8s-sigs.io/v1alpha1"}.get(kind, "v1")  # fmt: skip
    # partitioning objects live in the namespaces a SpecialResource caps (or cluster-wide)
    namespace = {} if kind in CLUSTER_SCOPED else {"namespace": "team-a"}
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": f"sro-{kind.lower()}", **namespace,
                         "labels": {SPECIALRESOURCE_LABEL: "gpus"}}, **SPECS.get(kind, {})}  # fmt: skip


async def _run_the_operators_io(api: RecordingApi) -> None:
    client, http = _client(api)
    cache = ClusterCache(http, NS)
    watching = asyncio.create_task(cache.run())
    try:
        io = SpecialResourceIO(client, cache, NS, "localhost/sro:t")
        sr = sr_from_json(SR)
        await io.get_sr("gpus")
        await io.observe(sr)
        await io.remains("gpus")
        writable = (*OWNED_KINDS, *MONITORING_KINDS)
        plan = Plan(
            status={"phase": "Ready"},
            apply=tuple(_an(k) for k in (*writable, *ELSEWHERE_KINDS)),
            delete=tuple((k, f"sro-{k.lower()}") for k in writable),
            delete_elsewhere=tuple(
                (k, "" if k in CLUSTER_SCOPED else "team-a", "x") for k in ELSEWHERE_KINDS
            ),
            create_pods=({**_an("Pod"), "spec": {"containers": [{"name": "c", "image": "i"}]}},),
            delete_pods=("sro-pod",),
            node_patches={
                "n1": NodePatch(labels={"sro.dev/gpus.driver": "ready"}, unschedulable=True),
                "n2": NodePatch(add_taints=({"key": "sro.dev/gpus", "effect": "NoSchedule"},)),
            },
            evict=(("team-a", "train"),),
            events=(NodeEvent("n1", "uid-n1", "Normal", "UpgradeStarted", "m"),),
            # remediation: the GpuHealthy condition, merged by type into the Node's status
            node_conditions={"n1": {"type": "GpuHealthy", "status": "False", "reason": "GpuLost"}},
        )
        problems = await io.carry_out(sr, plan, ())
        assert problems == [], problems
        await io._log_tail("sro-pod")  # a failing pod's log tail (only read for pods that fail)
        # the workloads of a node in an upgrade's eviction steps
        await io._workloads("gpus", "n1")
        nfd = NodeFeatureRuleIO(AsyncObjects(client), cache)
        await nfd.observe()
        assert await nfd.patch_node("n1", {"a": "b"}, {}, [], "5") == "ok"
        assert await nfd.patch_capacity("n1", {"example.com/r": "1"}) == "ok"
        lease = KubeLease(client, NS, "sro-operator")
        election = LeaderElection(lease, "me")
        await lease.read()
        await lease.create({"holderIdentity": "me"})
        await lease.update({"holderIdentity": "me"}, "1")
        del election
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


@pytest.fixture(scope="module")
def sent() -> Iterator[frozenset[tuple[str, str, str]]]:
    api = RecordingApi()
    asyncio.run(_run_the_operators_io(api))
    yield frozenset(api.calls | KOPF)


def test_a_node_condition_is_a_strategic_merge_of_the_node_status() -> None:
    """Merged by type: a merge patch would replace the list and wipe the kubelet's conditions."""
    api = RecordingApi()

    async def run() -> None:
        client, http = _client(api)
        cache = ClusterCache(http, NS)
        io = SpecialResourceIO(client, cache, NS, "localhost/sro:t")
        cond = {"type": "GpuHealthy", "status": "False", "reason": "GpuLost", "message": "device 3"}
        problems = await io.carry_out(
            sr_from_json(SR), Plan(status=SR["status"], node_conditions={"n1": cond}), ()
        )
        assert problems == []

    asyncio.run(run())
    [(path, kind, body)] = [p for p in api.patches if p[0].startswith("/api/v1/nodes/")]
    assert path == "/api/v1/nodes/n1/status"
    assert kind == "application/strategic-merge-patch+json"
    assert json.loads(body) == {
        "status": {
            "conditions": [
                {"type": "GpuHealthy", "status": "False", "reason": "GpuLost", "message": "device 3"}
            ]
        }
    }


def _granted() -> frozenset[tuple[str, str, str]]:
    out = set()
    for o in objects():
        if o["kind"] not in ("ClusterRole", "Role") or o["metadata"]["name"] != "sro-operator":
            continue
        scope = CLUSTER if o["kind"] == "ClusterRole" else NS
        for rule in o["rules"]:
            assert "resourceNames" not in rule or not {"create", "list", "watch"} & set(rule["verbs"])
            out |= {(v, r, scope) for r in rule["resources"] for v in rule["verbs"]}
    return frozenset(out)


def test_every_request_the_operator_sends_is_allowed(sent: frozenset[tuple[str, str, str]]) -> None:
    granted = _granted()
    refused = sorted(
        c for c in sent if c not in granted and not (c[2] == NS and (c[0], c[1], CLUSTER) in granted)
    )
    assert refused == [], f"sent but not granted: {refused}"


def test_every_verb_the_roles_grant_is_sent(sent: frozenset[tuple[str, str, str]]) -> None:
    unused = sorted(g for g in _granted() if g not in sent)
    assert unused == [], f"granted but never sent: {unused}"


def test_the_templates_render_only_kinds_the_operator_lists_as_its_own() -> None:
    """What a plan applies is found again (and deleted) by listing these kinds: a template of another
    kind would be applied and never cleaned up, and its verbs would be missing above."""
    kinds = {d["kind"] for d in _rendered()}
    assert kinds and kinds <= {*OWNED_KINDS, *MONITORING_KINDS, "Pod"}, kinds
