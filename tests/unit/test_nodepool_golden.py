"""`sro nodepool create` per provider against golden files, from the sample sources next to them.

`SRO_UPDATE_GOLDEN=1 pytest tests/unit/test_nodepool_golden.py` rewrites the goldens; review the diff.
A golden is what the command prints — notes as `# note:` lines, then the objects as YAML.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from sro.cli import cli
from sro.nodepools.generating import documents, generate, to_yaml
from sro.nodepools.request import PoolRequest, parse_label, parse_taint
from tests.golden_files import update_goldens

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "nodepool"
SOURCES = GOLDEN / "sources"

# case -> (source file, command arguments after `--from-file FILE`)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "openshift-aws": (
        "openshift-aws.yaml",
        (
            "--instance-type=p3.2xlarge",
            "--replicas=1",
            "--min=1",
            "--max=4",
            "--label=workload=training",
            "--taint=nvidia.com/gpu:NoSchedule",
            "--special-resource=nvidia-gpu",
        ),
    ),
    "openshift-gcp": (
        "openshift-gcp.yaml",
        ("--instance-type=a2-highgpu-1g", "--replicas=0", "--min=0", "--max=2"),
    ),
    "openshift-azure": (
        "openshift-azure.yaml",
        ("--instance-type=Standard_NC24ads_A100_v4", "--replicas=1", "--name=ocp-az-4kzt7-a100-eastus1"),
    ),
    "capi-aws": (
        "capi-aws.yaml",
        (
            "--instance-type=g5.xlarge",
            "--replicas=1",
            "--min=0",
            "--max=3",
            "--label=workload=inference",
            "--taint=nvidia.com/gpu:NoSchedule",
            "--special-resource=nvidia-gpu",
        ),
    ),
    "capi-gcp": ("capi-gcp.yaml", ("--instance-type=g2-standard-4", "--replicas=1", "--min=1", "--max=2")),
    "capi-azure": (
        "capi-azure.yaml",
        ("--instance-type=Standard_NC4as_T4_v3", "--replicas=2", "--label=node-role.kubernetes.io/gpu="),
    ),
}


def request(args: tuple[str, ...]) -> PoolRequest:
    opts: dict[str, list[str]] = {}
    for a in args:
        k, _, v = a.removeprefix("--").partition("=")
        opts.setdefault(k, []).append(v)
    one = {k: v[0] for k, v in opts.items()}
    return PoolRequest(
        instance_type=one["instance-type"],
        replicas=int(one["replicas"]),
        name=one.get("name", ""),
        min_replicas=int(one["min"]) if "min" in one else None,
        max_replicas=int(one["max"]) if "max" in one else None,
        labels=tuple(parse_label(x) for x in opts.get("label", ())),
        taints=tuple(parse_taint(x) for x in opts.get("taint", ())),
        special_resource=one.get("special-resource", ""),
    )


def load(source: str) -> list:
    return documents(yaml.safe_load_all((SOURCES / source).read_text()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    source, args = CASES[case]
    pool = generate(load(source), request(args))
    text = "".join(f"# note: {n}\n" for n in pool.notes) + to_yaml(pool.objects)
    golden = GOLDEN / f"{case}.yaml"
    if update_goldens():
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run with SRO_UPDATE_GOLDEN=1 and review it"
    assert text == golden.read_text(), f"{case} differs from {golden} (SRO_UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize("case", sorted(CASES))
def test_command_prints_the_golden(case: str) -> None:
    source, args = CASES[case]
    result = CliRunner().invoke(cli, ["nodepool", "create", "--from-file", str(SOURCES / source), *args])
    assert result.exit_code == 0, result.output
    golden = (GOLDEN / f"{case}.yaml").read_text()
    objects = "".join(line for line in golden.splitlines(keepends=True) if not line.startswith("# note: "))
    assert result.stdout == objects
    for line in golden.splitlines():
        if line.startswith("# note: "):
            assert line.removeprefix("# note: ") in result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_pools_select_only_their_own_machines(case: str) -> None:
    """The new selector must not match the source's machines, nor the source's selector the new ones
    (else one pool would adopt or fight over the other's machines)."""
    source_file, args = CASES[case]
    docs = load(source_file)
    source = next(d for d in docs if d["kind"] in ("MachineSet", "MachineDeployment"))
    pool = generate(docs, request(args))
    new = next(o for o in pool.objects if o["kind"] in ("MachineSet", "MachineDeployment"))

    def matches(selector: dict, labels: dict) -> bool:
        return all(labels.get(k) == v for k, v in selector["matchLabels"].items())

    assert matches(new["spec"]["selector"], new["spec"]["template"]["metadata"]["labels"])
    assert not matches(new["spec"]["selector"], source["spec"]["template"]["metadata"]["labels"])
    assert not matches(source["spec"]["selector"], new["spec"]["template"]["metadata"]["labels"])
