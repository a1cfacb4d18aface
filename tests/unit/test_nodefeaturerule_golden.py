"""NodeFeatureRules after NFD's documented examples, evaluated the way the cluster does it, per fake host.

The chain is the product's: discovery scans the fake host tree, its NodeFeature object is built as
`sro discover --publish` writes it, and the operator's pure step evaluates every NodeFeatureRule of
`tests/fixtures/nodefeaturerules/examples.yaml` against it. The golden file per host
(`tests/golden/nodefeaturerules/<host>.yaml`) holds what the node would get — labels, annotations,
extended resources, taints — and the problems reported. `SRO_UPDATE_GOLDEN=1` rewrites them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.host.root import HostRoot
from sro.nfd.ownership import RULES_OWNED_ANNOTATION
from sro.node.discovery.config import Config
from sro.node.discovery.custom import nfd_features
from sro.node.discovery.nodefeature import node_feature
from sro.node.discovery.sources import scan
from sro.operator.nodefeaturerules import plan
from sro.operator.observed import NodeInfo
from tests.golden_files import update_goldens

TESTS = Path(__file__).resolve().parent.parent
HOSTS = TESTS / "hosts"
GOLDEN = TESTS / "golden" / "nodefeaturerules"
EXAMPLES = TESTS / "fixtures" / "nodefeaturerules" / "examples.yaml"
SCENARIOS = sorted(p.parent.name for p in HOSTS.glob("*/root"))
NODE = "node-1"


def outcome(scenario: str) -> dict[str, Any]:
    results = scan(HostRoot.at(HOSTS / scenario / "root"), Config())
    doc = node_feature(NODE, "sro-system", nfd_features(results), node_uid="uid-1")
    rules = list(yaml.safe_load_all(EXAMPLES.read_text()))
    changes, problems = plan([NodeInfo(NODE)], [doc], rules)
    (change,) = changes
    annotations = {k: v for k, v in change.annotations.items() if k != RULES_OWNED_ANNOTATION}
    return {
        "labels": dict(sorted(change.labels.items())),
        "annotations": dict(sorted(annotations.items())),
        "extendedResources": dict(sorted(change.capacity.items())),
        "taints": [dict(t) for t in change.taints or ()],
        "problems": sorted(str(p) for p in [*problems, *change.warnings]),
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_documented_rules_on_fake_hosts(scenario: str) -> None:
    got = outcome(scenario)
    text = yaml.safe_dump(got, sort_keys=False, default_flow_style=False)
    path = GOLDEN / f"{scenario}.yaml"
    if update_goldens():
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with SRO_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text()


def test_the_goldens_show_each_documented_mechanism() -> None:
    """The examples are not vacuous: on the GPU host every kind of output and mechanism shows."""
    got = outcome("nvidia-8gpu")
    labels = got["labels"]
    assert labels["example.com/nvidia-stack"] == "true"  # matchFeatures (AND)
    assert labels["feature.node.kubernetes.io/kernel-full"] == "5.15.0-1042-nvidia"  # @ value
    assert "feature.node.kubernetes.io/high-level-feature" not in labels  # its var needs AVX512F
    assert labels["feature.node.kubernetes.io/fast-nic"] == "true"  # matchAny
    assert labels["feature.node.kubernetes.io/nvidia-accelerator"] == "true"  # varsTemplate -> later rule
    assert labels["feature.node.kubernetes.io/system-ID"] == "ubuntu"  # labelsTemplate over attributes
    assert "feature.node.kubernetes.io/avx512-any" not in labels  # matchName: no AVX512 on this CPU
    assert labels["feature.node.kubernetes.io/after-the-bad-one"] == "true"  # a bad rule costs itself only
    assert got["annotations"] == {"example.com/os": "ubuntu", "feature.node.kubernetes.io/kernel-major": "5"}
    assert got["extendedResources"] == {"example.com/kernel-major": "5", "example.com/static": "123"}
    assert got["taints"] == [
        {"key": "example.com/dedicated-node", "effect": "NoExecute"},
        {"key": "feature.node.kubernetes.io/special-node", "value": "true", "effect": "PreferNoSchedule"},
    ]
    assert any("z-one-bad-rule spec.rules[0].matchFeatures[0].matchExpressions.full.value[0]" in p
               for p in got["problems"])  # fmt: skip
    cpu_only = outcome("cpu-only")["labels"]
    assert cpu_only["feature.node.kubernetes.io/avx512-any"] == "true"
    assert (
        cpu_only["feature.node.kubernetes.io/high-level-feature"] == "true"
    )  # a label and a var, backreferenced
    assert (
        "example.com/nvidia-stack" not in cpu_only and "feature.node.kubernetes.io/fast-nic" not in cpu_only
    )
    assert outcome("cpu-only")["taints"] == []
