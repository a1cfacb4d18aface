"""The least a per-node ordering costs: a labeller that gates plain DaemonSets one after another.

The scale benchmark's plain baseline runs six DaemonSets at once; sro runs six states in order on
each node, which Kubernetes can only express by labelling the node when one stage is ready and
letting the next stage's DaemonSet select that label. This process is that ordering done by hand,
and nothing more: it watches the pods of one namespace and, when the pod of DaemonSet `gated-<k>`
on node X is Ready, merges `sro.dev/bench-gate-<k>=ready` into node X's labels, once. No status,
no validation, no reconcile: what is left between it and plain DaemonSets is what the gates cost
the API server, the controller-manager and the scheduler — the floor under any operator that keeps
a per-node order (a benchmark tool, not part of sro).

Run: `python -m benchmarks.gatedlabeller --namespace NS` with $KUBECONFIG's admin client
certificate; it prints `READY` once its watch is open and, on SIGTERM, `STOPPED patches=<n>`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from typing import Any

import httpx

from benchmarks.simnodes import Api, watch_once

GATE = "sro.dev/bench-gate-"  # + the stage's number: the label DaemonSet gated-<k+1> selects
APP = "app"  # the pods' label naming their DaemonSet, gated-<k>
RETRIES = 5


def gate_label(stage: int) -> str:
    return f"{GATE}{stage}"


def ready_gate(pod: dict[str, Any]) -> tuple[str, int] | None:
    """(node, stage) when `pod` is a gated DaemonSet's pod that is Ready on its node, else None."""
    app = (pod["metadata"].get("labels") or {}).get(APP, "")
    node = pod.get("spec", {}).get("nodeName")
    if not app.startswith("gated-") or not node:
        return None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )
    return (node, int(app.removeprefix("gated-"))) if ready else None


class Labeller:
    def __init__(self, api: Api, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.done: set[tuple[str, int]] = set()
        self.patches = 0
        self.tasks: set[asyncio.Task[None]] = set()

    def seen(self, pod: dict[str, Any]) -> None:
        gate = ready_gate(pod)
        if gate is not None and gate not in self.done:
            self.done.add(gate)
            task = asyncio.create_task(self.label(*gate))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def label(self, node: str, stage: int) -> None:
        body = json.dumps({"metadata": {"labels": {gate_label(stage): "ready"}}}).encode()
        for attempt in range(RETRIES):
            try:
                resp = await self.api.pool.request(
                    "PATCH", f"/api/v1/nodes/{node}", body, "application/merge-patch+json"
                )
                self.patches += 1
                if resp.status_code < 400:
                    return
                why = f"{resp.status_code} {resp.text[:200]}"
            except Exception as e:  # http11.Failure: the connection; once more after a pause
                why = repr(e)
            print(
                f"gatedlabeller: {node} stage {stage} (try {attempt + 1}): {why}", file=sys.stderr, flush=True
            )
            await asyncio.sleep(1)

    async def watch(self, started: asyncio.Event) -> None:
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        rv = ""
        while True:
            if not rv:
                doc = (await self.api.pool.request("GET", base)).json()
                rv = doc["metadata"]["resourceVersion"]
                for pod in doc["items"]:
                    self.seen(pod)
                started.set()  # what comes after the list, the watch from its version sees
            try:
                rv = await watch_once(self.api, base, rv, self.event)
            except httpx.HTTPError as e:
                print(f"gatedlabeller: pod watch: {e}", file=sys.stderr, flush=True)
                await asyncio.sleep(1)

    def event(self, kind: str, pod: dict[str, Any]) -> None:
        if kind in ("ADDED", "MODIFIED"):
            self.seen(pod)


async def main(namespace: str, kubeconfig: str) -> int:
    api = Api(kubeconfig)
    labeller = Labeller(api, namespace)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    started = asyncio.Event()
    watching = asyncio.create_task(labeller.watch(started))
    try:
        await started.wait()
        print("READY", flush=True)
        await stopping.wait()
    finally:
        watching.cancel()
        await asyncio.gather(watching, *labeller.tasks, return_exceptions=True)
        await api.aclose()
    print(f"STOPPED patches={labeller.patches}", flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ""))
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.namespace, args.kubeconfig)))
