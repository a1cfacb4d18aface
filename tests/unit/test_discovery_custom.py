"""NFD custom rules: parsing (every error names its field, only that rule is skipped) and label naming."""

from __future__ import annotations

import itertools

import pytest
import yaml

from sro.nfd.matching import label_key
from sro.nfd.model import BUILTIN_RULES, Expr, Term
from sro.nfd.rules import parse_rules
from sro.node.discovery.config import parse_config

NFD = "feature.node.kubernetes.io/"


def rules_of(text: str) -> tuple[list[str], list[str]]:
    """Parse `sources.custom` YAML -> (rule names kept, 'path: message' of each problem)."""
    rules, problems = parse_rules(yaml.safe_load(text))
    return [r.name for r in rules], [str(p) for p in problems]


GOOD = """
- name: ok
  labels: {ok: "true"}
  matchFeatures:
    - feature: pci.device
      matchExpressions: {vendor: {op: In, value: ["15b3"]}}
"""


@pytest.mark.parametrize(
    ("bad", "path", "message"),
    [
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: pci.device, matchExpressions: {vendor: {op: Equal, value: [x]}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.vendor.op", "unknown op 'Equal'"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: pci.devices}]}",
         "sources.custom[1].matchFeatures[0].feature", "unknown feature 'pci.devices'"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: kernel.loadedmodule, matchExpressions: {x: {op: In, value: [y]}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.x.op", "flag feature"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: kernel.version, matchExpressions: {major: {op: Gt, value: [five]}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.major.value", "needs an integer"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: kernel.version, matchExpressions: {major: {op: GtLt, value: ['7', '4']}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.major.value", "first value below the second"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: kernel.version, matchExpressions: {major: {op: GtLt, value: ['4']}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.major.value", "exactly 2 value(s)"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: pci.device, matchExpressions: {vendor: {op: Exists, value: [x]}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.vendor.value", "takes no values"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: pci.device, matchExpressions: {vendor: {op: In}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.vendor.value", "at least one value"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: pci.device, matchExpressions: {vendor: {op: InRegexp, value: ['(']}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.vendor.value[0]", "invalid regular expression"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: kernel.version, matchExpressions: {full: {op: In, value: ['5'], type: version}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.full.type", "type version applies to"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: kernel.version, matchExpressions: {full: {op: Gt, value: ['5'], type: semver}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.full.type", "unknown type"),
        ("{name: b, labels: {a: b}, matchFeatures: [{feature: pci.device, matchExpressions: {vendor: {op: In, value: [x], colour: red}}}]}",
         "sources.custom[1].matchFeatures[0].matchExpressions.vendor.colour", "unknown field"),
        ("{name: b, labels: {a: b}, matchFeatures: {feature: pci.device}}",
         "sources.custom[1].matchFeatures", "expected a list"),
        ("{name: b, labels: {a: b}, matchAny: [{matchFeatures: [{feature: cpu.cpuid, matchExpressions: {AVX: {op: Gt, value: ['1']}}}]}]}",
         "sources.custom[1].matchAny[0].matchFeatures[0].matchExpressions.AVX.op", "flag feature"),
        ("{name: b, labels: [a]}", "sources.custom[1].labels", "expected a mapping"),
        ("{name: b, labels: {a: {x: y}}}", "sources.custom[1].labels.a", "expected a string value"),
        ("{name: b, labelsTemplate: '{{if .x}}a=b{{end}}'}", "sources.custom[1].labelsTemplate", "unsupported action"),
        ("{name: b, labelsTemplate: '{{range .pci.device}}a=b'}", "sources.custom[1].labelsTemplate", "without `{{end}}`"),
        ("{name: b, taints: [{key: x}]}", "sources.custom[1].taints", "NodeFeatureRule only"),
        ("{name: b, lables: {a: b}}", "sources.custom[1].lables", "unknown field"),
        ("{labels: {a: b}}", "sources.custom[1].name", "required"),
        ("just-a-string", "sources.custom[1]", "expected a mapping"),
        ("{name: b, matchOn: [{pciId: {vendr: ['15b3']}}]}", "sources.custom[1].matchOn[0].pciId.vendr", "unknown field"),
        ("{name: b, matchOn: [{loadedKMod: mlx5_ib}]}", "sources.custom[1].matchOn[0].loadedKMod", "non-empty list"),
        ("{name: b, matchOn: [{dmiId: [x]}]}", "sources.custom[1].matchOn[0].dmiId", "unknown matcher"),
        ("{name: b, matchOn: []}", "sources.custom[1].matchOn", "non-empty list"),
        ("{name: b, value: [1], matchOn: [{cpuId: [AVX]}]}", "sources.custom[1].value", "expected a string"),
    ],
)  # fmt: skip
def test_bad_rule_names_its_field_and_only_it_is_skipped(bad: str, path: str, message: str) -> None:
    names, problems = rules_of(f"{GOOD}\n- {bad}\n{GOOD.replace('name: ok', 'name: ok2')}")
    assert names == ["ok", "ok2"]
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}: "), problems
    assert message in problems[0] and "skipped" in problems[0]


def test_the_brief_example_error_text() -> None:
    text = GOOD * 1 + "\n".join(
        f"- {{name: r{i}, labels: {{a: b}}, matchFeatures: [{{feature: pci.device, matchExpressions: "
        f"{{vendor: {{op: {'Equal' if i == 2 else 'In'}, value: [x]}}}}}}]}}"
        for i in range(1, 4)
    )
    config = parse_config(yaml.safe_dump({"sources": {"custom": yaml.safe_load(text)}}), "nfd-worker.conf")
    assert [r.name for r in config.custom_rules] == ["ok", "r1", "r3"]
    assert [str(p) for p in config.problems] == [
        "nfd-worker.conf: sources.custom[2].matchFeatures[0].matchExpressions.vendor.op: unknown op 'Equal' "
        "(valid: In, NotIn, InRegexp, Exists, DoesNotExist, Gt, Ge, Lt, Le, GtLt, GeLe, IsTrue, IsFalse); "
        "rule 'r2' skipped"
    ]


def test_not_a_list_and_empty() -> None:
    assert parse_rules(None) == ((), ())
    assert parse_rules([]) == ((), ())
    rules, problems = parse_rules({"name": "x"})
    assert rules == () and [p.path for p in problems] == ["sources.custom"]
    config = parse_config("sources: {custom: {name: x}}", "w.conf")
    assert [p.path for p in config.problems] == ["w.conf: sources.custom"]


def test_rule_without_output_is_kept_with_a_warning() -> None:
    names, problems = rules_of(
        "- {name: x, matchFeatures: [{feature: cpu.cpuid, matchExpressions: {AVX: {op: Exists}}}]}"
    )
    assert names == ["x"] and problems == [
        "sources.custom[0]: rule 'x' has no labels, labelsTemplate or vars; it produces nothing"
    ]


def test_value_forms_are_nfds() -> None:
    rules, problems = parse_rules(yaml.safe_load("""
- name: forms
  labels: {flag: true, num: 3}
  vars: {v: "1"}
  matchFeatures:
    - feature: kernel.version
      matchExpressions:
        major: {op: In, value: 5}           # a single value, not a list
        minor: {op: Gt, value: ["1"]}
        full: {op: GeLe, value: ["5.4", "6.1.2"], type: version}
      matchName: {op: InRegexp, value: ["^maj"]}
"""))  # fmt: skip
    assert problems == ()
    (rule,) = rules
    assert rule.labels == (("flag", "true"), ("num", "3")) and rule.vars == (("v", "1"),)
    (term,) = rule.match_features
    assert dict(term.expressions)["major"] == Expr("In", ("5",))
    assert dict(term.expressions)["full"] == Expr("GeLe", ("5.4", "6.1.2"), version=True)
    assert term.name is not None and term.name.op == "InRegexp"


def test_legacy_rules_become_expressions() -> None:
    rules, problems = parse_rules(yaml.safe_load("""
- name: legacy
  matchOn:
    - pciId: {class: ["0207"], vendor: ["15B3"]}
      loadedKMod: [mlx5_ib]
    - cpuId: [AVX512F]
      kConfig: [X86, "LSM=apparmor"]
    - usbId: {vendor: ["1d6b"]}
    - nodename: ["^gpu-[0-9]+$"]
- {name: "vendor.io/named", value: 42, matchOn: [{cpuId: [AVX]}]}
"""))  # fmt: skip
    assert problems == ()
    legacy, named = rules
    assert legacy.labels == (("custom-legacy", "true"),) and named.labels == (("vendor.io/named", "42"),)
    assert [[t.feature for t in g] for g in legacy.match_any] == [
        ["pci.device", "kernel.loadedmodule"], ["cpu.cpuid", "kernel.config"], ["usb.device"], ["system.name"]
    ]  # fmt: skip
    assert legacy.match_any[0][0] == Term(
        "pci.device", (("class", Expr("In", ("0207",))), ("vendor", Expr("In", ("15b3",))))
    )
    assert legacy.match_any[1][1] == Term(
        "kernel.config", (("X86", Expr("In", ("y", "m"))), ("LSM", Expr("In", ("apparmor",))))
    )


def test_builtin_rules_are_nfds() -> None:
    """NFD's static rules: rdma.capable on a Mellanox (15b3) PCI device, rdma.available on ib_uverbs+rdma_ucm."""
    capable, available = BUILTIN_RULES
    assert capable.labels == (("custom-rdma.capable", "true"),) and capable.features == {"pci.device"}
    assert available.labels == (("custom-rdma.available", "true"),)
    assert dict(available.match_features[0].expressions) == {
        "ib_uverbs": Expr("Exists"),
        "rdma_ucm": Expr("Exists"),
    }


@pytest.mark.parametrize(
    ("key", "full"),
    [
        ("rdma.capable", NFD + "rdma.capable"),
        ("vendor.example.com/nic", "vendor.example.com/nic"),
        (NFD + "direct", NFD + "direct"),
        ("sub.feature.node.kubernetes.io/x", "sub.feature.node.kubernetes.io/x"),
        ("profile.node.kubernetes.io/p", "profile.node.kubernetes.io/p"),
        ("kubernetes.io/hostname", None),
        ("node-role.kubernetes.io/master", None),
        ("x.k8s.io/y", None),
    ],
)
def test_label_names(key: str, full: str | None) -> None:
    assert label_key(key) == full


def test_parser_never_raises_on_garbage() -> None:
    """Whatever YAML an admin writes, parsing gives rules and problems, never an exception."""
    atoms: list[object] = [
        None,
        1,
        True,
        "x",
        [],
        {},
        ["a"],
        {"op": "In"},
        {"op": "Exists"},
        [{}],
        [{"feature": 1}],
    ]
    keys = ["name", "labels", "matchFeatures", "matchAny", "matchOn", "value", "vars", "labelsTemplate"]
    for a, b in itertools.product(atoms, repeat=2):
        for k1, k2 in itertools.combinations(keys, 2):
            parse_rules([{k1: a, k2: b}, {"name": "n", k1: a, k2: b}, a, b])
