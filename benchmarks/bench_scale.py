"""The operator at scale: one SpecialResource walked over N simulated nodes (`benchmarks.simnodes`,
KWOK-style: Node objects and their pods played by one process; no kubelet), on the real control
plane of the local cluster.

Per size N (SRO_BENCH_SCALE_NODES, default 10,100,1000), in one run, in this order:
- the operator (below); once every node is validated, the pod of each of its six pod-running states
  is read back (`_stage_pods`): the baselines run those very pods;
- baseline: six plain DaemonSets of those pods (one per stage) created at once on the same N nodes,
  timed until every one has its N pods Ready — what the controller-manager, scheduler and simulator
  need to run sro's pods with no gating at all, so the ratio is what sro's orchestration adds;
- the gated floor: the same six DaemonSets in a per-node order, each but the first selecting a node
  label that `benchmarks.gatedlabeller` sets once the previous one's pod is Ready on that node — the
  order sro keeps, done by hand with nothing else, so what the gates themselves cost the control
  plane; where it already misses the goal against the plain baseline, the figure says so, and sro is
  also compared with it;
- the operator (`sro operator` from this checkout, as a process of this machine, so its memory and
  CPU are read from /proc; the in-cluster Deployment is scaled to 0 meanwhile): `kubectl apply` to
  every node validated but one (sim-1's driver fails by a failure rule: it must show failed, and
  does not count), its passes, peak resident memory and CPU seconds (against the API server's CPU
  seconds over the same time), the SpecialResource's status size (against a table naming each node
  once), and the reconcile latency after a node change (p50/p99 of: a node relabelled out of the
  selector -> its `validated` label taken back, against one LIST of all nodes), and the API requests
  it sent (its `sro_operator_api_requests` metric: from apply to validated per node, and per second
  over IDLE_SECONDS once nothing changes); the simulator's own memory and CPU are reported apart.

The controller-manager's and scheduler's API rate limits are raised for the run
(SRO_BENCH_SCALE_QPS/BURST, default 200/400, through `sro local up`'s flags) and put back after;
they are printed with the results. Needs root and the local cluster; installs sro (idempotent) and
leaves it installed with its two replicas, and leaves no simulated node, SpecialResource or
namespace of its own behind. The last run's logs (the operator's, the simulator's, the labeller's)
stay in benchmarks/results/scale-logs/.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube import ApiError, Client, codecs
from lightkube.generic_resource import create_global_resource
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from benchmarks.gatedlabeller import gate_label
from benchmarks.harness import Figure, percentile, poll, rss_mib, stop
from benchmarks.operator_floor import POD_STAGES
from benchmarks.simnodes import SIM_LABEL
from sro.api.names import (
    GROUP,
    KIND,
    NAMESPACE,
    PLURAL,
    SPECIALRESOURCE_LABEL,
    STATE_LABEL,
    VERSION,
    validated_label,
)
from sro.kube.client import as_dict
from sro.local.hollowconfig import DEFAULT_CONFIG

ROOT = Path(__file__).resolve().parent.parent
SR = "scale"
FLOOR_NS = "sro-bench-scale"
POOL = "sro.dev/bench-pool"  # in the SpecialResource's nodeSelector: relabelling a node takes it out
SIZES = [int(n) for n in os.environ.get("SRO_BENCH_SCALE_NODES", "10,100,1000").split(",") if n.strip()]
QPS = int(os.environ.get("SRO_BENCH_SCALE_QPS", "200"))
BURST = int(os.environ.get("SRO_BENCH_SCALE_BURST", "400"))
FAILING = "sim-1"
GOAL, GOAL_NODES = 1.3, 1000  # issue 26: at 1,000 nodes at most 1.3x the plain DaemonSets
STAGES = len(POD_STAGES)  # the states that run a pod on every node, in sro's per-node order
# what a copied pod spec leaves out: its node and its gate (each baseline sets its own selector), a
# validation's deadline, and what admission set on the pod (a DaemonSet's template may not carry it)
NOT_COPIED = frozenset(
    {"nodeName", "nodeSelector", "affinity", "activeDeadlineSeconds", "priority", "preemptionPolicy"}
)
LATENCY_SAMPLES = 10
IDLE_SECONDS = 30
METRICS_PORT = 18480
LOGS = Path(__file__).resolve().parent / "results" / "scale-logs"  # the last run's (gitignored)
SpecialResource = create_global_resource(GROUP, VERSION, KIND, PLURAL)
_T0 = time.monotonic()


def _progress(message: str) -> None:
    print(f"[scale bench {time.monotonic() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler")


class CpuMeter:
    """CPU seconds of the control plane's processes (and others added by name) over one phase.

    Why: on this machine every phase keeps both cores busy, so a phase's time is its work; where
    that work goes (which process, against the baseline's) says what sro adds and what is the
    control plane's own cost of a per-node order. Read `used()` before any of them is stopped."""

    def __init__(self, layout: Any, **others: int) -> None:
        from sro.local import supervisor

        self.pids = {name: r.pid for name in CONTROL_PLANE if (r := supervisor.running(layout, name))}
        self.pids.update(others)
        self.start = {name: _cpu_seconds(pid) for name, pid in self.pids.items()}

    def add(self, name: str, pid: int) -> CpuMeter:
        self.pids[name] = pid
        self.start[name] = _cpu_seconds(pid)
        return self

    def used(self) -> dict[str, float]:
        return {name: _cpu_seconds(pid) - self.start[name] for name, pid in self.pids.items()}


def _describe_cpu(used: dict[str, float]) -> str:
    total = sum(used.values())
    return f"{total:.0f} CPU-s: " + ", ".join(
        f"{k} {v:.0f}" for k, v in sorted(used.items(), key=lambda kv: -kv[1])
    )


@dataclass
class Size:
    nodes: int
    baseline: float = 0.0
    gated: float = 0.0  # the gated floor: six DaemonSets ordered per node by a bare labeller
    validated: float = 0.0
    passes: float = 0.0
    pass_mean: float = 0.0
    pass_p99: float = 0.0
    rss_idle: float = 0.0
    rss_peak: float = 0.0
    status_kib: float = 0.0
    names_kib: float = 0.0
    latencies: tuple[float, ...] = ()
    list_seconds: float = 0.0
    sim_rss: float = 0.0
    sim_cpu: float = 0.0
    requests: float = 0.0  # the operator's API requests, apply -> validated
    # CPU seconds by process over each phase: the plain DaemonSets, sro, the gated floor
    cpu_plain: dict[str, float] = field(default_factory=dict)
    cpu_sro: dict[str, float] = field(default_factory=dict)
    cpu_gated: dict[str, float] = field(default_factory=dict)
    stage_pods: list[dict[str, Any]] = field(default_factory=list)  # sro's, for the baselines
    idle_rps: float = 0.0  # its API requests per second once every node is validated

    @property
    def cpu(self) -> float:
        """The operator's CPU seconds, apply -> validated."""
        return self.cpu_sro.get("operator", 0.0)

    @property
    def apiserver_cpu(self) -> float:
        return self.cpu_sro.get("kube-apiserver", 0.0)


# ---- the simulator ---------------------------------------------------------------------------------
class Simulated:
    def __init__(self, n: int, kubeconfig: Path, workdir: Path) -> None:
        config = yaml.safe_load(DEFAULT_CONFIG)
        config["failures"] = [{"node": FAILING, "state": "driver"}]
        path = workdir / "sim.yaml"
        path.write_text(yaml.safe_dump(config))
        self.log = (workdir / f"simnodes-{n}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.simnodes", "--nodes", str(n), "--config", str(path)],
            cwd=ROOT,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("READY"):
                return
        raise RuntimeError(f"the simulator exited ({self.proc.wait()}); see {self.log.name}")

    def stop(self) -> None:
        stop(self.proc, 180)
        self.log.close()


# ---- baseline: plain DaemonSets on the same nodes -----------------------------------------------------
def _stage_pods(client: Client) -> list[dict[str, Any]]:
    """The pod spec of each of the six stages as sro ran it, read back once every node is validated:
    each state's DaemonSet template, each validation's pod (on sim-0) made a DaemonSet's (restarted
    always, no node name, deadline or admission-set priority). The baselines run these very pods, so
    they differ from sro by its orchestration alone. (Before, they ran a sleeping container, about a
    third the size of sro's pods: one 1,000-node run of both took 101 s with those and 94 s with
    sro's, so the size itself does not show within the noise of a run.)"""
    ours: dict[str, Any] = {SPECIALRESOURCE_LABEL: SR}
    daemonsets = [as_dict(ds) for ds in client.list(DaemonSet, namespace=NAMESPACE, labels=ours)]
    templates = {ds["metadata"]["labels"][STATE_LABEL]: ds["spec"]["template"]["spec"] for ds in daemonsets}
    for pod in map(as_dict, client.list(Pod, namespace=NAMESPACE, labels=ours)):
        state = pod["metadata"]["labels"][STATE_LABEL]
        if state not in templates and pod["spec"].get("nodeName") == "sim-0":
            templates[state] = pod["spec"]
    missing = [s for s in POD_STAGES if s not in templates]
    if missing:
        raise RuntimeError(f"no DaemonSet or sim-0 pod of {', '.join(missing)} to copy for the baselines")
    pods = []
    for state in POD_STAGES:
        spec = {k: v for k, v in templates[state].items() if k not in NOT_COPIED}
        pods.append({**spec, "restartPolicy": "Always"})
    return pods


def _plain_ds(k: int, pods: list[dict[str, Any]], gated: bool = False) -> Any:
    """DaemonSet `plain-<k>` of stage k's pod (`_stage_pods`), or `gated-<k>`: on the nodes where
    `gated-<k-1>`'s pod is Ready."""
    name = f"{'gated' if gated else 'plain'}-{k}"
    selector = {SIM_LABEL: "true"}
    if gated and k:
        selector[gate_label(k - 1)] = "ready"
    tolerations = [*(pods[k].get("tolerations") or []), {"key": SIM_LABEL, "operator": "Exists"}]
    return codecs.from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": FLOOR_NS},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {**pods[k], "tolerations": tolerations, "nodeSelector": selector},
                },
            },
        }
    )


