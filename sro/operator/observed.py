"""What the operator sees of the cluster, as plain frozen records: the input of the pure reconcile.

Why records and not API objects: the reconcile must be unit-testable over recorded cluster states
(multi-node, multi-kernel, a failing node, a node that leaves), so `sro/kube/` turns API objects into
these few fields and tests write them by hand. `from_*` builders take the JSON of the API objects
(dicts) so recorded states can also be plain `kubectl get -o json` output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sro.api.names import DRIVER_REVISION_LABEL, REPORT_CONTAINER, STATE_LABEL
from sro.devices.faultclasses import CONDITION as GPU_CONDITION
from sro.devices.healthreport import HealthReport


@dataclass(frozen=True)
class QuotaInfo:
    """A ResourceQuota the operator made, as the API server reports it."""

    namespace: str
    name: str
    hard: Mapping[str, str] = field(default_factory=dict)
    used: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeInfo:
    """A Node as the operator's reconcile and its NodeFeatureRule step read it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    capacity: Mapping[str, str] = field(default_factory=dict)  # status.capacity (extended resources)
    # status.allocatable: what the scheduler places against (a device plugin's healthy devices)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""
    uid: str = ""
    unschedulable: bool = False  # cordoned
    ready: bool = True  # its Ready condition is True (or not reported at all)
    runtime: str = ""  # status.nodeInfo.containerRuntimeVersion, e.g. "containerd://1.7.24"
    boot_id: str = ""  # status.nodeInfo.bootID: a reboot changes it (remediation's reboot step)
    gpu_condition: Mapping[str, Any] | None = None  # its GpuHealthy condition (remediation), if any


@dataclass(frozen=True)
class WorkloadPod:
    """Any pod on a node whose driver is being upgraded: what eviction and waiting need to know."""

    namespace: str
    name: str
    node: str
    labels: Mapping[str, str] = field(default_factory=dict)
    phase: str = "Running"
    resources: frozenset[str] = frozenset()  # what its containers request or limit (cpu, sro.dev/...)
    controller: str = ""  # kind of the controlling owner ("" when none recreates the pod)
    empty_dir: bool = False
    mirror: bool = False  # a static pod's mirror: eviction cannot remove it
    deleting: bool = False
    uid: str = ""  # the holder scan names a process's pod by it
    stopped: bool = False  # every container terminated (a deleted pod's object stays a while longer)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        """Nothing of it runs any more: a terminal phase, or deleted with every container stopped.
        Why the second: the object of a deleted pod stays until the kubelet has torn down its
        sandbox and volumes (seconds), while its processes, and so its hold on a device, are gone
        with its containers; waiting for the object would add that time to every drain."""
        return self.phase in ("Succeeded", "Failed") or (self.deleting and self.stopped)


@dataclass(frozen=True)
class PodInfo:
    """A pod of one of our states (labelled with the SpecialResource and the state)."""

    name: str
    node: str
    state: str
    uid: str = ""
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed
    ready: bool = False
    reason: str = ""  # why it is not ready: a container's waiting/terminated reason, or the scheduler's
    message: str = ""
    restarts: int = 0
    annotations: Mapping[str, str] = field(default_factory=dict)
    finished_at: datetime | None = None
    deleting: bool = False
    log: str = ""  # tail of the log, filled only for failing pods
    revision: str = ""  # driver pods: the driver revision they run
    verdict: str = ""  # a container that exited 0: its termination message (a validation's verdict)
    report: str = ""  # the `report` container's last termination message (sro.api.names.REPORT_CONTAINER)
    # the newest start of its containers while every one runs; None while one does not (or none
    # reported): a device plugin's health report older than this is its predecessor's
    running_since: datetime | None = None


@dataclass(frozen=True)
class SpecialResourceInfo:
    name: str
    uid: str
    spec: Mapping[str, Any]
    generation: int = 1
    created: str = ""  # RFC 3339; the older of two SpecialResources claiming one resource wins
    status: Mapping[str, Any] = field(default_factory=dict)
    deleting: bool = False

    @property
    def recipe(self) -> str:
        """The recipe its spec names, read without parsing the rest of the spec: another
        SpecialResource's claim on a resource counts even while its own spec does not parse."""
        return str(self.spec.get("recipe", ""))


