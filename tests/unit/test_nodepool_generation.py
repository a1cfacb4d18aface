"""What the pools carry beyond the goldens: the table, the startup taint per API, the autoscaler's
figures, merging into an existing ClusterAutoscaler, and `--apply`'s all-or-nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sro.cli import cli
from sro.kube import machines
from sro.kube.errors import KubeError
from sro.nodepools.clusterapi import kubelet_may_set, synced_by_cluster_api
from sro.nodepools.generating import documents, generate, merge_cluster_autoscaler
from sro.nodepools.instancetypes import INSTANCE_TYPES, PROVIDERS, lookup
from sro.nodepools.machinesets import cluster_autoscaler
from sro.nodepools.request import ACCELERATOR_LABEL, PoolRequest, Taint, label_value_problem

SOURCES = Path(__file__).resolve().parents[1] / "golden" / "nodepool" / "sources"


def load(name: str) -> list[dict[str, Any]]:
    return [dict(d) for d in documents(yaml.safe_load_all((SOURCES / name).read_text()))]


def kind(objects: Any, k: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == k)


def test_table_rows_are_sane() -> None:
    for p in PROVIDERS:
        assert INSTANCE_TYPES[p], p
        for t in INSTANCE_TYPES[p].values():
            assert t.provider == p
            assert t.vcpus > 0 and t.gpus > 0 and t.memory_mib % 1024 == 0, t
            assert label_value_problem(t.accelerator) == "", t
    assert lookup("aws", "p3.2xlarge") is not None and lookup("aws", "p3.2xlarge").memory_mib == 61 * 1024  # type: ignore[union-attr]
    for name in ("p3.8xlarge", "p4d.24xlarge", "g5.xlarge", "g5.12xlarge"):
        assert lookup("aws", name), name
    for name in ("a2-highgpu-1g", "a2-highgpu-8g", "g2-standard-4"):
        assert lookup("gcp", name), name
    for name in ("Standard_NC6s_v3", "Standard_NC24ads_A100_v4"):
        assert lookup("azure", name), name


def test_seed_walkthrough_is_what_the_pool_changes() -> None:
    """Seed 002 changed the name, the selector's and template's machineset label and instanceType,
    and dropped the status; the pool does that and adds labels, annotations and nothing else."""
    source = load("openshift-aws.yaml")[0]
    ms = kind(generate([source], PoolRequest("p3.2xlarge", 1)).objects, "MachineSet")
    assert ms["metadata"]["name"] == "cluster-aus-9195-jg5lt-gpu-us-east-2a"
    assert "status" not in ms
    assert not {"uid", "resourceVersion", "selfLink", "creationTimestamp", "generation"} & set(ms["metadata"])
    value = ms["spec"]["template"]["spec"]["providerSpec"]["value"]
    assert value == {
        **source["spec"]["template"]["spec"]["providerSpec"]["value"],
        "instanceType": "p3.2xlarge",
    }
    assert ms["metadata"]["annotations"] == {
        "machine.openshift.io/GPU": "1",
        "machine.openshift.io/vCPU": "8",
        "machine.openshift.io/memoryMb": "62464",
    }


def test_startup_taint_per_api() -> None:
    """Cluster API: registered by the kubelet once (kubeadm), never in the autoscaler's template.
    OpenShift: never in the MachineSet (nodelink would re-add it after the operator removed it)."""
    req = PoolRequest("g5.xlarge", 1, min_replicas=0, max_replicas=2, special_resource="nvidia-gpu")
    pool = generate(load("capi-aws.yaml"), req)
    registration = kind(pool.objects, "KubeadmConfigTemplate")["spec"]["template"]["spec"][
        "joinConfiguration"
    ]["nodeRegistration"]
    assert {"key": "sro.dev/nvidia-gpu.not-ready", "value": "true", "effect": "NoSchedule"} in registration[
        "taints"
    ]
    md = kind(pool.objects, "MachineDeployment")
    assert "capacity.cluster-autoscaler.kubernetes.io/taints" not in md["metadata"]["annotations"]
    assert any("--startup-taint=sro.dev/nvidia-gpu.not-ready" in n for n in pool.notes)

    pool = generate(load("openshift-aws.yaml"), PoolRequest("p3.2xlarge", 1, special_resource="nvidia-gpu"))
    ms = kind(pool.objects, "MachineSet")
    assert "sro.dev/nvidia-gpu.not-ready" not in json.dumps(ms)
    assert any("spec.startupTaint: true" in n for n in pool.notes)


def test_autoscaler_figures() -> None:
    req = PoolRequest("p3.8xlarge", 1, min_replicas=1, max_replicas=3)
    pool = generate(load("openshift-aws.yaml"), req)
    ma = kind(pool.objects, "MachineAutoscaler")
    assert ma["spec"] == {
        "minReplicas": 1,
        "maxReplicas": 3,
        "scaleTargetRef": {
            "apiVersion": "machine.openshift.io/v1beta1",
            "kind": "MachineSet",
            "name": pool.name,
        },
    }
    assert ma["metadata"]["namespace"] == "openshift-machine-api"
    ca = kind(pool.objects, "ClusterAutoscaler")
    assert ca["metadata"] == {"name": "default"}
    assert ca["spec"]["resourceLimits"]["gpus"] == [{"type": "nvidia-tesla-v100", "min": 4, "max": 12}]
    # no --min/--max: no autoscaler objects
    assert [
        o["kind"] for o in generate(load("openshift-aws.yaml"), PoolRequest("p3.8xlarge", 1)).objects
    ] == ["MachineSet"]


def test_an_accelerator_label_overrides_the_gpu_type_everywhere() -> None:
    req = PoolRequest(
        "p3.2xlarge", 1, min_replicas=0, max_replicas=1, labels=((ACCELERATOR_LABEL, "v100-pool"),)
    )
    pool = generate(load("openshift-aws.yaml"), req)
    assert pool.gpu_type == "v100-pool"
    assert kind(pool.objects, "ClusterAutoscaler")["spec"]["resourceLimits"]["gpus"][0]["type"] == "v100-pool"


def test_gcp_gpu_vms_terminate_on_host_maintenance_and_lose_attached_gpus() -> None:
    docs = load("openshift-gcp.yaml")
    docs[0]["spec"]["template"]["spec"]["providerSpec"]["value"]["gpus"] = [
        {"count": 1, "type": "nvidia-tesla-t4"}
    ]
    pool = generate(docs, PoolRequest("g2-standard-8", 1))
    value = kind(pool.objects, "MachineSet")["spec"]["template"]["spec"]["providerSpec"]["value"]
    assert value["onHostMaintenance"] == "Terminate" and "gpus" not in value
    assert any("gpus dropped" in n for n in pool.notes)
    capg = generate(load("capi-gcp.yaml"), PoolRequest("g2-standard-8", 1))
    assert (
        kind(capg.objects, "GCPMachineTemplate")["spec"]["template"]["spec"]["onHostMaintenance"]
        == "Terminate"
    )


def test_cluster_api_templates_are_renamed_when_they_change() -> None:
    a = generate(load("capi-aws.yaml"), PoolRequest("g5.xlarge", 1))
    b = generate(load("capi-aws.yaml"), PoolRequest("g5.2xlarge", 1))
    again = generate(load("capi-aws.yaml"), PoolRequest("g5.xlarge", 1))
    name = kind(a.objects, "AWSMachineTemplate")["metadata"]["name"]
    assert re.fullmatch(r"capa-demo-md-0-gpu-[0-9a-f]{8}", name)
    assert name != kind(b.objects, "AWSMachineTemplate")["metadata"]["name"]
    assert name == kind(again.objects, "AWSMachineTemplate")["metadata"]["name"]
    ref = kind(a.objects, "MachineDeployment")["spec"]["template"]["spec"]["infrastructureRef"]
    assert ref["name"] == name


def test_kubeadm_v1beta2_argument_list_is_kept_as_a_list() -> None:
    docs = load("capi-aws.yaml")
    kct = docs[2]
    kct["apiVersion"] = "bootstrap.cluster.x-k8s.io/v1beta2"
    docs[0]["spec"]["template"]["spec"]["bootstrap"]["configRef"]["apiVersion"] = kct["apiVersion"]
    kct["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"] = [
        {"name": "cloud-provider", "value": "external"},
        {"name": "node-labels", "value": "a=b"},
    ]
    pool = generate(docs, PoolRequest("g5.xlarge", 1))
    args = kind(pool.objects, "KubeadmConfigTemplate")["spec"]["template"]["spec"]["joinConfiguration"][
        "nodeRegistration"
    ]["kubeletExtraArgs"]
    assert args[0] == {"name": "cloud-provider", "value": "external"}
    assert args[1]["name"] == "node-labels"
    assert args[1]["value"].startswith("a=b,cluster-api/accelerator=nvidia-a10g,")


def test_label_domains_for_cluster_api() -> None:
    assert synced_by_cluster_api("node-role.kubernetes.io/gpu")
    assert synced_by_cluster_api("team.node-restriction.kubernetes.io/x")
    assert synced_by_cluster_api("node.cluster.x-k8s.io/pool")
    assert not synced_by_cluster_api("cluster-api/accelerator")
    assert kubelet_may_set("cluster-api/accelerator") and kubelet_may_set("sro.dev/nodepool")
    assert kubelet_may_set("node.kubernetes.io/instance-type") and kubelet_may_set("kubelet.kubernetes.io/x")
    assert not kubelet_may_set("kubernetes.io/x") and not kubelet_may_set("foo.k8s.io/x")


# ---- the cluster's ClusterAutoscaler ----
def _ca(*gpus: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.openshift.io/v1",
        "kind": "ClusterAutoscaler",
        "metadata": {"name": "default"},
        "spec": {"resourceLimits": {"maxNodesTotal": 20, "gpus": [dict(g) for g in gpus]}},
    }


def test_merge_into_no_cluster_autoscaler() -> None:
    ours = cluster_autoscaler("nvidia-tesla-v100", 0, 4)
    merged, note = merge_cluster_autoscaler(ours, None)
    assert merged == ours and "turns the autoscaler on" in note


def test_merge_keeps_other_gpu_types_and_widens_our_own() -> None:
    ours = cluster_autoscaler("nvidia-tesla-v100", 1, 4)
    existing = _ca(
        {"type": "nvidia-a10g", "min": 0, "max": 8}, {"type": "nvidia-tesla-v100", "min": 0, "max": 2}
    )
    merged, note = merge_cluster_autoscaler(ours, existing)
    assert merged["spec"] == {
        "resourceLimits": {
            "gpus": [
                {"type": "nvidia-a10g", "min": 0, "max": 8},
                {"type": "nvidia-tesla-v100", "min": 0, "max": 4},
            ]
        }
    }
    assert "already limited nvidia-tesla-v100 to 0..2; now 0..4" in note
    again, _ = merge_cluster_autoscaler(ours, merged)
    assert again["spec"] == merged["spec"]  # re-running changes nothing
    merged, note = merge_cluster_autoscaler(cluster_autoscaler("nvidia-l4", 0, 2), existing)
    assert [g["type"] for g in merged["spec"]["resourceLimits"]["gpus"]] == [
        "nvidia-a10g",
        "nvidia-tesla-v100",
        "nvidia-l4",
    ]


# ---- --apply: all or nothing, never someone else's object ----
class FakeCluster:
    """Objects by (kind, namespace, name); `refuse` names kinds the 'server' rejects (dry run or not)."""

    def __init__(self, refuse: set[str] = frozenset(), refuse_real: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.store: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.refuse, self.refuse_real = refuse, refuse_real
        self.calls: list[str] = []

    @staticmethod
    def key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
        md = obj["metadata"]
        return obj["kind"], md.get("namespace", ""), md["name"]

    def get(self, client: Any, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.store.get(self.key(obj))

    def apply(self, client: Any, obj: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        self.calls.append(f"{'dry ' if dry_run else ''}apply {obj['kind']}")
        if obj["kind"] in self.refuse or (not dry_run and obj["kind"] in self.refuse_real):
            raise KubeError(f"apply {obj['kind']}: 422 Invalid")
        if not dry_run:
            self.store[self.key(obj)] = dict(obj)
        return dict(obj)

    def delete(self, client: Any, obj: Mapping[str, Any]) -> bool:
        self.calls.append(f"delete {obj['kind']}")
        return self.store.pop(self.key(obj), None) is not None


@pytest.fixture
def pool_objects() -> list[dict[str, Any]]:
    req = PoolRequest("p3.2xlarge", 1, min_replicas=0, max_replicas=2)
    return list(generate(load("openshift-aws.yaml"), req).objects)


def _install(monkeypatch: pytest.MonkeyPatch, fake: FakeCluster) -> None:
    monkeypatch.setattr(machines, "get", fake.get)
    monkeypatch.setattr(machines, "apply", fake.apply)
    monkeypatch.setattr(machines, "delete", fake.delete)


def test_apply_dry_runs_everything_first(
    monkeypatch: pytest.MonkeyPatch, pool_objects: list[dict[str, Any]]
) -> None:
    fake = FakeCluster(refuse={"ClusterAutoscaler"})
    _install(monkeypatch, fake)
    with pytest.raises(KubeError):
        machines.apply_all(None, pool_objects)  # type: ignore[arg-type]
    assert fake.store == {}
    assert not [c for c in fake.calls if not c.startswith("dry ")]


def test_apply_takes_back_what_it_created(
    monkeypatch: pytest.MonkeyPatch, pool_objects: list[dict[str, Any]]
) -> None:
    fake = FakeCluster(refuse_real={"ClusterAutoscaler"})
    existing_ca = {"kind": "ClusterAutoscaler", "metadata": {"name": "default"}, "spec": {}}
    _install(monkeypatch, fake)
    lines: list[str] = []
    with pytest.raises(KubeError):
        machines.apply_all(None, pool_objects, lines.append)  # type: ignore[arg-type]
    assert fake.store == {}
    assert lines[-2:] == [
        "MachineAutoscaler openshift-machine-api/cluster-aus-9195-jg5lt-gpu-us-east-2a deleted again",
        "MachineSet openshift-machine-api/cluster-aus-9195-jg5lt-gpu-us-east-2a deleted again",
    ]
    # a shared object that was there before is never deleted
    fake = FakeCluster(refuse_real={"MachineAutoscaler"})
    fake.store[FakeCluster.key(existing_ca)] = existing_ca
    _install(monkeypatch, fake)
    with pytest.raises(KubeError):
        machines.apply_all(None, pool_objects)  # type: ignore[arg-type]
    assert list(fake.store) == [("ClusterAutoscaler", "", "default")]


def test_apply_never_takes_over_an_object_sro_did_not_create(
    monkeypatch: pytest.MonkeyPatch, pool_objects: list[dict[str, Any]]
) -> None:
    fake = FakeCluster()
    theirs = {**pool_objects[0], "metadata": {**pool_objects[0]["metadata"], "labels": {}}}
    fake.store[FakeCluster.key(theirs)] = theirs
    _install(monkeypatch, fake)
    with pytest.raises(KubeError, match="was not created by sro"):
        machines.apply_all(None, pool_objects)  # type: ignore[arg-type]
    assert fake.calls == []
    # ours: updated in place
    fake.store[FakeCluster.key(theirs)] = pool_objects[0]
    lines: list[str] = []
    machines.apply_all(None, pool_objects, lines.append)  # type: ignore[arg-type]
    assert lines[0].endswith("configured") and lines[1].endswith("created")


def test_types_command_lists_the_table() -> None:
    result = CliRunner().invoke(cli, ["nodepool", "types", "--provider", "gcp"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "a2-highgpu-8g" in result.stdout and "nvidia-l4" in result.stdout
    assert "p3.2xlarge" not in result.stdout


def test_json_output_is_a_list() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "nodepool",
            "create",
            "--from-file",
            str(SOURCES / "capi-azure.yaml"),
            "--instance-type=Standard_NC6s_v3",
            "--replicas=1",
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "List"
    assert [o["kind"] for o in doc["items"]] == [
        "AzureMachineTemplate",
        "KubeadmConfigTemplate",
        "MachineDeployment",
    ]


def test_taint_dict_and_string_round_trip() -> None:
    t = Taint("sro.dev/x.not-ready", "true", "NoSchedule")
    assert str(t) == "sro.dev/x.not-ready=true:NoSchedule"