def _baseline(
    client: Client, n: int, pods: list[dict[str, Any]], meter: Callable[[], CpuMeter], gated: bool = False
) -> tuple[float, dict[str, float]]:
    """Seconds until the six DaemonSets have all their pods Ready, and the CPU used meanwhile."""
    client.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FLOOR_NS}}))
    for account in sorted({str(p.get("serviceAccountName") or "default") for p in pods} - {"default"}):
        sa = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": FLOOR_NS},
        }
        client.create(codecs.from_dict(sa))  # admission refuses a pod whose account is not there
    cpu = meter()
    t0 = time.monotonic()
    for k in range(STAGES):
        client.create(_plain_ds(k, pods, gated))

    def all_ready() -> bool:
        dss = list(client.list(DaemonSet, namespace=FLOOR_NS))
        return len(dss) == STAGES and all(
            ds.status is not None and ds.status.numberReady == n == ds.status.desiredNumberScheduled
            for ds in dss
        )

    poll(f"{STAGES} {'gated' if gated else 'plain'} DaemonSets Ready on {n} nodes", all_ready, 1800)
    took, used = time.monotonic() - t0, cpu.used()
    _remove_floor(client)
    return took, used


def _gated_floor(
    client: Client,
    n: int,
    pods: list[dict[str, Any]],
    kubeconfig: Path,
    workdir: Path,
    meter: Callable[[], CpuMeter],
) -> tuple[float, dict[str, float]]:
    """The six DaemonSets ordered per node by `benchmarks.gatedlabeller`: seconds to all Ready, CPU."""
    log = (workdir / f"gatedlabeller-{n}.log").open("w")
    labeller = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.gatedlabeller", "--namespace", FLOOR_NS],
        cwd=ROOT,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert labeller.stdout is not None
        if labeller.stdout.readline().strip() != "READY":
            raise RuntimeError(f"the gated labeller exited ({labeller.wait()}); see {log.name}")
        return _baseline(client, n, pods, lambda: meter().add("labeller", labeller.pid), gated=True)
    finally:
        stop(labeller, 30)
        log.close()


