"""The operator benchmark's baseline: the six stages the operator runs pods for on the node, as six
plain DaemonSets created one after another, each waited until its pod on the node is Ready.

Why a separate module: the baseline must stay honest as the states change, so it takes its probes
from the states' own rendered templates (`stage_probe`): the same command, period and timeout, the
ready file made at once by the container instead of by an agent. A state whose probe gets quicker
makes the baseline quicker too, and the ratio shows only what the operator adds (its passes, its
gates, the agents' own start). The validation stages, run-to-completion pods with no probe, take the
device plugin's probe (the stage they follow).
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from lightkube import ApiError, Client, codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret, ServiceAccount

from benchmarks.harness import poll
from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    MONITORING,
    RUNTIME,
)

FLOOR_NS = "sro-bench-floor"
POD_STAGES = (DRIVER, DRIVER_VALIDATION, RUNTIME, DEVICE_PLUGIN, DEVICE_PLUGIN_VALIDATION, MONITORING)
# the component whose DaemonSet's readiness probe each stage's plain DaemonSet copies
PROBE_OF = {
    DRIVER: "driver",
    DRIVER_VALIDATION: "device-plugin",
    RUNTIME: "runtime",
    DEVICE_PLUGIN: "device-plugin",
    DEVICE_PLUGIN_VALIDATION: "device-plugin",
    MONITORING: "monitoring",
}
READY_FILE = "/tmp/ready"  # what the plain container makes at once, where the agent makes its own
POLL = 0.2
# how often a step's end is looked for, on both sides (the operator's node labels, a plain stage's
# pod): the states take ~1 s each, so at POLL one look's granularity was a fifth of a state
STEP_POLL = 0.05
TIMEOUT = 300.0


@dataclass
class FloorRun:
    total: float
    stages: list[float] = field(default_factory=list)
    delete: float = 0.0


@functools.cache
def _state_pod_spec(component: str) -> dict[str, Any]:
    """The pod spec of `component`'s state DaemonSet, rendered for simulated-gpu with stand-in names
    (read only: copy what is changed)."""
    from sro.manifests import render

    docs = render(component, recipe="simulated-gpu", image="x", namespace="x", pull_policy="Never",
                  name=f"sro-bench-{component}", plugin_config_map="sro-bench-device-plugin")  # fmt: skip
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return dict(ds["spec"]["template"]["spec"])


def stage_probe(stage: str) -> dict[str, Any]:
    """The readiness probe of `stage`'s state DaemonSet (simulated-gpu), aimed at READY_FILE."""
    probe = copy.deepcopy(_state_pod_spec(PROBE_OF[stage])["containers"][0]["readinessProbe"])
    command = probe["exec"]["command"]
    if command[:2] != ["sh", "-c"]:
        raise RuntimeError(f"benchmark: {PROBE_OF[stage]}'s probe is no longer a file check: {command}")
    command[-1] = READY_FILE
    return dict(probe)


def _gone(client: Client, res: Any, name: str, namespace: str | None = None) -> bool:
    try:
        client.get(res, name, namespace=namespace) if namespace else client.get(res, name)
    except ApiError as e:
        if e.status.code == 404:
            return True
        raise
    return False


def _poll_until(what: str, check: Callable[[], bool], timeout: float = TIMEOUT) -> float:
    return poll(what, check, timeout, POLL)


def _floor_ds(stage: str, image: str) -> Any:
    name = f"floor-{stage}"
    return codecs.from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": FLOOR_NS, "labels": {"app": name}},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "enableServiceLinks": False,
                        # `sleep` as PID 1 ignores SIGTERM: without this each delete waits 30 s
                        "terminationGracePeriodSeconds": 1,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": "c",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "command": ["sh", "-c", f"touch {READY_FILE} && exec sleep infinity"],
                                "readinessProbe": stage_probe(stage),
                            }
                        ],
                    },
                },
            },
        }
    )


