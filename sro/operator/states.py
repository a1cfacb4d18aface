"""The ordered states as typed objects: what each deploys, and when it is ready on a node.

Why objects in one tuple: the order and the rules are data. Each state says whether it is enabled
for a spec, renders its cluster objects (DaemonSets gated on the previous state's node label), and
judges its readiness on one node from the pods it sees; the reconcile is a fold over `STATES`.
Three kinds:
  * DaemonSet states (driver, runtime, device-plugin): ready on a node when their pod there is Ready.
  * Validation states (driver-validation, device-plugin-validation): a run-to-completion pod per
    node, named for the node and stamped with a hash of its inputs — the spec and the uids of the
    earlier states' pods on that node — so a restarted driver pod makes the validation stale and
    run again; Succeeded is ready, Failed is a failure with its log, retried after a pause.
  * Label states (feature-discovery): ready when discovery has published the recipe's device count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_REVISION_LABEL,
    DRIVER_VALIDATION,
    FEATURE_DISCOVERY,
    MONITORING,
    NFD_PREFIX,
    RUNTIME,
    RUNTIME_CLASS,
    driver_revision_label,
)
from sro.api.openshift import CRIO_HOOKS_DIR
from sro.api.recipes import SIMULATED_PERSONALITIES
from sro.operator.cdiruntime import cdi_nodes
from sro.operator.observed import NodeInfo, PodInfo
from sro.operator.rendering import (
    Context,
    Term,
    decorate,
    hash_prefix,
    render_state,
    short_hash,
    short_hash_after,
    slug,
)
from sro.operator.upgrade.revision import driver_revision

KERNEL_LABEL = NFD_PREFIX + "kernel-version.full"
OS_ID_LABEL = NFD_PREFIX + "system-os_release.ID"
OS_VERSION_LABEL = NFD_PREFIX + "system-os_release.VERSION_ID"
OS_MAJOR_LABEL = NFD_PREFIX + "system-os_release.VERSION_ID.major"
VALIDATION_RETRY = timedelta(seconds=30)  # a failed validation runs again after this pause
INPUTS_ANNOTATION = "sro.dev/inputs"
# Waiting reasons that will not fix themselves: shown as a failure, not as progress.
HARD_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str = ""
    message: str = ""
    log: str = ""
    failed: bool = False  # a failure, not progress


def _pods_on(pods: Sequence[PodInfo], node: str, state: str) -> list[PodInfo]:
    return [p for p in pods if p.node == node and p.state == state and not p.deleting]


class State:
    """Base: a state that deploys nothing and is always ready (subclasses override)."""

    name: str = ""
    component: str | None = None

    def enabled(self, ctx: Context) -> bool:
        return ctx.spec.state(self.name).enabled

    def render(self, ctx: Context, nodes: Sequence[NodeInfo], gate: Sequence[Term]) -> list[dict[str, Any]]:
        return []

    def readiness(self, ctx: Context, node: NodeInfo, pods: Sequence[PodInfo], now: datetime) -> Readiness:
        return Readiness(True)


class DaemonSetState(State):
    def __init__(self, name: str, component: str) -> None:
        self.name, self.component = name, component

    def values(self, ctx: Context) -> dict[str, Any]:
        return {}

    def render(self, ctx: Context, nodes: Sequence[NodeInfo], gate: Sequence[Term]) -> list[dict[str, Any]]:
        assert self.component is not None
        docs = render_state(
            ctx, self.name, self.component, name=ctx.object_name(self.name), **self.values(ctx)
        )
        return [decorate(d, ctx, self.name, gate) for d in docs]

    def readiness(self, ctx: Context, node: NodeInfo, pods: Sequence[PodInfo], now: datetime) -> Readiness:
        mine = _pods_on(pods, node.name, self.name)
        if any(p.ready for p in mine):
            return Readiness(True)
        if not mine:
            return Readiness(False, "Pending", "waiting for the DaemonSet's pod on this node")
        pod = max(mine, key=lambda p: p.restarts)
        failed = pod.reason in HARD_REASONS or pod.restarts >= 3 or pod.phase == "Failed"
        reason = pod.reason or ("ContainerNotReady" if pod.phase == "Running" else pod.phase)
        message = pod.message or f"pod {pod.name} is {pod.phase}, not Ready"
        return Readiness(False, reason, message, pod.log, failed)


def _management_values(ctx: Context) -> dict[str, Any]:
    """On sro's simulated driver NVML lists only the GPUs whose /dev/nvidia<minor> the container has,
    so the device plugin and the exporter run with the `sro` runtime class, whose hook gives them
    every device (SRO_MANAGEMENT_DEVICES=all, honoured in the operator's namespace). A real driver
    keeps its nodes as before (NVIDIA's runtime, where it is the default, does the same)."""
    return {"runtime_class": RUNTIME_CLASS} if ctx.simulated_driver else {}


class DevicePluginState(DaemonSetState):
    def values(self, ctx: Context) -> dict[str, Any]:
        return {"plugin_config": ctx.spec.device_plugin_config or "version: v1", **_management_values(ctx)}

    def render(self, ctx: Context, nodes: Sequence[NodeInfo], gate: Sequence[Term]) -> list[dict[str, Any]]:
        """One DaemonSet for every node; its ConfigMap lists the nodes whose runtime reads CDI
        (`cdiruntime`): their plugins name CDI devices unless the config names a strategy."""
        assert self.component is not None
        values = {**self.values(ctx), "cdi_nodes": cdi_nodes(nodes)}
        docs = render_state(ctx, self.name, self.component, name=ctx.object_name(self.name), **values)
        return [decorate(d, ctx, self.name, gate) for d in docs]

    def readiness(self, ctx: Context, node: NodeInfo, pods: Sequence[PodInfo], now: datetime) -> Readiness:
        """Ready as any DaemonSet state; for a custom recipe also once the node announces one of
        its resources (with pools, a device may be under any of them): a plugin that registered
        and found no device is not ready."""
        verdict = super().readiness(ctx, node, pods, now)
        if not verdict.ready or not ctx.spec.recipe_config_map:
            return verdict
        resources = ctx.recipe.announced_resources
        if any(_quantity(node.capacity.get(r, "")) > 0 for r in resources):
            return verdict
        return Readiness(
            False, "NoDevicesAnnounced", f"the node announces none of {', '.join(resources)} yet"
        )


def _quantity(value: str) -> int:
    """An extended resource's count (a plain integer); 0 for anything else."""
    try:
        return int(value)
    except ValueError:
        return 0


class RuntimeState(DaemonSetState):
    def values(self, ctx: Context) -> dict[str, Any]:
        # OpenShift's nodes run CRI-O, which reads OCI hooks from its hooks.d (sro.node.runtime.hostinstall)
        return {"hooks_dir": CRIO_HOOKS_DIR} if ctx.openshift else {}

    def readiness(self, ctx: Context, node: NodeInfo, pods: Sequence[PodInfo], now: datetime) -> Readiness:
        """Ready as any DaemonSet state; the row's note is the pod's latest CDI spec repair (its
        report container's, sro.node.runtime.cdikeeper), e.g. a spec someone edited by hand."""
        verdict = super().readiness(ctx, node, pods, now)
        if not verdict.ready:
            return verdict
        reports = [p.report for p in _pods_on(pods, node.name, self.name) if p.ready and p.report]
        return Readiness(True, message=reports[0][:300]) if reports else verdict


def driver_image(ctx: Context, node: NodeInfo) -> str:
    """The driver image for a node: the template filled from its NFD kernel and OS labels."""
    template = ctx.spec.driver.image_template
    if not template or ctx.simulated_driver:  # the simulated driver runs from the operator's own image
        return ctx.state_image(DRIVER)
    labels = node.labels
    return template.format(
        version=ctx.spec.driver.version,
        kernel=labels.get(KERNEL_LABEL, ""),
        os_id=labels.get(OS_ID_LABEL, ""),
        os_version=labels.get(OS_VERSION_LABEL, ""),
        os_major=labels.get(OS_MAJOR_LABEL, ""),
    )


class DriverState(DaemonSetState):
    """One DaemonSet per kernel version (and driver image) among the selected nodes, `OnDelete`,
    for the driver revision the spec asks for; each is gated on the node label
    `sro.dev/<sr>.driver-revision`, which the upgrade machine (`sro.operator.upgrade.machine`) moves from
    one revision to the next node by node. The DaemonSets of older revisions are kept, unrendered,
    while a node still runs them.

    A node whose kernel discovery has not published yet gets no driver: its row says so.
    """

    def enabled(self, ctx: Context) -> bool:
        return super().enabled(ctx) and ctx.spec.driver.mode != "host"

    def groups(self, ctx: Context, nodes: Sequence[NodeInfo]) -> dict[tuple[str, str], list[NodeInfo]]:
        out: dict[tuple[str, str], list[NodeInfo]] = {}
        for node in nodes:
            kernel = node.labels.get(KERNEL_LABEL)
            if kernel:
                out.setdefault((kernel, driver_image(ctx, node)), []).append(node)
        return out

    def render(self, ctx: Context, nodes: Sequence[NodeInfo], gate: Sequence[Term]) -> list[dict[str, Any]]:
        assert self.component is not None
        objs: list[dict[str, Any]] = []
        revision = driver_revision(ctx)
        for (kernel, image), _ in sorted(self.groups(ctx, nodes).items()):
            digest = short_hash(kernel, image, revision, length=5)
            name = ctx.object_name(self.name, f"{slug(kernel, 20)}-{digest}")
            values: dict[str, Any] = {
                "name": name,
                "driver_image": image,
                "driver_mode": ctx.spec.driver.mode,
                "driver_version": ctx.spec.driver.version,
            }
            if ctx.spec.driver.devices_config:
                values["devices_config"] = ctx.spec.driver.devices_config
            if ctx.simulated_driver:  # the template's simulated branch, with the recipe's personality
                values["simulated"] = True
                values["personality"] = SIMULATED_PERSONALITIES[ctx.recipe.name]
            docs = render_state(ctx, self.name, self.component, **values)
            terms = [{**term, KERNEL_LABEL: kernel, driver_revision_label(ctx.sr): revision} for term in gate]
            for d in docs:
                obj = decorate(d, ctx, self.name, terms)
                obj["metadata"]["labels"].update(
                    {"sro.dev/kernel": slug(kernel, 63), DRIVER_REVISION_LABEL: revision}
                )
                if obj["kind"] == "DaemonSet":
                    obj["spec"]["template"]["metadata"]["labels"][DRIVER_REVISION_LABEL] = revision
                objs.append(obj)
        return objs

    def readiness(self, ctx: Context, node: NodeInfo, pods: Sequence[PodInfo], now: datetime) -> Readiness:
        if KERNEL_LABEL not in node.labels:
            return Readiness(
                False,
                "NoKernelLabel",
                f"waiting for discovery to publish {KERNEL_LABEL} (is sro-discovery running on the node?)",
            )
        # only the pods of the revision the node is on count (the old one may still be stopping)
        revision = node.labels.get(driver_revision_label(ctx.sr), "")
        return super().readiness(ctx, node, [p for p in pods if p.revision == revision], now)


def skipped_note(ctx: Context, verdict: str) -> str:
    """What a passed validation skipped (its termination message's `SKIP <check>: <why>` lines),
    for the node's status row: on hardware, or on the simulated driver standing in for it, a check
    not made is worth knowing (no CUDA on a simulated driver; no CUDA sample in the image). The
    simulated recipe's skips are its nature, and its rows stay as they were."""
    if ctx.recipe.simulated:
        return ""
    skipped = [
        line.removeprefix("SKIP ").strip() for line in verdict.splitlines() if line.startswith("SKIP ")
    ]
    return "; ".join(skipped)[:300]


def validation_resource(announced: Sequence[str], capacity: Mapping[str, str]) -> str:
    """The resource the workload validation asks one device of: the first announced resource the
    node has devices of (a node may have VFs of one pool only), else the first."""
    return next((r for r in announced if capacity.get(r, "0") not in ("", "0")), announced[0])


# (node, pod name) stand-ins for a validation pod's template: within a pair neither contains the
# other; the two pairs differ in length and in their first and last characters (so a slice of a
# name, its length or its case tells them apart), and no template or spec writes the first by itself
_STAND_IN = (
    ("sro-stand-in-node-a", "sro-stand-in-pod-a"),
    ("xnode-bb-9", "xpod-bb-9"),
)


def _with_names(doc: Any, names: Mapping[str, str]) -> Any:
    """A copy of the JSON-like `doc` with every occurrence of each key of `names` in its strings
    (keys and values) replaced by its value; anything else is copied as it is."""
    if isinstance(doc, str):
        for old, new in names.items():
            if old in doc:
                doc = doc.replace(old, new)
        return doc
    if isinstance(doc, dict):
        return {_with_names(k, names): _with_names(v, names) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_with_names(v, names) for v in doc]
    return doc


def retry_due(pod: PodInfo) -> datetime | None:
    """When a failed validation pod gives way to a new one: VALIDATION_RETRY after it ended. None
    when it has not failed, or its end is unknown (`needs_new_pod` replaces that one at once)."""
    if pod.phase != "Failed" or pod.finished_at is None:
        return None
    return pod.finished_at + VALIDATION_RETRY


class ValidationState(State):
    """A run-to-completion pod per node; `check` is the `sro validate` subcommand it runs."""

    def __init__(self, name: str, check: str, after: Sequence[str]) -> None:
        self.name, self.component, self.check, self.after = name, "validation", check, tuple(after)

    def pod_name(self, ctx: Context, node: str) -> str:
        return ctx.node_object_name(self.name, node)

    def inputs(self, ctx: Context, node: str, pods: Sequence[PodInfo]) -> str:
        """What the validation depends on: the spec and the pods of the earlier states on the node."""
        uids = sorted(p.uid for s in self.after for p in _pods_on(pods, node, s) if p.ready)
        # = short_hash(check, image, recipe, state spec, cuda sample, uids), the node-independent
        # part's repr made once per pass
        fixed = ctx.memo(("validation inputs", self.name), lambda: hash_prefix(*self._fixed_inputs(ctx)))
        return short_hash_after(fixed, uids, length=12)

    def _fixed_inputs(self, ctx: Context) -> tuple[object, ...]:
        st = ctx.spec.state(self.name)
        return (self.check, ctx.state_image(self.name), ctx.recipe, st, ctx.spec.cuda_sample)

    def pod(
        self, ctx: Context, node: str, inputs: str, capacity: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The node's validation pod. From sro's own templates it is rendered once per pass and
        state with stand-in names, then copied with the node's names put in (`_pod_template`): at
        1,000 nodes a pass that starts 700 validations spent 4-5 s rendering the same template 700
        times. A custom template is rendered for each node: it may branch on the node's name."""
        resource = self._pool_resource(ctx, capacity or {})
        name = self.pod_name(ctx, node)
        template = None
        if not ctx.overrides(self.name):
            template = ctx.memo(
                ("validation pod", self.name, resource), lambda: self._pod_template(ctx, resource)
            )
        if template is None:  # custom, or a template that does more with the names than print them
            obj = self._render_pod(ctx, node, name, resource)
        else:
            obj = _with_names(template, {_STAND_IN[0][0]: node, _STAND_IN[0][1]: name})
        # sro's name, whatever a custom template says: the pod is found by it on the next pass, and
        # a custom name could take another SpecialResource's pod (issue 21 §2)
        obj["metadata"]["name"] = name
        obj["metadata"].setdefault("annotations", {})[INPUTS_ANNOTATION] = inputs
        return obj

    @staticmethod
    def _pool_resource(ctx: Context, capacity: Mapping[str, str]) -> str | None:
        """The pool resource the workload check asks a device of; None: the recipe's own."""
        if ctx.recipe.pools:  # a device in a pool is announced under the pool's resource only
            return validation_resource(ctx.recipe.announced_resources, capacity)
        return None

    def held(self, ctx: Context, node: NodeInfo) -> Readiness | None:
        """Why the node's new validation pod waits (None: it does not). The workload check asks the
        scheduler for one device, which the node offers only once its allocatable shows it: the
        kubelet posts what the device plugin registered at its next status update (up to its status
        period, 10 s by default, after the plugin is ready). A pod created before that is refused and
        tried again only after the scheduler's back-off (1 s, 2 s, ...); the pod waits for the node
        instead, and the node's update wakes the pass that creates it (`nodewatch.reconcile_view`)."""
        if self.check != "workload":
            return None
        resource = self._pool_resource(ctx, node.capacity) or ctx.recipe.resource
        if _quantity(node.allocatable.get(resource, "")) > 0:
            return None
        return Readiness(
            False,
            "WaitingForDevices",
            f"the node has no allocatable {resource} yet: its device plugin has not registered a "
            "healthy device, or the kubelet has not posted it",
        )

    def _render_pod(self, ctx: Context, node: str, name: str, resource: str | None) -> dict[str, Any]:
        values: dict[str, Any] = {"name": name, "node": node, "check": self.check}
        if resource is not None:
            values["validation_resource"] = resource
        if ctx.spec.state(self.name).timeout_seconds:
            values["deadline_seconds"] = ctx.spec.state(self.name).timeout_seconds
        if ctx.spec.cuda_sample:
            values["cuda_sample"] = ctx.spec.cuda_sample
        docs = [d for d in render_state(ctx, self.name, "validation", **values) if d["kind"] == "Pod"]
        if len(docs) != 1:
            raise ValueError(f"state {self.name}: the validation templates must render exactly one Pod")
        return decorate(docs[0], ctx, self.name)

    def _pod_template(self, ctx: Context, resource: str | None) -> dict[str, Any] | None:
        """The pod rendered for a stand-in node, or None where names cannot just be put in: the
        template is rendered for two stand-ins of different lengths, and only when putting the
        second's names into the first gives exactly the second is the first kept. A template that
        slices, hashes or measures the node's name (or the pod's) fails that and is rendered for
        each node, as before (a guard for sro's own templates as they change; a branch on the name
        that neither stand-in takes would pass it, which is why custom templates never come here)."""
        (node_a, name_a), (node_b, name_b) = _STAND_IN
        first = self._render_pod(ctx, node_a, name_a, resource)
        second = self._render_pod(ctx, node_b, name_b, resource)
        return first if _with_names(first, {node_a: node_b, name_a: name_b}) == second else None

    def current(self, ctx: Context, node: str, pods: Sequence[PodInfo]) -> PodInfo | None:
        name = self.pod_name(ctx, node)
        return next((p for p in pods if p.name == name), None)

    def needs_new_pod(self, ctx: Context, node: str, pods: Sequence[PodInfo], now: datetime) -> bool:
        """True when there is no pod for the current inputs, or a failed one whose pause is over."""
        pod = self.current(ctx, node, pods)
        if pod is None:
            return True
        if pod.deleting:
            return False
        if pod.annotations.get(INPUTS_ANNOTATION) != self.inputs(ctx, node, pods):
            return True
        due = retry_due(pod)
        return pod.phase == "Failed" and (due is None or now >= due)

    def readiness(self, ctx: Context, node: NodeInfo, pods: Sequence[PodInfo], now: datetime) -> Readiness:
        pod = self.current(ctx, node.name, pods)
        if pod is None or pod.annotations.get(INPUTS_ANNOTATION) != self.inputs(ctx, node.name, pods):
            return self.held(ctx, node) or Readiness(False, "Validating", "validation pod (re)created")
        if pod.deleting:
            return Readiness(False, "Validating", "validation pod (re)created")
        if pod.phase == "Succeeded":
            return Readiness(True, message=skipped_note(ctx, pod.verdict))
        if pod.phase == "Failed":
            # `sro validate` writes its verdict as the termination message (stderr and stdout may
            # interleave in the log); the log tail goes along for the detail
            first = (pod.message or pod.log.strip() or "validation failed").strip().splitlines()[0]
            return Readiness(False, pod.reason or "ValidationFailed", first[:300], pod.log, failed=True)
        return Readiness(False, pod.reason or "Validating", pod.message or f"pod {pod.name} is {pod.phase}")


class FeatureDiscoveryState(State):
    """Discovery (installed once for the cluster) stays the only publisher of the device labels."""

    name = FEATURE_DISCOVERY

    def readiness(self, ctx: Context, node: NodeInfo, pods: Sequence[PodInfo], now: datetime) -> Readiness:
        value = node.labels.get(ctx.recipe.count_label, "")
        if value and value != "0":
            return Readiness(True)
        return Readiness(
            False,
            "NoDeviceLabels",
            f"waiting for discovery to publish {ctx.recipe.count_label} (is sro-discovery running on the node?)",
        )


class MonitoringState(DaemonSetState):
    """The exporter DaemonSet and its Service; with the Prometheus operator's CRDs present, a
    ServiceMonitor and the PrometheusRule too (plain scrape annotations otherwise); the dashboard."""

    def values(self, ctx: Context) -> dict[str, Any]:
        return {
            "prometheus_operator": ctx.prometheus_operator,
            # the exporter reads the plugin's health policy from the plugin's ConfigMap
            "plugin_config_map": ctx.object_name(DEVICE_PLUGIN),
            **_management_values(ctx),
        }


STATES: tuple[State, ...] = (
    DriverState(DRIVER, "driver"),
    ValidationState(DRIVER_VALIDATION, "driver", after=(DRIVER,)),
    RuntimeState(RUNTIME, "runtime"),
    DevicePluginState(DEVICE_PLUGIN, "device-plugin"),
    ValidationState(DEVICE_PLUGIN_VALIDATION, "workload", after=(DRIVER, RUNTIME, DEVICE_PLUGIN)),
    MonitoringState(MONITORING, "monitoring"),
    FeatureDiscoveryState(),
)