def _remove_floor(client: Client) -> None:
    try:
        client.delete(Namespace, FLOOR_NS)
    except ApiError as e:
        if e.status.code != 404:
            raise

    def gone() -> bool:
        try:
            client.get(Namespace, FLOOR_NS)
        except ApiError as e:
            return e.status.code == 404
        return False

    poll(f"namespace {FLOOR_NS} gone", gone, 900, 2)


# ---- the operator ----------------------------------------------------------------------------------
def _special_resource() -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": SR},
        "spec": {
            "recipe": "simulated-gpu",
            "nodeSelector": {SIM_LABEL: "true", POOL: "a"},
            "tolerations": [{"key": SIM_LABEL, "operator": "Exists"}],
        },
    }


def _status(client: Client) -> dict[str, Any]:
    try:
        return dict(client.get(SpecialResource, SR).to_dict().get("status") or {})  # type: ignore[attr-defined]
    except ApiError:
        return {}


def _metrics() -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as resp:
        return resp.read().decode().splitlines()


def _api_requests() -> dict[str, float]:
    """The operator's API requests so far, by 'VERB resource' (its sro_operator_api_requests metric)."""
    out: dict[str, float] = {}
    for ln in _metrics():
        if ln.startswith("sro_operator_api_requests_total{"):
            labels = dict(kv.split("=", 1) for kv in ln.split("{", 1)[1].split("}", 1)[0].split(","))
            key = f"{labels['verb'].strip(chr(34))} {labels['resource'].strip(chr(34))}"
            out[key] = float(ln.rsplit(" ", 1)[1])
    return out