def pod_done(pod: Any, node_name: str) -> bool:
    """Ready (or Succeeded: a validation pod) on the node, and not being deleted."""
    if pod.metadata is None or pod.metadata.deletionTimestamp or pod.status is None:
        return False
    if pod.spec is None or pod.spec.nodeName != node_name:
        return False
    if pod.status.phase == "Succeeded":
        return True
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def ensure_namespace(client: Client) -> None:
    if not _gone(client, Namespace, FLOOR_NS):
        return
    client.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FLOOR_NS}}))
    # pods are refused until the namespace's default ServiceAccount exists
    _poll_until(
        "the floor namespace's default ServiceAccount",
        lambda: not _gone(client, ServiceAccount, "default", FLOOR_NS),
        60,
    )


def _pod_ready_on(client: Client, app: str, node_name: str) -> bool:
    return any(pod_done(p, node_name) for p in client.list(Pod, namespace=FLOOR_NS, labels={"app": app}))


def floor_run(client: Client, image: str, node_name: str) -> FloorRun:
    """One run of the chain; its DaemonSets are deleted (and waited for) before it returns."""
    ensure_namespace(client)
    run = FloorRun(total=0.0)
    t0 = time.monotonic()
    for stage in POD_STAGES:
        t = time.monotonic()
        client.create(_floor_ds(stage, image))
        ready = partial(_pod_ready_on, client, f"floor-{stage}", node_name)
        poll(f"floor DaemonSet {stage} Ready on {node_name}", ready, TIMEOUT, STEP_POLL)
        run.stages.append(time.monotonic() - t)
    run.total = time.monotonic() - t0
    t = time.monotonic()
    for stage in POD_STAGES:
        client.delete(DaemonSet, f"floor-{stage}", namespace=FLOOR_NS)
    _poll_until(
        "the floor's DaemonSets and pods to be gone",
        lambda: not list(client.list(DaemonSet, namespace=FLOOR_NS)) and not list(client.list(Pod, namespace=FLOOR_NS)),
        120,
    )  # fmt: skip
    run.delete = time.monotonic() - t
    return run


def remove_namespace(client: Client) -> None:
    if _gone(client, Namespace, FLOOR_NS):
        return
    client.delete(Namespace, FLOOR_NS)
    _poll_until("the floor namespace to be gone", lambda: _gone(client, Namespace, FLOOR_NS), 180)


# ---- a Kubernetes floor: the first pod on a node to mount a ConfigMap or Secret -------------------
# The kubelet reads a pod's ConfigMaps and Secrets through a watch per object, and the API server's
# node authorizer lets it only once its graph links the node to the object through a pod bound
# there. A pod that is the node's first to mount an object races that graph: a refused first list,
# the kubelet's reflector backing off (~1 s), the volume's mount retried after 0.5 s
# (`no relationship found between node ... and this object`, then `failed to sync configmap cache`
# in its log; kubernetes/kubernetes#133269 is the same race in a 2025 cluster). The states' pods
# are such pods (the driver's and the device plugin's ConfigMaps, the exporter's token Secret), the
# plain stages' are not (they mount their namespace's token, which the earlier stages' pods mount).
# Measured here, in rounds alternating which pod goes first: the same `sleep` pod with a ConfigMap
# that a running pod on the node mounts already, with a ConfigMap made for it, with a Secret made for
# it, each created -> Ready. The race is lost only sometimes (5 of the 15 states' pods of one bench
# run, by the kubelet's log), so the median says what it costs a pod on this machine, not what it
# cost a given run.
OWN_KINDS = ("ConfigMap", "Secret")
STAGE_COMPONENT = {
    DRIVER: "driver",
    RUNTIME: "runtime",
    DEVICE_PLUGIN: "device-plugin",
    MONITORING: "monitoring",
}


