"""OpenShift's Machine API: a GPU MachineSet from a worker one, its MachineAutoscaler, the
ClusterAutoscaler's GPU limit.

Field names, from openshift/api machine/v1beta1 (types_machineset.go, types_machine.go and the
provider specs types_awsprovider.go, types_gcpprovider.go, types_azureprovider.go) and
openshift/cluster-autoscaler-operator pkg/apis/autoscaling (v1beta1 MachineAutoscaler, v1
ClusterAutoscaler):

- node labels go in `spec.template.spec.metadata.labels` ("ObjectMeta will autopopulate the Node
  created"), node taints in `spec.template.spec.taints`; both are copied onto the Node by the
  machine-api's nodelink controller on every Node event — additively, and re-added when missing
  (machine-api-operator pkg/controller/nodelink: `addTaintsToNode`). That is why the operator's
  startup taint is NOT put here: the operator removes it once the node is validated, and nodelink
  would put it straight back. `spec.startupTaint: true` on the SpecialResource taints the pool's
  nodes instead, as soon as the operator sees them.
- the instance type is `providerSpec.value.instanceType` (AWS), `.machineType` (GCP), `.vmSize` (Azure);
  GPU VMs on GCP must set `onHostMaintenance: Terminate` (they cannot live-migrate).
- scale-from-zero capacity: the MachineSet annotations `machine.openshift.io/vCPU`, `memoryMb`,
  `GPU` (openshift/kubernetes-autoscaler clusterapi provider; the machine-api's cloud controllers set
  the same ones for the types they know, so these agree with them).
- the MachineAutoscaler (`minReplicas`, `maxReplicas` >= 1, `scaleTargetRef{apiVersion,kind,name}`)
  lives in the MachineSet's namespace; the ClusterAutoscaler is the cluster's one `default`, and its
  `resourceLimits.gpus[].type` is matched against the nodes' `cluster-api/accelerator` label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sro.nodepools.instancetypes import Provider
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
from sro.nodepools.request import ACCELERATOR_LABEL, NodepoolError, PoolRequest, startup_taint

API_VERSION: Final = "machine.openshift.io/v1beta1"
MACHINESET_LABEL: Final = "machine.openshift.io/cluster-api-machineset"
CLUSTER_LABEL: Final = "machine.openshift.io/cluster-api-cluster"
MACHINE_AUTOSCALER_API: Final = "autoscaling.openshift.io/v1beta1"
CLUSTER_AUTOSCALER_API: Final = "autoscaling.openshift.io/v1"
CLUSTER_AUTOSCALER_NAME: Final = "default"  # the operator reconciles only this one
GPU_ANNOTATION: Final = "machine.openshift.io/GPU"
VCPU_ANNOTATION: Final = "machine.openshift.io/vCPU"
MEMORY_ANNOTATION: Final = "machine.openshift.io/memoryMb"

# providerSpec.value.kind -> (provider, the instance type's field)
PROVIDER_SPECS: Final[Mapping[str, tuple[Provider, str]]] = {
    "AWSMachineProviderConfig": ("aws", "instanceType"),
    "GCPMachineProviderSpec": ("gcp", "machineType"),
    "AzureMachineProviderSpec": ("azure", "vmSize"),
}
VALUE = "spec.template.spec.providerSpec.value"


def provider_of(ms: Mapping[str, Any]) -> tuple[Provider, str]:
    """The provider and its instance-type field, from the MachineSet's providerSpec."""
    value = dig(ms, VALUE)
    if not isinstance(value, Mapping) or not value:
        raise NodepoolError(VALUE, "the MachineSet has no providerSpec: nothing to copy the machine from")
    kind = str(value.get("kind"))
    if kind not in PROVIDER_SPECS:
        raise NodepoolError(
            f"{VALUE}.kind",
            f"unknown provider {kind!r}; sro knows {', '.join(PROVIDER_SPECS)} (AWS, GCP, Azure)",
        )
    provider, field = PROVIDER_SPECS[kind]
    if not value.get(field):
        raise NodepoolError(f"{VALUE}.{field}", f"the {kind} has no {field} to replace")
    return provider, field


