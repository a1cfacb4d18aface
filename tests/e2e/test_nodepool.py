"""`sro nodepool create --from NAME --apply` against the real API server, per provider.

There is no cloud here, so the machine APIs come as test-only CRDs carrying their documented field
names (tests/fixtures/nodepool/crds.yaml, each field's source cited there): the API server judges
every generated object against them, and prunes what they do not name — so comparing what the
server kept with what sro printed proves each field name is one the API has. The sample source
pools (tests/golden/nodepool/sources/) are created in a namespace of this test's own, standing in
for openshift-machine-api; the CRDs, that namespace and the one ClusterAutoscaler go at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.local.cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NS = "sro-e2e-nodepool"
ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "tests" / "fixtures" / "nodepool" / "crds.yaml"
SOURCES = ROOT / "tests" / "golden" / "nodepool" / "sources"
FIXTURE_LABEL = "sro.dev/test-fixture"

# provider case -> (source file, --kind, source name, arguments)
CASES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "openshift-aws": (
        "openshift-aws.yaml",
        "machineset",
        "cluster-aus-9195-jg5lt-worker-us-east-2a",
        (
            "--instance-type=p3.2xlarge",
            "--replicas=1",
            "--min=1",
            "--max=4",
            "--taint=nvidia.com/gpu:NoSchedule",
        ),
    ),
    "openshift-gcp": (
        "openshift-gcp.yaml",
        "machineset",
        "ocp-gcp-8x2kq-worker-a",
        ("--instance-type=a2-highgpu-8g", "--replicas=0", "--min=0", "--max=2", "--label=workload=training"),
    ),
    "openshift-azure": (
        "openshift-azure.yaml",
        "machineset",
        "ocp-az-4kzt7-worker-eastus1",
        ("--instance-type=Standard_NC24ads_A100_v4", "--replicas=1", "--min=0", "--max=3"),
    ),
    "capi-aws": (
        "capi-aws.yaml",
        "machinedeployment",
        "capa-demo-md-0",
        (
            "--instance-type=g5.12xlarge",
            "--replicas=1",
            "--min=0",
            "--max=3",
            "--special-resource=nvidia-gpu",
        ),
    ),
    "capi-gcp": (
        "capi-gcp.yaml",
        "machinedeployment",
        "capg-demo-md-0",
        ("--instance-type=g2-standard-4", "--replicas=1", "--min=1", "--max=2"),
    ),
    "capi-azure": (
        "capi-azure.yaml",
        "machinedeployment",
        "capz-demo-md-0",
        ("--instance-type=Standard_NC6s_v3", "--replicas=2", "--taint=nvidia.com/gpu:NoSchedule"),
    ),
}
# OpenShift's GPU limits the ClusterAutoscaler must end up with: type -> (min, max) in GPUs.
EXPECTED_GPU_LIMITS = {"nvidia-tesla-v100": (1, 4), "nvidia-tesla-a100": (0, 16), "nvidia-a100-80gb": (0, 3)}


def sro(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run(
        [sys.executable, "-m", "sro", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _crd_names() -> list[str]:
    return [d["metadata"]["name"] for d in yaml.safe_load_all(CRDS.read_text()) if d]


def _in_namespace(path: Path, namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for d in docs:  # as created by hand: the server's own fields of the seed's copy left out
        for server_field in ("uid", "resourceVersion", "selfLink", "creationTimestamp", "generation"):
            d["metadata"].pop(server_field, None)
        d["metadata"]["namespace"] = namespace
        d.pop("status", None)
    return docs


def _strip_nulls(value: Any) -> Any:
    """Nulls are 'unset': a typed field drops them, a preserved-unknown one (providerSpec.value)
    keeps them; either way they say nothing about field names."""
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


@pytest.fixture(scope="module")
def machine_apis(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The machine APIs' CRDs and the test namespace; skipped if someone else's CRDs are there."""
    for name in _crd_names():
        live = cluster.kubectl("get", "crd", name, "-o", "json", check=False)
        if live.returncode == 0 and FIXTURE_LABEL not in json.loads(live.stdout)["metadata"].get(
            "labels", {}
        ):
            pytest.skip(f"CRD {name} exists and is not this test's fixture: not touching it")
    deadline = time.monotonic() + 90  # an earlier run's namespace may still be going
    while (
        cluster.kubectl("get", "namespace", NS, check=False).returncode == 0 and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    cluster.kubectl("apply", "-f", str(CRDS))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRDS))
    cluster.kubectl("create", "namespace", NS, check=False)
    try:
        yield cluster
    finally:
        cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)
        cluster.kubectl(
            "delete",
            "clusterautoscalers.autoscaling.openshift.io",
            "default",
            "--ignore-not-found",
            check=False,
        )
        cluster.kubectl("delete", "-f", str(CRDS), "--ignore-not-found", check=False, timeout=180)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            left = [n for n in _crd_names() if cluster.kubectl("get", "crd", n, check=False).returncode == 0]
            if not left:
                break
            time.sleep(0.5)


def _live(cluster: LocalCluster, obj: dict[str, Any]) -> dict[str, Any]:
    md = obj["metadata"]
    resource = f"{obj['kind'].lower()}s.{obj['apiVersion'].split('/')[0]}"
    args = ["get", resource, md["name"], "-o", "json"]
    if md.get("namespace"):
        args += ["-n", md["namespace"]]
    return json.loads(cluster.kubectl(*args).stdout)


