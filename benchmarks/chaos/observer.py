"""The fault campaign's observer: the facts the invariants need, gathered from the live cluster while
the faults go on, with watches and looks of its own (issue 25: invariants checked continuously).

Why its own: the operator's view is what is on trial, so the observer never asks it anything. It
watches Nodes (cordons, sro's records, the step on each node), the workload's pods and PDB and the
operator's pods; every LOOK_S it looks at each running workload container's devices through /proc
(the container's /dev, found by its cgroup: no exec, nothing started in the pod) against what the
kubelet's pod-resources API says it allocated, follows the API server's audit log (evictions and
deletes sro made, the Lease's terms and who wrote in each), reads the operator's resident memory
from /proc, and every LOGS_S the operator's logs. The rules themselves are `invariants.py` (pure);
this module is only the I/O around them. Single-node local cluster: /proc of the node is this
machine's (the observer runs as root beside it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from lightkube import Client, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Node, Pod

from benchmarks.chaos import hostlooks as host
from benchmarks.chaos import invariants as inv
from benchmarks.chaos.invariants import Violation
from benchmarks.harness import rss_mib
from sro.api.names import GROUP, KIND, OPERATOR_LEASE, PLURAL, SPECIALRESOURCE_LABEL, VERSION
from sro.api.recipes import SIMULATED_GPU
from sro.devices.faultclasses import CONDITION
from sro.host import podresources
from sro.local import audit
from sro.local.layout import Layout

SpecialResource = create_global_resource(GROUP, VERSION, KIND, PLURAL)
# Kubernetes 1.20 serves PodDisruptionBudgets as policy/v1beta1 only (lightkube's model is v1)
PodDisruptionBudget = create_namespaced_resource(
    "policy", "v1beta1", "PodDisruptionBudget", "poddisruptionbudgets"
)
LOOK_S = 2.0  # devices, cordons, the audit log and memory: the "every ~2 s"
LOGS_S = 15.0  # the operator's logs: a deleted pod's log is gone, so not only at the end
OPERATOR_LABEL: dict[str, Any] = {"app.kubernetes.io/name": "sro-operator"}
STEP_LAG_S = 1.0  # the node watch may show a step's record a little after its eviction
# what sro may leave labelled with the SpecialResource (its owned kinds, and the pods it runs)
OWNED = "pods,daemonsets,deployments,jobs,configmaps,services,serviceaccounts,roles,rolebindings"


def _kubectl() -> str:
    return shutil.which("kubectl") or str(Layout().state / "bin" / "kubectl")


def _kubectl_env() -> dict[str, str]:
    """kubectl's environment: $KUBECONFIG where set, else the local cluster's admin kubeconfig (as
    `cluster_client`); without it kubectl finds no cluster and its output would be read as empty."""
    return {"KUBECONFIG": str(Layout().admin_kubeconfig), **os.environ}


def _dict(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = obj.to_dict()
    return out


class Observer:
    """Start it before the faults, `stop()` it after: every violation seen, with its time."""

    def __init__(
        self, *, sr: str, workload_ns: str, pdb: str, audit_log: Path, operator_ns: str = "sro-system"
    ) -> None:
        self.sr, self.workload_ns, self.pdb, self.audit_log, self.operator_ns = (
            sr,
            workload_ns,
            pdb,
            audit_log,
            operator_ns,
        )
        self.stale_grace_s = inv.STALE_CORDON_GRACE_S  # a test may shorten it before start()
        self.operator_restarts = 0
        self.rss_peak_mib = 0.0
        self.containers_looked = 0  # container looks made (a run with none checked no device)
        self.errors: list[str] = []  # what the observer could not look at (kept for the report)
        self._client = cluster_client()
        self._watch_client = cluster_client()  # the watches' own connections, closed by stop()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._violations: list[Violation] = []
        self._said: set[tuple[str, str]] = set()
        self._nodes: dict[str, dict[str, Any]] = {}
        self._steps: dict[str, list[tuple[float, str]]] = {}  # node -> (seen at, step)
        self._pods: dict[str, dict[str, Any]] = {}  # uid -> the workload pod
        self._uids: dict[tuple[str, str], list[tuple[float, str]]] = {}  # (ns, name) -> (seen at, uid)
        self._readiness: dict[str, list[tuple[float, bool]]] = {}  # uid -> (seen at, Ready) changes
        self._pdb: list[inv.PdbSample] = []
        self._pdb_selector: dict[str, Any] | None = None  # None: the PDB not seen yet
        self._op_pods: dict[str, dict[str, Any]] = {}  # uid -> operator pod (gone ones kept)
        self._op_restarts: dict[str, int] = {}
        self._op_initial: dict[str, int] = {}  # uid -> restartCount of the pods running at start
        self._looks: dict[str, inv.ContainerLook] = {}
        self._cordons: inv.CordonClock = {}
        self._disruptions: list[inv.Disruption] = []
        self._lease_events: list[audit.AuditEvent] = []
        self._audit = audit.Cursor()
        self._since = "1970-01-01T00:00:00Z"  # operator log lines before this are not read (start())
        # sro's writes are known by a replica's user agent, or by the operator's service account
        # (an operator image from before the user agent named its replica)
        self._operator_user = f"system:serviceaccount:{operator_ns}:sro-operator"

    # ---- the API --------------------------------------------------------------------------------
    def start(self) -> None:
        # log lines from here on only: a previous container's traceback from before the campaign
        # (an earlier run's) is not this run's
        self._since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._audit = audit.end_of(self.audit_log)  # from here on
        self._op_initial = {
            p.metadata.uid: sum(c.restartCount for c in ((p.status and p.status.containerStatuses) or []))
            for p in self._client.list(Pod, namespace=self.operator_ns, labels=OPERATOR_LABEL)
            if p.metadata is not None and p.metadata.uid
        }
        watches: list[
            tuple[str, Callable[[], Iterator[tuple[str, Any]]], Callable[[str, dict[str, Any]], None]]
        ] = [
            ("nodes", lambda: self._watch_client.watch(Node), self._on_node),
            (
                "workload pods",
                lambda: self._watch_client.watch(Pod, namespace=self.workload_ns),
                self._on_pod,
            ),
            (
                "the PDB",
                lambda: self._watch_client.watch(
                    PodDisruptionBudget, namespace=self.workload_ns, fields={"metadata.name": self.pdb}
                ),
                self._on_pdb,
            ),
            (
                "operator pods",
                lambda: self._watch_client.watch(Pod, namespace=self.operator_ns, labels=OPERATOR_LABEL),
                self._on_operator_pod,
            ),
        ]
        for what, open_, handle in watches:
            self._spawn(f"watch {what}", partial(self._watch, what, open_, handle))
        self._spawn("looks", self._look_loop)

    def stop(self) -> list[Violation]:
        self._stop.set()
        self._threads[-1].join(timeout=90)  # the looks (a log read may take its 30 s)
        self._look_once(time.time())  # what happened since the last look
        # the watches end when their connections do (they wait for the next event otherwise)
        self._watch_client.close()
        self._client.close()  # its pooled TLS connections (an unclosed one is a ResourceWarning)
        return self.violations()

    def violations(self) -> list[Violation]:
        with self._lock:
            return list(self._violations)

    def converged(self) -> bool:
        return not self.why_not_converged()

    def why_not_converged(self) -> list[str]:
        try:
            doc = _dict(self._client.get(SpecialResource, self.sr))
        except Exception as e:  # absent, or the API server restarting: not converged
            return [f"SpecialResource {self.sr}: {e}"]
        nodes = [_dict(n) for n in self._client.list(Node)]
        return inv.not_converged(doc, nodes, self.sr)

    def final_checks(self) -> list[Violation]:
        """Memory and the operator's logs once more, after convergence: what they find that was not
        seen before. Those are kept out of `violations()`/`stop()`, so the two lists add up."""
        now = time.time()
        return self._add(self._sample_memory(now) + self._check_logs(now), keep=False)

    # ---- threads --------------------------------------------------------------------------------
    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=f"observer {name}", daemon=True)
        self._threads.append(t)
        t.start()

    def _watch(
        self,
        what: str,
        open_: Callable[[], Iterator[tuple[str, Any]]],
        handle: Callable[[str, dict[str, Any]], None],
    ) -> None:
        """A watch that outlives API server restarts: reopened (which lists again) after any end."""
        while not self._stop.is_set():
            try:
                for kind, obj in open_():
                    if self._stop.is_set():
                        return
                    handle(kind, _dict(obj))
            except Exception as e:  # the API server went away: open it again
                self._error(f"watch of {what}: {type(e).__name__}: {e}")
            self._stop.wait(1.0)

    def _look_loop(self) -> None:
        last_logs = time.monotonic()
        while not self._stop.wait(LOOK_S):
            now = time.time()
            self._look_once(now)
            if time.monotonic() - last_logs >= LOGS_S:
                last_logs = time.monotonic()
                self._add(self._check_logs(now))

    def _look_once(self, now: float) -> None:
        for what, step in (
            ("devices", self._check_devices),
            ("cordons", self._check_cordons),
            ("the audit log", self._check_audit),
            ("memory", self._sample_memory),
        ):
            try:
                self._add(step(now))
            except Exception as e:  # one look failing must not end the others
                self._error(f"{what}: {type(e).__name__}: {e}")

    # ---- watch handlers -------------------------------------------------------------------------
    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        name = str(meta.get("name"))
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(name, None)
                return
            self._nodes[name] = node
            step = inv.step_key(meta.get("annotations") or {}, self.sr)
            timeline = self._steps.setdefault(name, [])
            if not timeline or timeline[-1][1] != step:
                timeline.append((time.time(), step))

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid, key = str(meta.get("uid")), (str(meta.get("namespace")), str(meta.get("name")))
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(uid, None)
                return
            self._pods[uid] = pod
            now = time.time()
            seen = self._uids.setdefault(key, [])
            if not seen or seen[-1][1] != uid:
                seen.append((now, uid))
            ready, changes = inv.is_ready(pod), self._readiness.setdefault(uid, [])
            if not changes or changes[-1][1] != ready:
                changes.append((now, ready))

    def _on_pdb(self, kind: str, pdb: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        s = pdb.get("status") or {}
        sample = inv.PdbSample(
            time.time(),
            int(s.get("disruptionsAllowed") or 0),
            int(s.get("currentHealthy") or 0),
            int(s.get("desiredHealthy") or 0),
        )
        with self._lock:
            self._pdb.append(sample)
            self._pdb_selector = (pdb.get("spec") or {}).get("selector") or {}

    def _on_operator_pod(self, kind: str, pod: dict[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid"))
        restarts = sum(
            int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or []
        )
        with self._lock:
            if kind != "DELETED":
                self._op_pods[uid] = pod
            self._op_restarts[uid] = max(self._op_restarts.get(uid, 0), restarts)
            self.operator_restarts = inv.operator_restarts(self._op_restarts, self._op_initial)

    # ---- looks ----------------------------------------------------------------------------------
    def _check_devices(self, now: float) -> list[Violation]:
        """foreign-device and devices-changed over every running, unprivileged workload container."""
        paths = host.device_paths()
        if paths is None:
            return []  # no simulated driver installed now (a fault removed it): nothing to compare
        by_rdev, by_id = paths
        try:
            assigned = podresources.list_assignments(podresources.DEFAULT_SOCKET)
        except podresources.KubeletUnavailable:
            return []  # the kubelet restarting: its allocations cannot be read this round
        allocated: dict[tuple[str, str, str], set[str]] = {}
        for a in assigned:
            if a.namespace == self.workload_ns and a.resource == SIMULATED_GPU.resource:
                nodes = by_id.get(a.device_id.split("::", 1)[0], set())
                allocated.setdefault((a.namespace, a.pod, a.container), set()).update(nodes)
        with self._lock:
            pods = list(self._pods.values())
        wanted: dict[str, tuple[str, str, str]] = {}
        for pod in pods:
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            privileged = {
                c.get("name")
                for c in spec.get("containers") or []
                if (c.get("securityContext") or {}).get("privileged")
            }
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                cid = str(cs.get("containerID") or "").split("://", 1)[-1]
                if cid and "running" in (cs.get("state") or {}) and cs.get("name") not in privileged:
                    wanted[cid] = (str(meta.get("namespace")), str(meta.get("name")), str(cs.get("name")))
        pids = host.pids_of(set(wanted))
        looks = []
        for cid, pid in pids.items():
            seen = host.devices_seen(pid, by_rdev)
            if seen is None:
                continue  # it exited between the two reads
            ns, name, container = wanted[cid]
            got = frozenset(allocated.get((ns, name, container), set()))
            looks.append(inv.ContainerLook(now, f"{ns}/{name}", container, cid, frozenset(seen), got))
        with self._lock:
            found, self._looks = inv.device_checks(self._looks, looks)
            self.containers_looked += len(looks)
        return found

    def _check_cordons(self, now: float) -> list[Violation]:
        with self._lock:
            nodes = list(self._nodes.values())
        facts = [
            inv.cordon_facts(
                str(n["metadata"]["name"]),
                bool((n.get("spec") or {}).get("unschedulable")),
                n["metadata"].get("annotations") or {},
                self.sr,
            )
            for n in nodes
        ]
        found, self._cordons = inv.stale_cordons(facts, self._cordons, now, self.stale_grace_s)
        return found

    def _check_audit(self, now: float) -> list[Violation]:
        events, self._audit = audit.follow(self.audit_log, self._audit)
        for e in events:
            lease = e.resource == "leases" and e.name == OPERATOR_LEASE
            if e.is_write and (lease or e.replica is not None):
                self._lease_events.append(e)
            ours = e.replica is not None or e.user == self._operator_user
            if not ours or e.resource != "pods" or not e.accepted:
                continue
            if e.verb == "create" and e.subresource == "eviction" and e.code in (200, 201):
                self._disruptions.append(self._disruption(e, "evict"))
            elif e.verb == "delete" and not e.subresource and e.namespace == self.workload_ns:
                self._disruptions.append(self._disruption(e, "delete"))
        found = inv.double_evictions(self._disruptions)
        with self._lock:
            samples = list(self._pdb)
        settled = [d for d in self._disruptions if d.at + inv.PDB_LAG_S < now]
        found += inv.pdb_broken(settled, samples, self.workload_ns)
        for o in audit.writers_per_term(self._lease_events):
            found.append(
                Violation(
                    "two-writers",
                    o.start.timestamp(),
                    f"{o.writer} wrote {o.count} time(s) ({', '.join(o.resources)}) from {o.start:%H:%M:%S.%f} "
                    f"to {o.end:%H:%M:%S.%f} while {o.holder or 'nobody'} held the lease",
                )
            )
        return found

    def _disruption(self, e: audit.AuditEvent, verb: str) -> inv.Disruption:
        at = e.time.timestamp()
        with self._lock:
            uids = [u for t, u in self._uids.get((e.namespace, e.name), []) if t <= at + STEP_LAG_S]
            uid = uids[-1] if uids else ""
            pod = self._pods.get(uid) or {}
            labels = (pod.get("metadata") or {}).get("labels") or {}
            guarded = self._pdb_selector is not None and inv.selects(self._pdb_selector, labels)
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            steps = [s for t, s in self._steps.get(node, []) if t <= at + STEP_LAG_S]
            counted = inv.ready_at(self._readiness.get(uid, []), at)
        step = steps[-1] if steps else ""
        return inv.Disruption(at, e.namespace, e.name, uid, step, verb, guarded, counted)

    def _sample_memory(self, now: float) -> list[Violation]:
        with self._lock:
            uids = [u for u, p in self._op_pods.items() if (p.get("status") or {}).get("phase") == "Running"]
        for pid in host.operator_pids(uids):
            try:
                self.rss_peak_mib = max(self.rss_peak_mib, rss_mib(pid))
            except (OSError, RuntimeError):
                continue
        # one violation however often the peak grows past the bound
        return inv.memory(self.rss_peak_mib, now)

    def _check_logs(self, now: float) -> list[Violation]:
        with self._lock:
            pods = list(self._op_pods.values())
        logs: dict[str, str] = {}
        for pod in pods:
            name = str(pod["metadata"]["name"])
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                runs = [(False, "")] + ([(True, " (previous)")] if cs.get("restartCount") else [])
                for previous, suffix in runs:
                    args = [_kubectl(), "logs", "-n", self.operator_ns, name, "-c", str(cs.get("name"))]
                    args.append(f"--since-time={self._since}")
                    out = subprocess.run(
                        args + (["--previous"] if previous else []),
                        capture_output=True,
                        text=True,
                        timeout=30,
                        env=_kubectl_env(),
                    )
                    if out.returncode == 0:
                        logs[f"{name}/{cs.get('name')}{suffix}"] = out.stdout
        return inv.tracebacks(logs, now)

    # ---- keeping what was found -----------------------------------------------------------------
    def _add(self, found: list[Violation], keep: bool = True) -> list[Violation]:
        """The violations not said before (a memory one once at all), kept unless `keep` is False."""
        new = []
        with self._lock:
            for v in found:
                key = (v.kind, "" if v.kind == "memory" else v.detail)
                if key not in self._said:
                    self._said.add(key)
                    new.append(v)
            if keep:
                self._violations += new
        return new

    def _error(self, message: str) -> None:
        with self._lock:
            if len(self.errors) < 1000:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {message}")


# ---- after the SpecialResource is deleted -----------------------------------------------------
def cluster_client() -> Client:
    """A client of the cluster $KUBECONFIG names, else of this machine's local cluster: a test or a
    make target does not have `sro local env`'s exports (lightkube alone would find no config)."""
    if os.environ.get("KUBECONFIG"):
        return Client()
    return Client(config=KubeConfig.from_file(Layout().admin_kubeconfig))


def leftovers(sr: str) -> list[Violation]:
    """Everything SpecialResource `sr` left after its delete: the object itself, anything labelled
    with it (pods, DaemonSets, ConfigMaps, …), and its labels, annotations, taints and remediation
    condition on nodes."""
    now = time.time()
    client = cluster_client()
    out: list[Violation] = []
    try:
        client.get(SpecialResource, sr)
        out.append(Violation("leftover", now, f"SpecialResource {sr} still exists"))
    except Exception:
        pass
    got = subprocess.run(
        [_kubectl(), "get", OWNED, "-A", "-l", f"{SPECIALRESOURCE_LABEL}={sr}", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=_kubectl_env(),
    )
    objects = [
        f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
        for o in json.loads(got.stdout).get("items", [])
    ]
    out += inv.object_leftovers(objects, now, sr)
    out += inv.node_leftovers(sr, [_dict(n) for n in client.list(Node)], now, CONDITION)
    client.close()
    return out