@dataclass(frozen=True)
class Observed:
    """Everything one reconcile of one SpecialResource reads."""

    sr: SpecialResourceInfo
    nodes: tuple[NodeInfo, ...]
    pods: tuple[PodInfo, ...] = ()
    others: tuple[SpecialResourceInfo, ...] = ()  # the other SpecialResources (resource conflicts)
    owned: tuple[tuple[str, str], ...] = ()  # (kind, name) of objects that carry our label now
    custom_manifests: Mapping[str, str] | None = None  # the ConfigMap's data, None if none asked/found
    custom_recipe: Mapping[str, Any] | None = None  # recipe.yaml of spec.recipeConfigMap, parsed
    # recipe.yaml of the other SpecialResources' recipeConfigMaps, parsed, by ConfigMap name
    other_recipes: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    image: str = ""  # the operator's own image: the default of every state
    namespaces: tuple[str, ...] = ()  # every namespace (quotas are made only where one exists)
    quotas: tuple[QuotaInfo, ...] = ()  # our ResourceQuotas, with their used / hard
    owned_elsewhere: tuple[tuple[str, str, str], ...] = ()  # (kind, namespace or "", name): partitioning
    prometheus_operator: bool = False  # monitoring.coreos.com's ServiceMonitor CRD exists
    openshift: bool = False  # the config.openshift.io group is served (sro.api.openshift)
    revisions: Mapping[tuple[str, str], str] = field(
        default_factory=dict
    )  # owned (kind, name) -> driver revision
    workloads: tuple[WorkloadPod, ...] = ()  # every pod on the nodes listed in workload_nodes
    workload_nodes: tuple[str, ...] = ()  # nodes whose pods were read (those in an upgrade's eviction steps)
    # node -> recipe -> its device plugin's health report, decoded from the node's NodeFeature
    # (sro.devices.healthreport; read only for a SpecialResource with spec.remediation)
    health: Mapping[str, Mapping[str, HealthReport]] = field(default_factory=dict)
    # node -> the API server's refusal of this SpecialResource's last patch of it (a 4xx no retry
    # mends), as the previous pass met it: shown as Degraded until a patch goes through
    refused_patches: Mapping[str, str] = field(default_factory=dict)


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def node_ready(doc: Mapping[str, Any]) -> bool:
    """False only when the Node's Ready condition says so (False, or Unknown: its kubelet is silent)."""
    conditions = (doc.get("status") or {}).get("conditions") or ()
    return all(c.get("status") == "True" for c in conditions if c.get("type") == "Ready")


def node_from_json(doc: Mapping[str, Any]) -> NodeInfo:
    md, spec, status = doc.get("metadata") or {}, doc.get("spec") or {}, doc.get("status") or {}
    return NodeInfo(
        name=md.get("name", ""),
        labels=dict(md.get("labels") or {}),
        annotations=dict(md.get("annotations") or {}),
        taints=tuple(dict(t) for t in spec.get("taints") or ()),
        capacity={k: str(v) for k, v in (status.get("capacity") or {}).items()},
        allocatable={k: str(v) for k, v in (status.get("allocatable") or {}).items()},
        resource_version=md.get("resourceVersion") or "",
        uid=md.get("uid", ""),
        unschedulable=bool(spec.get("unschedulable")),
        ready=node_ready(doc),
        runtime=str((status.get("nodeInfo") or {}).get("containerRuntimeVersion", "")),
        boot_id=str((status.get("nodeInfo") or {}).get("bootID", "")),
        gpu_condition=next(
            (dict(c) for c in status.get("conditions") or () if c.get("type") == GPU_CONDITION), None
        ),
    )


def _not_ready_reason(status: Mapping[str, Any]) -> tuple[str, str, int, datetime | None]:
    """(reason, message, restarts, finished_at) from a pod's status, the most telling first."""
    reason, message, restarts, finished = "", "", 0, None
    for cs in (*status.get("initContainerStatuses", ()), *_working(status)):
        restarts += int(cs.get("restartCount", 0))
        state = cs.get("state", {})
        for key in ("waiting", "terminated"):
            if key in state and not reason:
                detail = state[key]
                if key == "terminated" and detail.get("exitCode", 0) == 0:
                    finished = finished or _time(detail.get("finishedAt"))
                    continue
                reason = detail.get("reason", "") or ("Error" if key == "terminated" else "")
                message = detail.get("message", "") or (
                    f"exit code {detail['exitCode']}" if "exitCode" in detail else ""
                )
                finished = _time(detail.get("finishedAt")) or finished
    if not reason:
        for cond in status.get("conditions", ()):
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reason, message = cond.get("reason", "Unschedulable"), cond.get("message", "")
    return reason, message, restarts, finished


