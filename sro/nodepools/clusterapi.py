"""Cluster API: a GPU MachineDeployment from a worker one, with its own infrastructure machine
template (the instance type lives there) and kubeadm bootstrap template (node labels and taints).

Field names: cluster-api `cluster.x-k8s.io/v1beta1` MachineDeployment (spec.clusterName, replicas,
selector, template.metadata, template.spec.bootstrap.configRef, template.spec.infrastructureRef);
the providers' templates: CAPA `AWSMachineTemplate` (infrastructure.cluster.x-k8s.io/v1beta2,
spec.template.spec.instanceType), CAPG `GCPMachineTemplate` (v1beta1, instanceType,
onHostMaintenance), CAPZ `AzureMachineTemplate` (v1beta1, vmSize); CABPK `KubeadmConfigTemplate`
(bootstrap.cluster.x-k8s.io/v1beta1, spec.template.spec.joinConfiguration.nodeRegistration
{kubeletExtraArgs, taints}).

How labels and taints reach the Node here (unlike OpenShift's nodelink, Cluster API copies little):
- MachineDeployment `spec.template.metadata.labels` go to the Machines, and from a Machine to its Node
  only under `node-role.kubernetes.io/`, `node-restriction.kubernetes.io/` and `node.cluster.x-k8s.io/`
  (Cluster API book, "Metadata propagation"). Every other node label — `cluster-api/accelerator`, which
  the autoscaler's README says to set with the kubelet's `--node-labels` — goes into the kubeadm
  template's `kubeletExtraArgs.node-labels`; the kubelet refuses labels of its own
  `kubernetes.io`/`k8s.io` namespaces there (NodeRestriction), so those are refused up front.
- taints: v1beta1 Machines have none; the kubelet registers the node with
  `joinConfiguration.nodeRegistration.taints` once, and nothing puts them back — which is what the
  operator's startup taint needs (it removes it when the node is validated).
- scale from zero: the autoscaler cannot see a node that does not exist, so the MachineDeployment
  carries `capacity.cluster-autoscaler.kubernetes.io/{cpu,memory,gpu-count,gpu-type,labels,taints}`
  and `cluster.x-k8s.io/cluster-api-autoscaler-node-group-{min,max}-size` (kubernetes/autoscaler
  cluster-autoscaler/cloudprovider/clusterapi/README.md). The startup taint is left out of the
  `taints` one: it is gone once the node is ready, and a template node carrying it would make every
  pending GPU pod look unschedulable on the pool.

Templates are named `<pool>-<hash of their spec>`: providers' webhooks refuse changes to a template's
spec, so a changed pool gets new templates and the MachineDeployment rolls over to them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from sro.nodepools.instancetypes import NVIDIA_GPU_RESOURCE, Provider
from sro.nodepools.pool import (
    Obj,
    Pool,
    dig,
    instance_type,
    merged_taints,
    new_metadata,
    node_labels,
    pool_name,
    spec_copy,
    unique_selector,
)
from sro.nodepools.request import ACCELERATOR_LABEL, NodepoolError, PoolRequest, Taint, startup_taint

API_VERSION: Final = "cluster.x-k8s.io/v1beta1"
DEPLOYMENT_LABEL: Final = "cluster.x-k8s.io/deployment-name"
CLUSTER_LABEL: Final = "cluster.x-k8s.io/cluster-name"
MIN_SIZE: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX_SIZE: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
CAPACITY: Final = "capacity.cluster-autoscaler.kubernetes.io/"
KUBEADM_CONFIG_TEMPLATE: Final = "KubeadmConfigTemplate"
BOOTSTRAP_GROUP: Final = "bootstrap.cluster.x-k8s.io/"

# infrastructureRef.kind -> (provider, the instance type's field in spec.template.spec)
TEMPLATES: Final[Mapping[str, tuple[Provider, str]]] = {
    "AWSMachineTemplate": ("aws", "instanceType"),
    "GCPMachineTemplate": ("gcp", "instanceType"),
    "AzureMachineTemplate": ("azure", "vmSize"),
}
INFRA_REF = "spec.template.spec.infrastructureRef"
BOOTSTRAP_REF = "spec.template.spec.bootstrap.configRef"

# Machine labels Cluster API itself syncs to the Node (metadata propagation).
_SYNCED_PREFIXES: Final = (
    "node-role.kubernetes.io/",
    "node-restriction.kubernetes.io/",
    "node.cluster.x-k8s.io/",
)
_SYNCED_SUFFIXES: Final = (".node-restriction.kubernetes.io", ".node.cluster.x-k8s.io")
# What the kubelet may set under its own namespaces (kubelet's `--node-labels` help).
_KUBELET_ALLOWED: Final = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    }
)
_KUBELET_ALLOWED_PREFIXES: Final = ("kubelet.kubernetes.io/", "node.kubernetes.io/")


def synced_by_cluster_api(key: str) -> bool:
    domain = key.partition("/")[0] if "/" in key else ""
    return key.startswith(_SYNCED_PREFIXES) or domain.endswith(_SYNCED_SUFFIXES)


def kubelet_may_set(key: str) -> bool:
    domain = key.partition("/")[0] if "/" in key else ""
    restricted = domain in ("kubernetes.io", "k8s.io") or domain.endswith((".kubernetes.io", ".k8s.io"))
    return not restricted or key in _KUBELET_ALLOWED or key.startswith(_KUBELET_ALLOWED_PREFIXES)


def refs(md: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any] | None]:
    """The MachineDeployment's infrastructure and bootstrap template references."""
    infra = dig(md, INFRA_REF)
    if not isinstance(infra, Mapping) or not infra.get("kind") or not infra.get("name"):
        raise NodepoolError(INFRA_REF, "the MachineDeployment names no infrastructure machine template")
    if infra["kind"] not in TEMPLATES:
        raise NodepoolError(
            f"{INFRA_REF}.kind",
            f"unknown provider {infra['kind']!r}; sro knows {', '.join(TEMPLATES)} (AWS, GCP, Azure)",
        )
    bootstrap = dig(md, BOOTSTRAP_REF)
    return infra, bootstrap if isinstance(bootstrap, Mapping) else None