def _passes() -> tuple[float, float, float]:
    """(passes, mean pass seconds, p99 pass seconds as the upper bound of its histogram bucket)."""
    lines = [ln for ln in _metrics() if f'"{SR}"' in ln]
    values = {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in lines}
    count = next((v for k, v in values.items() if k.startswith("sro_operator_pass_seconds_count")), 0.0)
    total = next((v for k, v in values.items() if k.startswith("sro_operator_pass_seconds_sum")), 0.0)
    buckets = sorted(
        (float(k.split('le="', 1)[1].split('"', 1)[0]), v)
        for k, v in values.items()
        if k.startswith("sro_operator_pass_seconds_bucket")
    )
    p99 = next((le for le, v in buckets if count and v >= 0.99 * count), float("inf"))
    return count, (total / count if count else 0.0), p99


def _label_pool(client: Client, names: list[str], pool: str) -> None:
    for name in names:
        client.patch(Node, name, {"metadata": {"labels": {POOL: pool}}}, patch_type=PatchType.MERGE)


def _operator_run(
    client: Client, cluster: Any, n: int, image: str, workdir: Path, meter: Callable[[], CpuMeter]
) -> Size:
    size = Size(n)
    sims = [f"sim-{i}" for i in range(n)]
    _label_pool(client, sims, "a")
    log = (workdir / f"operator-{n}.log").open("w")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "SRO_IMAGE": image}
    argv = [sys.executable, "-m", "sro", "operator", "--no-leader-election", "--health-port", "0"]
    op = subprocess.Popen(
        [*argv, "--metrics-port", str(METRICS_PORT)], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    try:
        time.sleep(5)
        size.rss_idle = rss_mib(op.pid)
        cpu = meter().add("operator", op.pid)
        requests0 = sum(_api_requests().values())
        client.create(codecs.from_dict(_special_resource()))
        peak = [size.rss_idle]

        def validated() -> bool:
            peak.append(rss_mib(op.pid))
            return int(_status(client).get("validatedCount") or 0) >= n - 1

        size.validated = poll(f"{n - 1} of {n} simulated nodes validated", validated, 3600, 2)
        size.cpu_sro = cpu.used()
        size.stage_pods = _stage_pods(client)
        size.passes, size.pass_mean, size.pass_p99 = _passes()
        by_kind = _api_requests()
        size.requests = sum(by_kind.values()) - requests0
        top = sorted(by_kind.items(), key=lambda kv: -kv[1])[:8]
        _progress(f"{n} nodes: the operator's API requests: " + ", ".join(f"{k} {v:.0f}" for k, v in top))
        time.sleep(IDLE_SECONDS)  # every node validated: what the operator asks for while nothing changes
        size.idle_rps = (sum(_api_requests().values()) - sum(by_kind.values())) / IDLE_SECONDS
        status = _status(client)
        rows = {r["name"]: r for r in status.get("nodes", [])}
        if rows.get(FAILING, {}).get("failing") != "driver":
            raise RuntimeError(f"{FAILING} is not shown failing at the driver: {rows.get(FAILING)}")
        size.status_kib = len(json.dumps(status)) / 1024
        size.names_kib = len(json.dumps([{"name": s} for s in sims])) / 1024
        _progress(
            f"{n} nodes: validated in {size.validated:.1f} s, {size.passes:.0f} passes (mean "
            f"{size.pass_mean:.2f} s, p99 <= {size.pass_p99:g} s), status {size.status_kib:.1f} KiB"
        )
        # reconcile latency: a node relabelled out of the selector -> its validated label taken back
        lists = []
        for _ in range(3):
            t = time.monotonic()
            list(client.list(Node))
            lists.append(time.monotonic() - t)
        size.list_seconds = statistics.median(lists)
        moved = sims[2 : 2 + min(LATENCY_SAMPLES, n - 2)]
        latencies = []
        key = validated_label(SR)
        for name in moved:
            t = time.monotonic()
            _label_pool(client, [name], "b")
            poll(
                f"{name}'s validated label taken back",
                lambda name=name: key not in (client.get(Node, name).metadata.labels or {}),
                120,
                0.05,
            )  # type: ignore[misc]
            latencies.append(time.monotonic() - t)
            peak.append(rss_mib(op.pid))
        size.latencies = tuple(latencies)
        size.rss_peak = max(peak)
        _delete_sr(client)
    finally:
        _delete_sr(client)  # when the run failed half-way: while the operator still runs its finalizer
        stop(op, 30)
        log.close()
    return size


def _delete_sr(client: Client) -> None:
    """Delete the SpecialResource (if there) and wait until it and its pods are gone."""

    def gone() -> bool:
        try:
            client.get(SpecialResource, SR)
        except ApiError as e:
            if e.status.code != 404:
                raise
            return not list(client.list(Pod, namespace=NAMESPACE, labels={SPECIALRESOURCE_LABEL: SR}))
        return False

    if gone():
        return
    try:
        client.delete(SpecialResource, SR)
    except ApiError as e:
        if e.status.code != 404:
            raise
    poll("the SpecialResource and its pods gone", gone, 1800, 2)


def _measure(client: Client, cluster: Any, n: int, image: str, workdir: Path) -> Size:
    from sro.local import supervisor

    api = supervisor.running(cluster.layout, "kube-apiserver")
    if api is None:
        raise RuntimeError("kube-apiserver is not running")
    _progress(f"{n} simulated nodes: starting the simulator")
    sim = Simulated(n, cluster.kubeconfig, workdir)
    try:
        sim_cpu0 = _cpu_seconds(sim.proc.pid)
        meter = lambda: CpuMeter(cluster.layout, simulator=sim.proc.pid)  # noqa: E731
        # sro first: the baselines run the pods it ran (_stage_pods)
        _progress(f"{n} nodes Ready; the operator")
        size = _operator_run(client, cluster, n, image, workdir, meter)
        _progress(f"{n} nodes: sro {size.validated:.1f} s, {_describe_cpu(size.cpu_sro)}")
        _progress(f"{n} nodes: baseline: {STAGES} plain DaemonSets of sro's pods")
        size.baseline, size.cpu_plain = _baseline(client, n, size.stage_pods, meter)
        _progress(f"{n} nodes: baseline {size.baseline:.1f} s, {_describe_cpu(size.cpu_plain)}")
        _progress(f"{n} nodes: the gated floor ({STAGES} DaemonSets ordered per node by a bare labeller)")
        size.gated, size.cpu_gated = _gated_floor(
            client, n, size.stage_pods, cluster.kubeconfig, workdir, meter
        )
        _progress(f"{n} nodes: gated floor {size.gated:.1f} s, {_describe_cpu(size.cpu_gated)}")
        size.sim_rss = rss_mib(sim.proc.pid)
        size.sim_cpu = _cpu_seconds(sim.proc.pid) - sim_cpu0
    finally:
        _remove_floor(client)  # when the run failed half-way: the simulator finalizes the pods
        sim.stop()
    poll("the simulated nodes gone", lambda: not list(client.list(Node, labels={SIM_LABEL: "true"})), 300, 2)
    return size


def _scale_operator(cluster: Any, replicas: int) -> None:
    cluster.kubectl(
        "-n", NAMESPACE, "scale", "deployment", "sro-operator", f"--replicas={replicas}", check=False
    )


def _remove_leftovers(client: Client) -> None:
    """Simulated nodes of a run that was killed (and the pods bound to them): nobody plays them."""
    left = [n.metadata.name for n in client.list(Node, labels={SIM_LABEL: "true"}) if n.metadata]
    if not left:
        return
    _progress(f"removing {len(left)} simulated nodes left by a run that was killed")
    for name in left:
        client.delete(Node, name)
    names = set(left)
    for pod in client.list(Pod, namespace="*"):
        if pod.spec and pod.spec.nodeName in names and pod.metadata:
            client.delete(Pod, pod.metadata.name, namespace=pod.metadata.namespace, grace_period=0)


def _cpu_table(s: Size) -> str:
    """Each process's CPU seconds in the three phases: where the work of each goes."""
    phases = (
        ("plain", s.cpu_plain, s.baseline),
        ("sro", s.cpu_sro, s.validated),
        ("gated", s.cpu_gated, s.gated),
    )
    names = sorted({k for _, used, _ in phases for k in used}, key=lambda k: -s.cpu_sro.get(k, 0.0))
    lines = [f"scale {s.nodes}: CPU seconds by process (the phase's wall time in brackets)"]
    lines.append(f"  {'process':<24}" + "".join(f"{p} [{t:.0f} s]".rjust(18) for p, _, t in phases))
    for name in [*names, "total"]:
        cells = [sum(used.values()) if name == "total" else used.get(name) for _, used, _ in phases]
        lines.append(f"  {name:<24}" + "".join(("-" if c is None else f"{c:.1f}").rjust(18) for c in cells))
    return "\n".join(lines)


def run() -> list[Figure]:
    from benchmarks.bench_operator import _install
    from sro.kube.client import sync_client
    from sro.local.cluster import LocalCluster
    from sro.local.images import ensure_sro_image

    if os.geteuid() != 0:
        raise RuntimeError("the scale benchmark needs root (the local cluster, /proc)")
    # SIGTERM (and SIGINT, ignored in a background job) end the run through its clean-up: the
    # SpecialResource deleted, the simulated nodes gone, the operator and API limits put back
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    cluster = LocalCluster.default()
    cluster.ensure_up(_progress)
    client = sync_client(cluster.kubeconfig)
    _remove_leftovers(client)
    before = cluster.api_limits()
    limits = cluster.set_api_limits(QPS, BURST)
    sizes: list[Size] = []
    try:
        cluster.ensure_up(_progress)  # restarts the controller-manager and scheduler with the limits
        _progress(f"API rate limits: {limits.describe()}")
        image = ensure_sro_image(cluster, _progress)
        _install(cluster.kubeconfig, image)
        _scale_operator(cluster, 0)
        # the operator's, the simulator's and the labeller's logs stay for the run after (where did a
        # relabel's time go?): each run replaces the last one's
        shutil.rmtree(LOGS, ignore_errors=True)
        LOGS.mkdir(parents=True)
        for n in SIZES:
            sizes.append(_measure(client, cluster, n, image, LOGS))
    finally:
        _scale_operator(cluster, 2)
        cluster.set_api_limits(before.qps, before.burst)
        cluster.ensure_up(_progress)
    print(f"API rate limits during the run: {limits.describe()}", flush=True)
    for s in sizes:
        print(_cpu_table(s), flush=True)
    figures = []
    for s in sizes:
        lat = list(s.latencies)
        goal = GOAL if s.nodes >= GOAL_NODES else None
        target = f"<= {GOAL:g}x (one run each)" if goal else ""
        floor = s.gated / s.baseline if s.baseline else float("inf")
        why = ""
        if goal is not None and floor > goal:
            why = (
                f"floor: the same {STAGES} DaemonSets ordered per node by a labeller that does nothing else "
                f"take {s.gated:.0f} s = {floor:.2f}x the plain ones ({s.baseline:.0f} s); sro takes "
                f"{s.validated / s.gated:.2f}x that floor"
            )
        figures += [
            Figure(
                f"scale {s.nodes}: apply -> {s.nodes - 1} nodes validated (1 failing)",
                s.validated,
                s.baseline,
                "s",
                f"{STAGES} plain DaemonSets of sro's pods Ready on the same nodes",
                target=target,
                goal=goal,
                why=why,
            ),
            Figure(
                f"scale {s.nodes}: apply -> validated, vs the same order kept by a bare labeller",
                s.validated,
                s.gated,
                "s",
                f"{STAGES} DaemonSets gated per node (benchmarks.gatedlabeller)",
                target=target,
                goal=goal,
            ),
            Figure(
                f"scale {s.nodes}: the gated floor itself, vs the plain DaemonSets",
                s.gated,
                s.baseline,
                "s",
                f"{STAGES} plain DaemonSets of sro's pods Ready on the same nodes",
            ),
            Figure(f"scale {s.nodes}: reconcile passes", s.passes, float(s.nodes), "passes", "nodes"),
            Figure(
                f"scale {s.nodes}: pass time, mean (p99 <= {s.pass_p99:g} s)",
                s.pass_mean,
                s.list_seconds,
                "s",
                "one LIST of all nodes",
            ),
            Figure(
                f"scale {s.nodes}: operator RSS, peak",
                s.rss_peak,
                s.rss_idle,
                "MiB",
                "the operator idle, no SpecialResource",
                "< 150 MiB",
                limit=150.0,
            ),
            Figure(
                f"scale {s.nodes}: operator CPU", s.cpu, s.apiserver_cpu, "s", "kube-apiserver CPU, same time"
            ),
            Figure(
                f"scale {s.nodes}: status size",
                s.status_kib,
                s.names_kib,
                "KiB",
                "a table naming each node once",
                "< 256 KiB",
                limit=256.0,
            ),
            Figure(
                f"scale {s.nodes}: node relabelled -> label taken back, p50",
                percentile(lat, 50),
                s.list_seconds,
                "s",
                "one LIST of all nodes",
            ),
            Figure(
                f"scale {s.nodes}: node relabelled -> label taken back, p99",
                percentile(lat, 99),
                s.list_seconds,
                "s",
                "one LIST of all nodes",
                "< 1 s",
                limit=1.0,
            ),
            Figure(
                f"scale {s.nodes}: operator API requests, apply -> validated",
                s.requests,
                float(s.nodes),
                "requests",
                "nodes (the ratio is requests per node)",
                "flat in N",
            ),
            Figure(
                f"scale {s.nodes}: operator API requests/s, all validated and nothing changing",
                s.idle_rps,
                float(s.nodes),
                "req/s",
                "nodes",
            ),
            Figure(
                f"scale {s.nodes}: simulator RSS (apart)", s.sim_rss, s.rss_peak, "MiB", "the operator's peak"
            ),
            Figure(f"scale {s.nodes}: simulator CPU (apart)", s.sim_cpu, s.cpu, "s", "the operator's CPU"),
        ]
    return figures
