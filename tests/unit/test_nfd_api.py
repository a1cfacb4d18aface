"""NodeFeatureRule's own fields in the shared rule parser, NodeFeature objects as data, and the CRDs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.api.nfd_crds import MATCH_OPS, node_feature_crd, node_feature_rule_crd
from sro.install.objects import objects
from sro.nfd.expressions import NO_VALUES, NUMERIC, parse_expr
from sro.nfd.matching import FeatureSet
from sro.nfd.model import RuleError, Taint
from sro.nfd.nodefeatures import merge, to_spec
from sro.nfd.rules import parse_rules
from tests.schema_fit import fits

EXAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "nodefeaturerules" / "examples.yaml"


def test_nodefeaturerule_fields_parse_and_the_worker_still_refuses_them() -> None:
    doc = [{
        "name": "all",
        "annotations": {"example.com/a": "1"},
        "extendedResources": {"example.com/r": "@kernel.version.major"},
        "taints": [{"key": "example.com/t", "effect": "NoSchedule"}, {"key": "example.com/u", "value": True, "effect": "NoExecute"}],
        "varsTemplate": "{{range .pci.device}}v-{{.vendor}}=1\n{{end}}",
        "matchFeatures": [{"feature": "vendor.flags", "matchExpressions": {"feature-x": {"op": "Exists"}}}],
    }]  # fmt: skip
    (rule,), problems = parse_rules(doc, "spec.rules", nodefeaturerule=True)
    assert problems == ()
    assert rule.taints == (Taint("example.com/t", "NoSchedule"), Taint("example.com/u", "NoExecute", "true"))
    assert rule.annotations == (("example.com/a", "1"),) and rule.vars_template
    assert rule.match_features[0].feature == "vendor.flags"  # another vendor's NodeFeature feature
    rules, problems = parse_rules(doc, "sources.custom")
    assert rules == () and problems[0].path == "sources.custom[0].annotations"


@pytest.mark.parametrize(
    ("taint", "field", "why"),
    [
        ({"key": "t", "effect": "NoSchedule"}, "key", "no namespace"),
        ({"key": "node.kubernetes.io/t", "effect": "NoSchedule"}, "key", "reserved"),
        ({"key": "example.com/t", "effect": "Sometimes"}, "effect", "NoSchedule"),
        ({"key": "example.com/t", "effect": "NoSchedule", "when": 1}, "when", "unknown field"),
    ],
)
def test_bad_taints_are_named(taint: dict[str, object], field: str, why: str) -> None:
    doc = [{"name": "t", "taints": [taint]}]
    rules, problems = parse_rules(doc, "NodeFeatureRule x spec.rules", nodefeaturerule=True)
    assert rules == ()
    assert (
        problems[0].path == f"NodeFeatureRule x spec.rules[0].taints[0].{field}"
        and why in problems[0].message
    )


def test_legacy_matchon_is_for_the_worker_only() -> None:
    doc = [{"name": "old", "matchOn": [{"loadedKMod": ["x"]}]}]
    assert parse_rules(doc, "r", nodefeaturerule=True)[1][0].path == "r[0].matchOn"
    assert parse_rules(doc, "r")[0]


def test_features_round_trip_and_merge_in_name_order() -> None:
    features = {
        "cpu.cpuid": FeatureSet("flag", flags=frozenset({"AVX"})),
        "kernel.version": FeatureSet("attribute", attrs={"major": "6"}),
        "pci.device": FeatureSet("instance", instances=({"vendor": "10de"},)),
    }

    def obj(name: str, spec: dict[str, object], node: str = "n1") -> dict[str, object]:
        return {"metadata": {"name": name, "namespace": "ns", "labels": {"nfd.node.kubernetes.io/node-name": node}}, "spec": spec}  # fmt: skip

    extra = {"features": {"flags": {"cpu.cpuid": {"elements": {"AVX2": {}}}},
                          "attributes": {"kernel.version": {"elements": {"major": "7"}}},
                          "instances": {"pci.device": {"elements": [{"attributes": {"vendor": "8086"}}]}}},
             "labels": {"x": "2"}}  # fmt: skip
    bad = {"features": {"instances": {"broken": {"elements": "nope"}}}}
    merged, problems = merge([obj("b", extra), obj("a", {"features": to_spec(features), "labels": {"x": "1"}}),
                              obj("c", bad), {"metadata": {"name": "lost", "namespace": "ns"}}])  # fmt: skip
    n1 = merged["n1"]
    assert n1.features["cpu.cpuid"].flags == {"AVX", "AVX2"}
    assert n1.features["kernel.version"].attrs == {"major": "7"}  # the later object wins
    assert [i["vendor"] for i in n1.features["pci.device"].instances] == ["10de", "8086"]
    assert n1.labels == {"x": "2"} and n1.sources == ("ns/a", "ns/b", "ns/c")
    assert sorted(p.path for p in problems) == [
        "NodeFeature ns/c spec.features.instances.broken",
        "NodeFeature ns/lost",
    ]


def test_crds_are_nfds_group_kinds_and_scopes_and_installed() -> None:
    nf, nfr = node_feature_crd(), node_feature_rule_crd()
    assert nf["metadata"]["name"] == "nodefeatures.nfd.k8s-sigs.io" and nf["spec"]["scope"] == "Namespaced"
    assert nfr["metadata"]["name"] == "nodefeaturerules.nfd.k8s-sigs.io" and nfr["spec"]["scope"] == "Cluster"
    assert nfr["spec"]["names"]["shortNames"] == ["nfr"] and nf["spec"]["group"] == "nfd.k8s-sigs.io"
    assert [v["name"] for v in nf["spec"]["versions"]] == ["v1alpha1"]
    rule = nfr["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "rules"
    ]["items"]
    assert set(rule["properties"]) == {"name", "labels", "labelsTemplate", "annotations", "extendedResources",
                                       "taints", "vars", "varsTemplate", "matchFeatures", "matchAny"}  # fmt: skip
    # the schema's enum of `op` is what the parser accepts: every listed op parses, nothing else does
    op_enums = _op_enums(rule)
    assert op_enums and all(e == list(MATCH_OPS) for e in op_enums)
    for op in MATCH_OPS:
        values = [] if op in NO_VALUES else [str(i + 1) for i in range(NUMERIC.get(op, 1))]
        parse_expr({"op": op, "value": values}, "e")
    with pytest.raises(RuleError):
        parse_expr({"op": "Bogus", "value": ["x"]}, "e")
    installed = {o["metadata"]["name"] for o in objects() if o["kind"] == "CustomResourceDefinition"}
    assert installed >= {"nodefeatures.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io"}


def _op_enums(schema: Any) -> list[list[str]]:
    """Every `enum` of a property named `op` anywhere in a schema."""
    found: list[list[str]] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "op" and isinstance(value, dict) and "enum" in value:
                found.append(value["enum"])
            found += _op_enums(value)
    elif isinstance(schema, list):
        for item in schema:
            found += _op_enums(item)
    return found


def test_the_documented_examples_fit_the_schema() -> None:
    schema = node_feature_rule_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for doc in yaml.safe_load_all(EXAMPLES.read_text()):
        assert fits(schema, {k: v for k, v in doc.items() if k in ("spec",)}, "") == [], doc["metadata"][
            "name"
        ]


def test_uninstall_keeps_nfds_crds_while_rules_exist() -> None:
    from sro.install.commands import _nfd_crds_to_keep

    class Client:
        def __init__(self, names: list[str]) -> None:
            self.names = names

        def list(self, res: object) -> list[dict[str, Any]]:
            return [{"metadata": {"name": n}} for n in self.names]

    assert _nfd_crds_to_keep(Client([])) == {}
    kept = _nfd_crds_to_keep(Client(["vendor-rules"]))
    assert set(kept) == {"nodefeatures.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io"}
    assert "vendor-rules" in kept["nodefeaturerules.nfd.k8s-sigs.io"]