def generate(
    md: Mapping[str, Any],
    infra: Mapping[str, Any] | None,
    bootstrap: Mapping[str, Any] | None,
    req: PoolRequest,
) -> Pool:
    if md.get("apiVersion") != API_VERSION:
        raise NodepoolError(
            "apiVersion", f"{md.get('apiVersion')!r}: sro reads MachineDeployments of {API_VERSION}"
        )
    source = str(dig(md, "metadata.name") or "")
    infra_ref, bootstrap_ref = refs(md)
    provider, field = TEMPLATES[infra_ref["kind"]]
    what = f"{infra_ref['kind']} {infra_ref['name']}"
    if infra is None:
        raise NodepoolError(INFRA_REF, f"{what} not found: it is the machine the pool copies")
    if not dig(infra, f"spec.template.spec.{field}"):
        raise NodepoolError(f"{what}: spec.template.spec.{field}", f"the template has no {field} to replace")
    it = instance_type(provider, req)
    name = pool_name(source, req)
    labels = node_labels(name, it, req)
    for key in labels:
        if not synced_by_cluster_api(key) and not kubelet_may_set(key):
            raise NodepoolError(
                "--label",
                f"{key}: Cluster API does not copy it to the Node and the kubelet may not set labels of "
                f"the kubernetes.io/k8s.io namespaces (use node-role.kubernetes.io/, "
                f"node-restriction.kubernetes.io/ or node.cluster.x-k8s.io/ keys, or another domain)",
            )
    kubelet_labels = {k: v for k, v in labels.items() if not synced_by_cluster_api(k)}
    taints = list(req.taints) + ([startup_taint(req.special_resource)] if req.special_resource else [])
    kubeadm = _kubeadm_template(bootstrap_ref, bootstrap)
    new_infra = _infra_template(infra, name, field, it.name, provider)
    new_bootstrap = _bootstrap_template(kubeadm, name, kubelet_labels, taints)
    # What a node of the pool will carry, for the autoscaler's template node: the kubelet's labels
    # and taints (the source template's too), the synced Machine labels, less the startup taint.
    registration = new_bootstrap["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]
    node_labels_final = {
        **_registration_labels(registration),
        **{k: v for k, v in labels.items() if synced_by_cluster_api(k)},
    }
    startup_key = startup_taint(req.special_resource).key if req.special_resource else None
    node_taints = tuple(
        Taint(t["key"], t.get("value", ""), t["effect"])
        for t in registration.get("taints") or ()
        if t["key"] != startup_key
    )

    spec = spec_copy(md)
    spec["replicas"] = req.replicas
    unique_selector(spec, ("template", "metadata", "labels"), (CLUSTER_LABEL,), DEPLOYMENT_LABEL, name)
    spec["template"]["metadata"]["labels"].update(labels)
    tspec = spec["template"]["spec"]
    tspec["infrastructureRef"] = {**tspec["infrastructureRef"], "name": new_infra["metadata"]["name"]}
    tspec["bootstrap"]["configRef"] = {
        **tspec["bootstrap"]["configRef"],
        "name": new_bootstrap["metadata"]["name"],
    }

    metadata = new_metadata(md, name)
    annotations = dict(metadata.get("annotations") or {})
    if req.min_replicas is not None and req.max_replicas is not None:
        annotations[MIN_SIZE] = str(req.min_replicas)
        annotations[MAX_SIZE] = str(req.max_replicas)
    annotations.update(_capacity(it.vcpus, it.memory_mib, it.gpus, node_labels_final, node_taints))
    metadata["annotations"] = annotations
    deployment: Obj = {
        "apiVersion": API_VERSION,
        "kind": "MachineDeployment",
        "metadata": metadata,
        "spec": spec,
    }

    return Pool(
        name,
        provider,
        it,
        labels[ACCELERATOR_LABEL],
        (new_infra, new_bootstrap, deployment),
        _notes(req, it.gpus, labels[ACCELERATOR_LABEL]),
    )


def _kubeadm_template(ref: Mapping[str, Any] | None, template: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The source's KubeadmConfigTemplate, the one bootstrap sro knows how to give labels and taints."""
    if (
        ref is None
        or ref.get("kind") != KUBEADM_CONFIG_TEMPLATE
        or not str(ref.get("apiVersion", "")).startswith(BOOTSTRAP_GROUP)
    ):
        raise NodepoolError(
            BOOTSTRAP_REF,
            "node labels (cluster-api/accelerator, sro.dev/nodepool) and taints reach a Cluster API node "
            "through the kubelet's registration, which sro sets in a KubeadmConfigTemplate; this "
            f"MachineDeployment's bootstrap is {dict(ref) if ref else 'not a config template'}",
        )
    if template is None:
        raise NodepoolError(
            BOOTSTRAP_REF, f"{KUBEADM_CONFIG_TEMPLATE} {ref.get('name')} not found: the pool copies it"
        )
    return template


def _notes(req: PoolRequest, gpus: int, gpu_type: str) -> tuple[str, ...]:
    """What the autoscaler's own Deployment needs (Cluster API has no ClusterAutoscaler object)."""
    if req.min_replicas is None or req.max_replicas is None:
        return ()
    notes = []
    if req.special_resource:
        notes.append(
            f"cluster autoscaler: start it with --startup-taint={startup_taint(req.special_resource).key} so "
            f"a new node that is still being validated counts as starting, not as a node the pending GPU "
            f"pods cannot use (which would scale the pool up again)"
        )
    notes.append(
        f"cluster autoscaler: --gpu-total={gpu_type}:{req.min_replicas * gpus}:{req.max_replicas * gpus} "
        f"limits this GPU type cluster-wide (Cluster API has no ClusterAutoscaler object: it is a flag "
        f"of its Deployment)"
    )
    return tuple(notes)


def _capacity(
    vcpus: int, memory_mib: int, gpus: int, labels: Mapping[str, str], taints: tuple[Taint, ...]
) -> dict[str, str]:
    out = {
        f"{CAPACITY}cpu": str(vcpus),
        f"{CAPACITY}memory": f"{memory_mib}Mi",
        f"{CAPACITY}gpu-count": str(gpus),
        f"{CAPACITY}gpu-type": NVIDIA_GPU_RESOURCE,
        f"{CAPACITY}labels": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
    }
    if taints:
        out[f"{CAPACITY}taints"] = ",".join(str(t) for t in taints)
    return out


def _hashed(name: str, spec: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    return f"{name[: 63 - 9]}-{digest}"


def _infra_template(infra: Mapping[str, Any], name: str, field: str, value: str, provider: Provider) -> Obj:
    spec = spec_copy(infra)
    machine = spec.setdefault("template", {}).setdefault("spec", {})
    machine[field] = value
    if provider == "gcp":
        machine["onHostMaintenance"] = "Terminate"  # GPU VMs cannot live-migrate
    return {
        "apiVersion": infra["apiVersion"],
        "kind": infra["kind"],
        "metadata": new_metadata(infra, _hashed(name, spec)),
        "spec": spec,
    }


def _bootstrap_template(
    bootstrap: Mapping[str, Any], name: str, labels: Mapping[str, str], taints: list[Taint]
) -> Obj:
    spec = spec_copy(bootstrap)
    registration = (
        spec.setdefault("template", {})
        .setdefault("spec", {})
        .setdefault("joinConfiguration", {})
        .setdefault("nodeRegistration", {})
    )
    extra = registration.get("kubeletExtraArgs")
    if isinstance(extra, list):  # v1beta2: [{name, value}]
        current = next((a.get("value", "") for a in extra if a.get("name") == "node-labels"), "")
        merged = _merge_node_labels(current, labels)
        registration["kubeletExtraArgs"] = [a for a in extra if a.get("name") != "node-labels"] + [
            {"name": "node-labels", "value": merged}
        ]
    else:
        extra = dict(extra or {})
        extra["node-labels"] = _merge_node_labels(extra.get("node-labels", ""), labels)
        registration["kubeletExtraArgs"] = extra
    if taints:
        registration["taints"] = merged_taints(
            registration.get("taints") or (), (t.as_dict() for t in taints)
        )
    return {
        "apiVersion": bootstrap["apiVersion"],
        "kind": bootstrap["kind"],
        "metadata": new_metadata(bootstrap, _hashed(name, spec)),
        "spec": spec,
    }


def _registration_labels(registration: Mapping[str, Any]) -> dict[str, str]:
    extra = registration.get("kubeletExtraArgs")
    if isinstance(extra, list):
        text = next((a.get("value", "") for a in extra if a.get("name") == "node-labels"), "")
    else:
        text = (extra or {}).get("node-labels", "")
    return _parse_node_labels(text)


def _parse_node_labels(text: str) -> dict[str, str]:
    pairs = (p.strip().partition("=") for p in text.split(",") if p.strip())
    return {k: v for k, _, v in pairs}


def _merge_node_labels(current: str, labels: Mapping[str, str]) -> str:
    pairs = {**_parse_node_labels(current), **labels}
    return ",".join(f"{k}={v}" for k, v in pairs.items())