def generate(ms: Mapping[str, Any], req: PoolRequest) -> Pool:
    if ms.get("apiVersion") != API_VERSION:
        raise NodepoolError("apiVersion", f"{ms.get('apiVersion')!r}: sro reads MachineSets of {API_VERSION}")
    source = str(dig(ms, "metadata.name") or "")
    provider, field = provider_of(ms)
    it = instance_type(provider, req)
    name = pool_name(source, req)
    labels = node_labels(name, it, req)
    notes: list[str] = []

    spec = spec_copy(ms)
    spec["replicas"] = req.replicas
    unique_selector(spec, ("template", "metadata", "labels"), (CLUSTER_LABEL,), MACHINESET_LABEL, name)
    mspec = spec["template"]["spec"]
    mspec["metadata"] = {
        **(mspec.get("metadata") or {}),
        "labels": {**((mspec.get("metadata") or {}).get("labels") or {}), **labels},
    }
    taints = merged_taints(mspec.get("taints") or (), (t.as_dict() for t in req.taints))
    if taints:
        mspec["taints"] = taints
    value = mspec["providerSpec"]["value"]
    value[field] = it.name
    if provider == "gcp":
        value["onHostMaintenance"] = "Terminate"
        if value.pop("gpus", None):
            notes.append(f"{VALUE}.gpus dropped: {it.name} comes with its GPUs ({it.gpus} x {it.product})")
    if req.special_resource:
        notes.append(
            f"startup taint: OpenShift's machine controller re-adds a MachineSet's taints to its nodes, so "
            f"{startup_taint(req.special_resource)} cannot come from the MachineSet; set "
            f"`spec.startupTaint: true` on SpecialResource {req.special_resource} and the operator taints "
            f"each new node of the pool until it is validated"
        )

    metadata = new_metadata(ms, name)
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        GPU_ANNOTATION: str(it.gpus),
        VCPU_ANNOTATION: str(it.vcpus),
        MEMORY_ANNOTATION: str(it.memory_mib),
    }
    machineset: Obj = {"apiVersion": API_VERSION, "kind": "MachineSet", "metadata": metadata, "spec": spec}
    objects: list[Obj] = [machineset]
    gpu_type = labels[ACCELERATOR_LABEL]
    if req.min_replicas is not None and req.max_replicas is not None:
        objects.append(machine_autoscaler(machineset, req.min_replicas, req.max_replicas))
        objects.append(cluster_autoscaler(gpu_type, req.min_replicas * it.gpus, req.max_replicas * it.gpus))
    return Pool(name, provider, it, gpu_type, tuple(objects), tuple(notes))


def machine_autoscaler(machineset: Mapping[str, Any], min_replicas: int, max_replicas: int) -> Obj:
    md = machineset["metadata"]
    return {
        "apiVersion": MACHINE_AUTOSCALER_API,
        "kind": "MachineAutoscaler",
        "metadata": {
            "name": md["name"],
            **({"namespace": md["namespace"]} if md.get("namespace") else {}),
            "labels": {k: v for k, v in md["labels"].items() if k != CLUSTER_LABEL},
        },
        "spec": {
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": "MachineSet", "name": md["name"]},
        },
    }


def cluster_autoscaler(gpu_type: str, min_gpus: int, max_gpus: int) -> Obj:
    """Only the GPU limit: applied with sro's field manager, it leaves the admin's other limits alone
    (`--apply` merges it into an existing `gpus` list: see `generating.merge_cluster_autoscaler`)."""
    return {
        "apiVersion": CLUSTER_AUTOSCALER_API,
        "kind": "ClusterAutoscaler",
        "metadata": {"name": CLUSTER_AUTOSCALER_NAME},
        "spec": {"resourceLimits": {"gpus": [{"type": gpu_type, "min": min_gpus, "max": max_gpus}]}},
    }