@functools.cache
def own_mounts() -> dict[str, tuple[str, ...]]:
    """Per stage, the kinds of object its pod mounts that no earlier stage's pod mounts (rendered
    from the states' templates): a ConfigMap, or its service account's token (a Secret in 1.20)."""
    seen: set[tuple[str, str]] = set()
    out: dict[str, tuple[str, ...]] = {}
    for stage, component in STAGE_COMPONENT.items():
        spec = _state_pod_spec(component)
        volumes = spec.get("volumes") or ()
        mounts = {("ConfigMap", v["configMap"]["name"]) for v in volumes if "configMap" in v}
        mounts |= {("Secret", v["secret"]["secretName"]) for v in volumes if "secret" in v}
        if spec.get("automountServiceAccountToken"):
            mounts.add(("Secret", f"token of {spec.get('serviceAccountName', 'default')}"))
        out[stage] = tuple(sorted({kind for kind, _ in mounts - seen}))
        seen |= mounts
    return out


def _volume_pod(name: str, image: str, node_name: str, kind: str, obj: str) -> Any:
    """A `sleep` pod, scheduled onto the node, that mounts the ConfigMap or Secret `obj`."""
    source = {"configMap": {"name": obj}} if kind == "ConfigMap" else {"secret": {"secretName": obj}}
    return codecs.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": FLOOR_NS},
            "spec": {
                # through the scheduler, as a DaemonSet's pod: the kubelet hears of the binding as the
                # authorizer's graph does (a pod made with its nodeName set races it less)
                "nodeSelector": {"kubernetes.io/hostname": node_name},
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "terminationGracePeriodSeconds": 1,
                "tolerations": [{"operator": "Exists"}],
                "volumes": [{"name": "v", **source}],
                "containers": [
                    {"name": "c", "image": image, "imagePullPolicy": "Never",
                     "command": ["sh", "-c", "exec sleep infinity"],
                     "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": True}]}
                ],
            },
        }
    )  # fmt: skip


def _object(kind: str, name: str) -> Any:
    meta = ObjectMeta(name=name, namespace=FLOOR_NS)
    return (
        ConfigMap(metadata=meta, data={"k": "v"})
        if kind == "ConfigMap"
        else Secret(metadata=meta, stringData={"k": "v"})
    )


def _ready_in(client: Client, image: str, node_name: str, name: str, kind: str, obj: str) -> float:
    """Seconds from creating the pod to its Ready."""
    t = time.monotonic()
    client.create(_volume_pod(name, image, node_name, kind, obj))

    def ready() -> bool:
        return pod_done(client.get(Pod, name, namespace=FLOOR_NS), node_name)

    poll(f"pod {name} Ready", ready, 60, 0.05)
    return time.monotonic() - t


def own_object_floor(client: Client, image: str, node_name: str, rounds: int) -> dict[str, list[float]]:
    """Seconds created -> Ready of the same pod mounting a ConfigMap that a running pod on the node
    already mounts ("": as a plain stage's pod mounts the namespace's shared token), and mounting an
    object of each OWN_KINDS made for it; `rounds` of each, the order rotating per round."""
    ensure_namespace(client)
    out: dict[str, list[float]] = {k: [] for k in ("", *OWN_KINDS)}
    stamp = int(time.time())
    shared, holder = f"floor-own-shared-{stamp}", "floor-own-holder"
    client.create(_object("ConfigMap", shared))
    _ready_in(client, image, node_name, holder, "ConfigMap", shared)
    try:
        for n in range(rounds):
            kinds = ("", *OWN_KINDS)
            for kind in kinds[n % 3 :] + kinds[: n % 3]:
                obj = f"floor-own-{kind.lower()}-{stamp}-{n}" if kind else shared
                if kind:
                    client.create(_object(kind, obj))
                name = f"floor-own-{kind.lower() or 'shared'}-{n}"
                out[kind].append(_ready_in(client, image, node_name, name, kind or "ConfigMap", obj))
                client.delete(Pod, name, namespace=FLOOR_NS)
                _poll_until(f"pod {name} gone", partial(_gone, client, Pod, name, FLOOR_NS), 60)
                if kind:
                    client.delete(ConfigMap if kind == "ConfigMap" else Secret, obj, namespace=FLOOR_NS)
    finally:
        client.delete(Pod, holder, namespace=FLOOR_NS)
    return out
