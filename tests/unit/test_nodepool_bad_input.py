"""`sro nodepool create`: every bad input is refused with the option or field named, exit code 2,
and nothing printed on stdout (so nothing reaches `kubectl apply -f -` either)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sro.cli import cli
from sro.nodepools.generating import documents, generate
from sro.nodepools.request import NodepoolError, PoolRequest, Taint, check, parse_label, parse_taint

SOURCES = Path(__file__).resolve().parents[1] / "golden" / "nodepool" / "sources"


def load(name: str) -> list[dict[str, Any]]:
    return [dict(d) for d in documents(yaml.safe_load_all((SOURCES / name).read_text()))]


def refused(docs: list[dict[str, Any]], req: PoolRequest, name: str = "") -> NodepoolError:
    with pytest.raises(NodepoolError) as e:
        generate(docs, req, name)
    return e.value


P3 = PoolRequest(instance_type="p3.2xlarge", replicas=1)


def test_instance_type_not_in_the_table_lists_the_providers_known_ones() -> None:
    e = refused(load("openshift-aws.yaml"), PoolRequest(instance_type="a2-highgpu-1g", replicas=1))
    assert e.field == "--instance-type"
    assert "'a2-highgpu-1g' is not a aws GPU instance type" in str(e)
    assert "p3.2xlarge" in str(e) and "g5.12xlarge" in str(e) and "a2-highgpu-8g" not in str(e)
    e = refused(load("capi-gcp.yaml"), PoolRequest(instance_type="n1-standard-4", replicas=1))
    assert "known for gcp: a2-highgpu-1g" in str(e)


def test_machineset_without_provider_spec() -> None:
    docs = load("openshift-aws.yaml")
    del docs[0]["spec"]["template"]["spec"]["providerSpec"]
    e = refused(docs, P3)
    assert e.field == "spec.template.spec.providerSpec.value"
    assert "no providerSpec" in str(e)


def test_provider_spec_without_its_instance_type_field() -> None:
    for source, field in (
        ("openshift-aws.yaml", "instanceType"),
        ("openshift-gcp.yaml", "machineType"),
        ("openshift-azure.yaml", "vmSize"),
    ):
        docs = load(source)
        del docs[0]["spec"]["template"]["spec"]["providerSpec"]["value"][field]
        e = refused(docs, P3)
        assert e.field == f"spec.template.spec.providerSpec.value.{field}", source


def test_unknown_provider() -> None:
    docs = load("openshift-aws.yaml")
    docs[0]["spec"]["template"]["spec"]["providerSpec"]["value"]["kind"] = "VSphereMachineProviderSpec"
    e = refused(docs, P3)
    assert e.field == "spec.template.spec.providerSpec.value.kind"
    assert "unknown provider 'VSphereMachineProviderSpec'" in str(e)
    assert "AWSMachineProviderConfig" in str(e)

    docs = load("capi-aws.yaml")
    docs[0]["spec"]["template"]["spec"]["infrastructureRef"]["kind"] = "DockerMachineTemplate"
    e = refused(docs, PoolRequest(instance_type="g5.xlarge", replicas=1))
    assert e.field == "spec.template.spec.infrastructureRef.kind"
    assert "unknown provider 'DockerMachineTemplate'" in str(e)


def test_cluster_api_templates_must_be_there_and_kubeadm() -> None:
    g5 = PoolRequest(instance_type="g5.xlarge", replicas=1)
    docs = [d for d in load("capi-aws.yaml") if d["kind"] != "AWSMachineTemplate"]
    e = refused(docs, g5)
    assert e.field == "spec.template.spec.infrastructureRef"
    assert "AWSMachineTemplate capa-demo-md-0 not found" in str(e)

    docs = load("capi-aws.yaml")
    del docs[1]["spec"]["template"]["spec"]["instanceType"]
    assert "spec.template.spec.instanceType" in refused(docs, g5).field

    docs = [d for d in load("capi-aws.yaml") if d["kind"] != "KubeadmConfigTemplate"]
    assert refused(docs, g5).field == "spec.template.spec.bootstrap.configRef"

    docs = load("capi-aws.yaml")
    docs[0]["spec"]["template"]["spec"]["bootstrap"] = {"dataSecretName": "md-0-bootstrap"}
    e = refused(docs, g5)
    assert e.field == "spec.template.spec.bootstrap.configRef"
    assert "KubeadmConfigTemplate" in str(e)


def test_cluster_api_refuses_labels_the_kubelet_may_not_set() -> None:
    req = PoolRequest(instance_type="g5.xlarge", replicas=1, labels=(("team.kubernetes.io/x", "y"),))
    e = refused(load("capi-aws.yaml"), req)
    assert e.field == "--label"
    assert "team.kubernetes.io/x" in str(e)
    # the ones Cluster API syncs from the Machine, and the kubelet's own, are fine
    ok = PoolRequest(
        instance_type="g5.xlarge",
        replicas=1,
        labels=(("node-role.kubernetes.io/gpu", ""), ("node.kubernetes.io/pool", "gpu")),
    )
    generate(load("capi-aws.yaml"), ok)


@pytest.mark.parametrize(
    ("req", "field", "words"),
    [
        (PoolRequest("p3.2xlarge", 1, min_replicas=3, max_replicas=2), "--min/--max", "above --max"),
        (
            PoolRequest("p3.2xlarge", 5, min_replicas=0, max_replicas=2),
            "--replicas",
            "outside --min 0 .. --max 2",
        ),
        (PoolRequest("p3.2xlarge", 0, min_replicas=1, max_replicas=2), "--replicas", "outside"),
        (PoolRequest("p3.2xlarge", 1, min_replicas=1), "--min/--max", "both"),
        (PoolRequest("p3.2xlarge", 0, min_replicas=0, max_replicas=0), "--max", "1 or more"),
        (PoolRequest("p3.2xlarge", -1), "--replicas", "0 or more"),
        (PoolRequest("p3.2xlarge", 1, name="GPU_pool"), "--name", "label value"),
        (PoolRequest("p3.2xlarge", 1, name="x" * 64), "--name", "63"),
        (
            PoolRequest("p3.2xlarge", 1, special_resource="Not_A_Name"),
            "--special-resource",
            "SpecialResource",
        ),
        (PoolRequest("p3.2xlarge", 1, labels=(("a", "1"), ("a", "2"))), "--label", "twice"),
        (
            PoolRequest(
                "p3.2xlarge", 1, taints=(Taint("a", "", "NoSchedule"), Taint("a", "x", "NoSchedule"))
            ),
            "--taint",
            "twice",
        ),
    ],
)
def test_request_checks(req: PoolRequest, field: str, words: str) -> None:
    with pytest.raises(NodepoolError) as e:
        check(req)
    assert e.value.field == field
    assert words in str(e.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("novalue", "not key=value"),
        ("Bad Key=1", "name 'Bad Key'"),
        ("UPPER.example.com/x=1", "not a DNS subdomain"),
        ("a/b/c=1", "at most one '/'"),
        ("k=" + "v" * 64, "at most 63"),
        ("k=-v", "alphanumeric at both ends"),
    ],
)
def test_malformed_label(text: str, words: str) -> None:
    with pytest.raises(NodepoolError) as e:
        parse_label(text)
    assert e.value.field == "--label"
    assert words in str(e.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("nvidia.com/gpu", "not key[=value]:Effect"),
        (":NoSchedule", "not key[=value]:Effect"),
        ("nvidia.com/gpu:NoWay", "effect must be one of NoSchedule, PreferNoSchedule, NoExecute"),
        ("bad key=x:NoSchedule", "name 'bad key'"),
        ("k=bad value:NoExecute", "value 'bad value'"),
    ],
)
def test_malformed_taint(text: str, words: str) -> None:
    with pytest.raises(NodepoolError) as e:
        parse_taint(text)
    assert e.value.field == "--taint"
    assert words in str(e.value)


def test_good_labels_and_taints() -> None:
    assert parse_label("node-role.kubernetes.io/gpu=") == ("node-role.kubernetes.io/gpu", "")
    assert parse_taint("nvidia.com/gpu:NoSchedule") == Taint("nvidia.com/gpu", "", "NoSchedule")
    assert parse_taint("a=b:NoExecute") == Taint("a", "b", "NoExecute")
    assert str(Taint("a", "b", "NoExecute")) == "a=b:NoExecute"
    assert Taint("a", "", "NoSchedule").as_dict() == {"key": "a", "effect": "NoSchedule"}


def test_the_source_must_be_found_and_unique() -> None:
    both = load("openshift-aws.yaml") + load("openshift-gcp.yaml")
    e = refused(both, P3)
    assert e.field == "--from" and "several objects" in str(e)
    assert refused(both, P3, "no-such-set").field == "--from"
    generate(both, P3, "cluster-aus-9195-jg5lt-worker-us-east-2a")


def test_the_pool_never_takes_the_sources_name() -> None:
    req = PoolRequest("p3.2xlarge", 1, name="cluster-aus-9195-jg5lt-worker-us-east-2a")
    e = refused(load("openshift-aws.yaml"), req)
    assert e.field == "--name" and "source's own name" in str(e)


def test_other_api_versions_are_refused() -> None:
    docs = load("capi-aws.yaml")
    docs[0] = copy.deepcopy(docs[0]) | {"apiVersion": "cluster.x-k8s.io/v1beta2"}
    assert refused(docs, PoolRequest("g5.xlarge", 1)).field == "apiVersion"


ARGS = ["nodepool", "create", "--from-file", str(SOURCES / "openshift-aws.yaml")]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--instance-type=p9.huge", "--replicas=1"],
            "--instance-type: 'p9.huge' is not a aws GPU instance type",
        ),
        (["--instance-type=p3.2xlarge", "--replicas=3", "--min=0", "--max=2"], "--replicas: 3 is outside"),
        (
            ["--instance-type=p3.2xlarge", "--replicas=1", "--min=2", "--max=1"],
            "--min/--max: --min 2 is above",
        ),
        (["--instance-type=p3.2xlarge", "--replicas=1", "--label=oops"], "--label: 'oops' is not key=value"),
        (
            ["--instance-type=p3.2xlarge", "--replicas=1", "--taint=a=b"],
            "--taint: 'a=b' is not key[=value]:Effect",
        ),
    ],
)
def test_command_refuses_with_exit_2_and_prints_nothing(args: list[str], words: str) -> None:
    result = CliRunner().invoke(cli, [*ARGS, *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert words in result.stderr


def test_command_needs_a_source() -> None:
    result = CliRunner().invoke(cli, ["nodepool", "create", "--instance-type=p3.2xlarge", "--replicas=1"])
    assert result.exit_code == 2
    assert "--from NAME" in result.stderr


def test_command_refuses_a_file_that_is_not_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [unclosed\n")
    result = CliRunner().invoke(
        cli, ["nodepool", "create", "--from-file", str(bad), "--instance-type=p3.2xlarge", "--replicas=1"]
    )
    assert result.exit_code == 2
    assert "--from-file" in result.stderr
