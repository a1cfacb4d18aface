"""A KWOK-style node simulator for scale runs: Node objects with no kubelet, kept alive and
running their pods by one small controller (a benchmark tool, not part of sro).

Hollow nodes (`sro local up --hollow-nodes`) are real kubelets and cost ~25 MiB each: about 300 fit
on this machine. For 1,000 nodes this process plays every kubelet at once, as KWOK does:

- creates `sim-0 .. sim-<N-1>` (label `sro.dev/simnode=true`, a NoExecute taint of that key, the
  same NFD kernel/OS labels, capacity and failure rules as hollow nodes: `sro.local.hollowconfig`),
  Ready, and renews each node's Lease in kube-node-lease every LEASE_RENEW seconds (the node
  lifecycle controller marks a node unreachable after 40 s without one; one it marked anyway gets
  its Ready status posted again);
- watches every pod; a pod bound to one of its nodes gets the status a kubelet would post: Running
  and Ready (a DaemonSet's), Succeeded (restartPolicy Never: a validation pod), or — where a failure
  rule names the pod's `sro.dev/state` on that node — crash-looping, resp. Failed;
- deletes a pod of its nodes that is being deleted (grace period 0), as a kubelet confirms it;
- on SIGTERM deletes its Node objects (their Leases go with them, owned) and then the pods left
  on them (grace 0), and exits.

Run: `python -m benchmarks.simnodes --nodes 1000 [--config hollow.yaml]` with $KUBECONFIG's admin
client certificate (the local cluster's). It prints `READY <n>` once every node is Ready, then one
`STATS ...` line every 10 s (pods it ran, requests it made).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import ssl
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from sro.api.names import STATE_LABEL
from sro.kube import http11
from sro.local.hollowconfig import HollowConfig, default_config, parse_config

SIM_LABEL = "sro.dev/simnode"
PREFIX = "sim"
LEASE_NS = "kube-node-lease"
LEASE_SECONDS = 40
LEASE_RENEW = 10.0  # as a kubelet: a quarter of the lease; at 20 s a busy API server let leases lapse
CONCURRENCY = 32  # connections for pods and nodes: requests in flight at once
LEASE_CONNECTIONS = 8  # Leases have their own: they never wait behind a storm of pod updates
FIELD_MANAGER = "sro-simnodes"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_doc(config: HollowConfig, i: int) -> dict[str, Any]:
    name = f"{PREFIX}-{i}"
    labels = {k: v for k, v in config.node_labels(i).items() if not k.startswith("sro.dev/hollow")} | {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        SIM_LABEL: "true",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [{"key": SIM_LABEL, "value": "true", "effect": "NoExecute"}]},
    }


def node_status(config: HollowConfig, i: int) -> dict[str, Any]:
    system = config.system(i)
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti", **config.capacity}
    now = _now()
    cond = [
        ("Ready", "True", "KubeletReady", "simulated kubelet is posting ready status"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "simulated"),
    ]
    return {
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": m,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
                for t, s, r, m in cond
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.99.{i // 250}.{i % 250 + 1}"}],
            "nodeInfo": {
                "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2",
                "kernelVersion": system.kernel,
                "osImage": f"{system.os_id} {system.os_version}",
                "containerRuntimeVersion": "simulated://1",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        }
    }


def pod_status(doc: dict[str, Any], failing: bool) -> dict[str, Any]:
    """What a kubelet posts for a pod it runs: Running/Ready, Succeeded, or failing by the rules."""
    spec, md = doc["spec"], doc["metadata"]
    now = _now()
    run_to_completion = spec.get("restartPolicy") == "Never"
    statuses = []
    for c in spec.get("containers", []):
        image = c.get("image", "")
        base = {
            "name": c["name"],
            "image": image,
            "imageID": image,
            "containerID": f"sim://{md['uid'][:12]}-{c['name']}",
        }
        if run_to_completion:
            code = 1 if failing else 0
            state = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Error" if failing else "Completed",
                    "startedAt": now,
                    "finishedAt": now,
                }
            }
            statuses.append({**base, "ready": False, "restartCount": 0, "started": False, "state": state})
        elif failing:
            state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": "back-off 40s restarting failed container (failure rule)",
                }
            }
            statuses.append({**base, "ready": False, "restartCount": 3, "started": False, "state": state})
        else:
            statuses.append(
                {
                    **base,
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": now}},
                }
            )
    ready = not run_to_completion and not failing
    phase = ("Failed" if failing else "Succeeded") if run_to_completion else "Running"
    conditions = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "Ready", "status": str(ready), "lastTransitionTime": now},
        {"type": "ContainersReady", "status": str(ready), "lastTransitionTime": now},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
    ]
    return {
        "status": {
            "phase": phase,
            "conditions": conditions,
            "hostIP": "10.99.0.1",
            "podIP": "10.98.0.1",
            "podIPs": [{"ip": "10.98.0.1"}],
            "startTime": now,
            "containerStatuses": statuses,
        }
    }


def _ready(status: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))


class Simulator:
    def __init__(self, api: Api, config: HollowConfig, count: int) -> None:
        self.api = api
        self.config = config
        self.count = count
        self.names = {f"{PREFIX}-{i}": i for i in range(count)}
        self.handled: dict[str, str] = {}  # pod uid -> phase posted
        self.requests = 0
        self.pods_run = 0
        self.errors = 0
        self.stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.recovered = 0
        self.reposted = 0

    def spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def spawn(self, pod: dict[str, Any]) -> None:
        self.spawn_task(self.on_pod(pod))

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ctype: str = "application/json",
        ok: tuple[int, ...] = (),
        pool: http11.Pool | None = None,
    ) -> http11.Response | None:
        self.requests += 1
        content = b"" if body is None else json.dumps(body).encode()
        try:
            resp = await (pool or self.api.pool).request(method, path, content, ctype)
        except http11.Failure as e:
            self.errors += 1
            print(f"simnodes: {method} {path}: {e!r}", file=sys.stderr, flush=True)
            return None
        if resp.status_code >= 400 and resp.status_code not in ok:
            self.errors += 1
            print(
                f"simnodes: {method} {path}: {resp.status_code} {resp.text[:200]}",
                file=sys.stderr,
                flush=True,
            )
        return resp

    # ---- nodes and leases ------------------------------------------------------------------
    async def create_node(self, i: int) -> None:
        # registered with its status, as a kubelet does: a Node without a Ready condition crashes this
        # Kubernetes' node lifecycle controller (a nil condition in its NoExecute tainting pass)
        doc = node_doc(self.config, i) | node_status(self.config, i)
        name = doc["metadata"]["name"]
        resp = await self.call("POST", "/api/v1/nodes", doc, ok=(409,))
        uid = ""
        if resp is not None and resp.status_code < 300:
            uid = resp.json()["metadata"]["uid"]
        elif resp is not None and resp.status_code == 409:  # left by a run that was killed
            got = await self.call("GET", f"/api/v1/nodes/{name}")
            uid = got.json()["metadata"]["uid"] if got is not None and got.status_code == 200 else ""
            await self.post_status(name)
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": LEASE_NS,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]
                if uid
                else [],
            },
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro()},
        }
        await self.call(
            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases", lease, ok=(409,)
        )

    async def renew(self, name: str) -> None:
        body = {
            "spec": {"renewTime": _micro(), "holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS}
        }
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{name}"
        await self.call("PATCH", path, body, "application/merge-patch+json", ok=(404,), pool=self.api.leases)

    async def renew_leases(self) -> None:
        """Each node's Lease every LEASE_RENEW seconds: a slice of the nodes each second, the slice's
        requests at once (one after another, a slow API server would let leases lapse)."""
        names = list(self.names)
        per_tick = max(1, -(-len(names) // int(LEASE_RENEW)))
        k = 0
        while not self.stopping.is_set():
            tick = time.monotonic()
            batch = names[k : k + per_tick] or names[:per_tick]
            k = k + per_tick if k + per_tick < len(names) else 0
            for name in batch:
                self.spawn_task(self.renew(name))
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))

    async def keep_ready(self) -> None:
        """A node the node lifecycle controller marked not Ready (its lease came late, the API server
        being busy) gets its Ready status posted again, as a kubelet would on its next report."""
        while not self.stopping.is_set():
            await asyncio.sleep(15)
            resp = await self.call("GET", f"/api/v1/nodes?labelSelector={SIM_LABEL}%3Dtrue")
            if resp is None or resp.status_code != 200:
                continue
            for n in resp.json()["items"]:
                name = n["metadata"]["name"]
                conds = n["status"].get("conditions", [])
                ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
                if name in self.names and not ready:
                    self.recovered += 1
                    self.spawn_task(self.post_status(name))

    async def post_status(self, name: str) -> None:
        body = node_status(self.config, self.names[name])
        await self.call("PATCH", f"/api/v1/nodes/{name}/status", body, "application/merge-patch+json")

    async def wait_ready(self) -> None:
        while not self.stopping.is_set():
            resp = await self.call("GET", f"/api/v1/nodes?labelSelector={SIM_LABEL}%3Dtrue")
            if resp is not None and resp.status_code == 200:
                ready = sum(
                    1
                    for n in resp.json()["items"]
                    if any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in n["status"].get("conditions", [])
                    )
                )
                if ready >= self.count:
                    return
            await asyncio.sleep(1)

    async def delete_nodes(self) -> None:
        """Its Node objects (their Leases go with them), then the pods left on them, with no grace
        (nobody is left to finalize them; the pod GC would take minutes for thousands)."""
        await asyncio.gather(*(self.call("DELETE", f"/api/v1/nodes/{n}", ok=(404,)) for n in self.names))
        resp = await self.call("GET", "/api/v1/pods?fieldSelector=spec.nodeName%21%3D")
        if resp is not None and resp.status_code == 200:
            mine = [p["metadata"] for p in resp.json()["items"] if p["spec"].get("nodeName") in self.names]
            paths = [f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}" for md in mine]
            body = {"gracePeriodSeconds": 0}
            await asyncio.gather(*(self.call("DELETE", path, body, ok=(404,)) for path in paths))

    # ---- pods ------------------------------------------------------------------------------
    async def on_pod(self, doc: dict[str, Any]) -> None:
        md, spec = doc["metadata"], doc.get("spec", {})
        node = spec.get("nodeName", "")
        if node not in self.names:
            return
        uid, ns, name = md["uid"], md["namespace"], md["name"]
        if md.get("deletionTimestamp"):
            if self.handled.get(uid) != "deleted":
                self.handled[uid] = "deleted"
                await self.call(
                    "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0}, ok=(404,)
                )
            return
        state = (md.get("labels") or {}).get(STATE_LABEL, "")
        failing = bool(state) and self.config.fails(node, state)
        body = pod_status(doc, failing)
        want = _ready(body["status"])
        if uid in self.handled:
            # the node lifecycle controller marks the pods of a node it found unreachable not Ready;
            # a kubelet posts their status again on its next sync
            if self.handled[uid] == "deleted" or _ready(doc.get("status") or {}) == want:
                return
            if not (doc.get("status") or {}).get("containerStatuses"):
                return  # our own first patch is still on its way
            self.reposted += 1
        else:
            self.pods_run += 1
        self.handled[uid] = body["status"]["phase"]
        await self.call(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{name}/status",
            body,
            "application/merge-patch+json",
            ok=(404, 409),
        )

    def seen(self, kind: str, pod: dict[str, Any]) -> None:
        if kind in ("ADDED", "MODIFIED"):
            self.spawn(pod)
        elif kind == "DELETED":
            self.handled.pop(pod["metadata"]["uid"], None)

    async def watch_pods(self) -> None:
        rv = ""
        while not self.stopping.is_set():
            if not rv:
                resp = await self.call("GET", "/api/v1/pods?fieldSelector=spec.nodeName%21%3D")
                if resp is None or resp.status_code != 200:
                    await asyncio.sleep(1)
                    continue
                doc = resp.json()
                rv = doc["metadata"]["resourceVersion"]
                for p in doc["items"]:
                    self.spawn(p)
            try:
                self.requests += 1
                rv = await watch_once(
                    self.api, "/api/v1/pods", rv, self.seen, "&fieldSelector=spec.nodeName%21%3D"
                )
            except httpx.HTTPError as e:
                print(f"simnodes: pod watch: {e}", file=sys.stderr, flush=True)
                await asyncio.sleep(1)

    async def stats(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(10)
            print(
                f"STATS pods={self.pods_run} requests={self.requests} errors={self.errors} "
                f"nodes-recovered={self.recovered} pods-reposted={self.reposted}",
                file=sys.stderr,
                flush=True,
            )


async def watch_once(
    api: Api, path: str, rv: str, seen: Callable[[str, dict[str, Any]], None], query: str = ""
) -> str:
    """One watch of the collection at `path` from `rv`, until the server ends it: each event's type
    and object go to `seen`. The resourceVersion to go on from, or "" to list again (too old)."""
    url = f"{path}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=240{query}"
    async with api.watch.stream("GET", url, timeout=httpx.Timeout(10, read=300)) as stream:
        if stream.status_code != 200:
            return ""
        async for line in stream.aiter_lines():
            if line:
                ev = json.loads(line)
                if ev["type"] == "ERROR":
                    return ""
                rv = ev["object"]["metadata"].get("resourceVersion", rv)
                seen(ev["type"], ev["object"])
    return rv


class Api:
    """The API server as the simulator talks to it, with the kubeconfig's client certificate (the
    local cluster's admin): `pool` for nodes and pods, `leases` apart, `watch` (httpx) for the
    one long-lived pod watch."""

    def __init__(self, kubeconfig: str) -> None:
        doc = yaml.safe_load(Path(kubeconfig).read_text())
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == doc["current-context"])
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
        tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
        tls.load_cert_chain(user["client-certificate"], user["client-key"])
        headers = {"User-Agent": "sro-simnodes", "Accept": "application/json"}
        self.pool = http11.Pool(cluster["server"], tls, headers, CONCURRENCY)
        self.leases = http11.Pool(cluster["server"], tls, headers, LEASE_CONNECTIONS)
        self.watch = httpx.AsyncClient(base_url=cluster["server"], verify=tls, headers=headers)

    async def aclose(self) -> None:
        await self.pool.aclose()
        await self.leases.aclose()
        await self.watch.aclose()


async def main(count: int, config: HollowConfig, kubeconfig: str) -> int:
    api = Api(kubeconfig)
    try:
        sim = Simulator(api, config, count)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, sim.stopping.set)
        await asyncio.gather(*(sim.create_node(i) for i in range(count)))
        loops = (sim.renew_leases(), sim.keep_ready(), sim.watch_pods(), sim.stats())
        tasks = [asyncio.create_task(t) for t in loops]
        await sim.wait_ready()
        if not sim.stopping.is_set():
            print(f"READY {count}", flush=True)
        await sim.stopping.wait()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await sim.delete_nodes()
        print(f"STOPPED pods={sim.pods_run} requests={sim.requests} errors={sim.errors}", flush=True)
    finally:
        await api.aclose()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--config", help="hollow node config (labels, capacity, systems, failure rules)")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ""))
    args = parser.parse_args()
    cfg = parse_config(Path(args.config).read_text()) if args.config else default_config()
    sys.exit(asyncio.run(main(args.nodes, cfg, args.kubeconfig)))