def _working(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The container statuses but the report container's (it comes and goes by design)."""
    return [cs for cs in status.get("containerStatuses", ()) if cs.get("name") != REPORT_CONTAINER]


def _ready(status: Mapping[str, Any]) -> bool:
    """The pod's Ready condition; a pod with a report container is ready when the others are."""
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", ())):
        return True
    every = status.get("containerStatuses") or ()
    working = _working(status)
    return (
        len(working) < len(every)
        and status.get("phase") == "Running"
        and bool(working)
        and all(cs.get("ready") for cs in working)
    )


def _report(status: Mapping[str, Any]) -> str:
    """The report container's newest termination message (running again: its last state's)."""
    for cs in status.get("containerStatuses", ()):
        if cs.get("name") == REPORT_CONTAINER:
            done = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
            return str((done or {}).get("message") or "").strip()
    return ""


def _running_since(status: Mapping[str, Any]) -> datetime | None:
    """When the last of its working containers (re)started, if all of them run now."""
    starts = []
    for cs in _working(status):
        running = (cs.get("state") or {}).get("running")
        started = _time((running or {}).get("startedAt"))
        if started is None:
            return None
        starts.append(started)
    return max(starts, default=None)


def _verdict(status: Mapping[str, Any]) -> str:
    """The termination message of the first container that finished with exit code 0."""
    for cs in _working(status):
        done = (cs.get("state") or {}).get("terminated") or {}
        if done and done.get("exitCode", 0) == 0 and done.get("message"):
            return str(done["message"])
    return ""


def pod_from_json(doc: Mapping[str, Any], log: str = "") -> PodInfo:
    md, spec, status = doc.get("metadata", {}), doc.get("spec", {}), doc.get("status", {})
    labels = md.get("labels") or {}
    ready = _ready(status)
    reason, message, restarts, finished = _not_ready_reason(status)
    node = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname", "")
    return PodInfo(
        name=md["name"],
        node=node,
        state=labels.get(STATE_LABEL, ""),
        uid=md.get("uid", ""),
        phase=status.get("phase", "Pending"),
        ready=ready,
        reason=reason or status.get("reason", ""),
        message=message or status.get("message", ""),
        restarts=restarts,
        annotations=dict(md.get("annotations") or {}),
        finished_at=finished,
        deleting=bool(md.get("deletionTimestamp")),
        log=log,
        revision=labels.get(DRIVER_REVISION_LABEL, ""),
        verdict=_verdict(status),
        report=_report(status),
        running_since=_running_since(status),
    )


def workload_from_json(doc: Mapping[str, Any]) -> WorkloadPod:
    """A pod on a node whose driver is being upgraded."""
    md, spec, status = doc.get("metadata", {}), doc.get("spec", {}), doc.get("status", {})
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    owner = next((o for o in md.get("ownerReferences") or () if o.get("controller")), None)
    return WorkloadPod(
        namespace=md.get("namespace", ""),
        name=md["name"],
        node=spec.get("nodeName", ""),
        labels=dict(md.get("labels") or {}),
        phase=status.get("phase", "Pending"),
        resources=frozenset(
            name
            for c in containers
            for kind in ("requests", "limits")
            for name in ((c.get("resources") or {}).get(kind) or {})
        ),
        controller=str(owner.get("kind", "")) if owner else "",
        empty_dir=any("emptyDir" in v for v in spec.get("volumes") or ()),
        mirror="kubernetes.io/config.mirror" in (md.get("annotations") or {}),
        deleting=bool(md.get("deletionTimestamp")),
        uid=str(md.get("uid", "")),
        stopped=_all_stopped(status),
    )


def _all_stopped(status: Mapping[str, Any]) -> bool:
    """Every container (init containers too) reported terminated, and at least one reported."""
    statuses = [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]
    return bool(statuses) and all((cs.get("state") or {}).get("terminated") is not None for cs in statuses)


def sr_from_json(doc: Mapping[str, Any]) -> SpecialResourceInfo:
    md = doc.get("metadata", {})
    return SpecialResourceInfo(
        name=md["name"],
        uid=md.get("uid", ""),
        spec=doc.get("spec") or {},
        generation=int(md.get("generation", 1)),
        created=md.get("creationTimestamp", ""),
        status=doc.get("status") or {},
        deleting=bool(md.get("deletionTimestamp")),
    )