@pytest.mark.parametrize("case", list(CASES))
def test_pool_per_provider_is_accepted_as_generated(machine_apis: LocalCluster, case: str) -> None:
    cluster = machine_apis
    source_file, kind, source, args = CASES[case]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(_in_namespace(SOURCES / source_file, NS)))
    common = ["nodepool", "create", "--from", source, "--kind", kind, "-n", NS, *args]

    printed = sro(cluster, *common)
    assert printed.returncode == 0, printed.stderr
    objects = [o for o in yaml.safe_load_all(printed.stdout) if o]
    applied = sro(cluster, *common, "--apply")
    assert applied.returncode == 0, f"stdout:\n{applied.stdout}\nstderr:\n{applied.stderr}"

    for obj in objects:
        live = _live(cluster, obj)
        if obj["kind"] == "ClusterAutoscaler":
            continue  # shared by every OpenShift case: checked below, merged
        assert _strip_nulls(live["spec"]) == _strip_nulls(obj["spec"]), (
            f"{obj['kind']}: the server dropped or changed fields"
        )
        for key in ("labels", "annotations"):
            want = obj["metadata"].get(key) or {}
            assert want.items() <= (live["metadata"].get(key) or {}).items(), f"{obj['kind']} {key}"
        managers = {m["manager"] for m in live["metadata"]["managedFields"]}
        assert "sro" in managers, f"{obj['kind']}: not applied with field manager sro ({managers})"

    pool = next(o for o in objects if o["kind"] in ("MachineSet", "MachineDeployment"))
    annotations = _live(cluster, pool)["metadata"]["annotations"]
    bounds = {a.split("=")[0]: int(a.split("=")[1]) for a in args if a.startswith(("--min=", "--max="))}
    if kind == "machineset":
        assert int(annotations["machine.openshift.io/GPU"]) >= 1
        assert [o["kind"] for o in objects] == ["MachineSet", "MachineAutoscaler", "ClusterAutoscaler"]
        autoscaler = _live(cluster, objects[1])
        assert autoscaler["spec"]["minReplicas"] == bounds["--min"]
        assert autoscaler["spec"]["maxReplicas"] == bounds["--max"]
        assert autoscaler["spec"]["scaleTargetRef"]["name"] == pool["metadata"]["name"]
    else:
        assert annotations["capacity.cluster-autoscaler.kubernetes.io/gpu-type"] == "nvidia.com/gpu"
        assert int(annotations["capacity.cluster-autoscaler.kubernetes.io/gpu-count"]) >= 1
        assert "cluster-api/accelerator=" in annotations["capacity.cluster-autoscaler.kubernetes.io/labels"]
        if bounds:
            prefix = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-"
            assert int(annotations[prefix + "min-size"]) == bounds["--min"]
            assert int(annotations[prefix + "max-size"]) == bounds["--max"]


def test_cluster_autoscaler_carries_every_pools_gpu_limits(machine_apis: LocalCluster) -> None:
    """After the three OpenShift pools (the cases above): one limit per GPU type, each min/max =
    nodes x GPUs per node."""
    ca = json.loads(
        machine_apis.kubectl(
            "get", "clusterautoscalers.autoscaling.openshift.io", "default", "-o", "json"
        ).stdout
    )
    limits = {g["type"]: (g["min"], g["max"]) for g in ca["spec"]["resourceLimits"]["gpus"]}
    assert limits == EXPECTED_GPU_LIMITS
    # the pools' nodes carry the label the limits are matched against
    for ms in json.loads(
        machine_apis.kubectl("get", "machinesets.machine.openshift.io", "-n", NS, "-o", "json").stdout
    )["items"]:
        labels = ms["spec"]["template"]["spec"].get("metadata", {}).get("labels", {})
        if "sro.dev/nodepool" in labels:
            assert labels["cluster-api/accelerator"] in limits


def _names(cluster: LocalCluster, resource: str) -> set[str]:
    return set(cluster.kubectl("get", resource, "-n", NS, "-o", "name").stdout.split())


def test_refused_input_creates_nothing(machine_apis: LocalCluster, tmp_path: Path) -> None:
    cluster = machine_apis
    cluster.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump_all(_in_namespace(SOURCES / "openshift-aws.yaml", NS))
    )
    resources = "machinesets.machine.openshift.io,machineautoscalers.autoscaling.openshift.io"
    before = _names(cluster, resources)
    bad = sro(
        cluster,
        *("nodepool", "create", "--from", "cluster-aus-9195-jg5lt-worker-us-east-2a", "-n", NS),
        *("--instance-type=p9.huge", "--replicas=1", "--name=never-made", "--apply"),
    )
    assert bad.returncode == 2
    assert "--instance-type: 'p9.huge' is not a aws GPU instance type" in bad.stderr
    assert _names(cluster, resources) == before

    # the API server refuses the last object (clusterName is required): its templates are not left
    docs = _in_namespace(SOURCES / "capi-aws.yaml", NS)
    del docs[0]["spec"]["clusterName"]
    source = tmp_path / "no-cluster-name.yaml"
    source.write_text(yaml.safe_dump_all(docs))
    templates = "awsmachinetemplates.infrastructure.cluster.x-k8s.io,kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io"
    before = _names(cluster, templates)
    refused = sro(
        cluster,
        *("nodepool", "create", "--from-file", str(source), "--instance-type=g5.xlarge", "--replicas=1"),
        *("--name=half-made", "--apply"),
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "MachineDeployment" in refused.stderr and "clusterName" in refused.stderr
    assert _names(cluster, templates) == before
    assert "machinedeployment.cluster.x-k8s.io/half-made" not in _names(
        cluster, "machinedeployments.cluster.x-k8s.io"
    )
