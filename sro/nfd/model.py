"""NFD's feature rules as records: the features a rule can match on, match expressions, terms,
taints, rules, and NFD's built-in rules.

Why apart from the parser (`sro.nfd.rules`): evaluation (`sro.nfd.matching`) and the NodeFeature
model (`sro.nfd.nodefeatures`) need the records and the feature kinds, never the parsing. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

FLAG, ATTRIBUTE, INSTANCE = "flag", "attribute", "instance"

# The NFD features a rule can match on (NFD's customization guide, "Available features"), by type.
FEATURES: Mapping[str, str] = {
    "cpu.cpuid": FLAG, "cpu.cstate": ATTRIBUTE, "cpu.model": ATTRIBUTE, "cpu.pstate": ATTRIBUTE,
    "cpu.security": ATTRIBUTE, "cpu.topology": ATTRIBUTE,
    "kernel.config": ATTRIBUTE, "kernel.loadedmodule": FLAG, "kernel.enabledmodule": FLAG,
    "kernel.selinux": ATTRIBUTE, "kernel.version": ATTRIBUTE,
    "memory.numa": ATTRIBUTE, "memory.nv": INSTANCE, "memory.swap": ATTRIBUTE,
    "network.device": INSTANCE, "pci.device": INSTANCE, "storage.block": INSTANCE,
    "system.osrelease": ATTRIBUTE, "system.name": ATTRIBUTE, "system.dmiid": ATTRIBUTE,
    "usb.device": INSTANCE, "local.label": ATTRIBUTE, "local.feature": ATTRIBUTE,
    "rule.matched": ATTRIBUTE,
}  # fmt: skip

# Namespaces under kubernetes.io that NFD lets rules write to (labels, annotations, resources, taints).
ALLOWED_K8S_NS = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")


@dataclass(frozen=True)
class Expr:
    """One match expression, checked and pre-compiled (regexps, numbers) when parsed."""

    op: str
    values: tuple[str, ...] = ()
    version: bool = False
    patterns: tuple[re.Pattern[str], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Term:
    """`matchFeatures[i]`: every expression must hold (for instances: on one same instance)."""

    feature: str
    expressions: tuple[tuple[str, Expr], ...] = ()
    name: Expr | None = None  # matchName


@dataclass(frozen=True)
class Taint:
    """`taints[i]` of a NodeFeatureRule rule: a node taint (value optional)."""

    key: str
    effect: str
    value: str = ""

    def __str__(self) -> str:
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


@dataclass(frozen=True)
class Rule:
    name: str
    where: str  # the field path, for messages: `sources.custom[2]` or `builtin`
    labels: tuple[tuple[str, str], ...] = ()
    vars: tuple[tuple[str, str], ...] = ()
    labels_template: str = ""
    match_features: tuple[Term, ...] = ()
    match_any: tuple[tuple[Term, ...], ...] = ()
    # NodeFeatureRule only (the worker's custom rules refuse them, as NFD's worker does)
    annotations: tuple[tuple[str, str], ...] = ()
    extended_resources: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    vars_template: str = ""

    @property
    def produces_nothing(self) -> bool:
        return not (
            self.labels or self.vars or self.labels_template or self.vars_template
            or self.annotations or self.extended_resources or self.taints
        )  # fmt: skip

    @property
    def features(self) -> frozenset[str]:
        terms = [*self.match_features, *(t for group in self.match_any for t in group)]
        return frozenset(t.feature for t in terms)


class RuleError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def refuse_unknown(
    doc: Mapping[str, object], known: tuple[str, ...] | set[str], path: str, what: str = ""
) -> None:
    """RuleError naming the first field of `doc` that is not one of `known`."""
    for key in doc:
        if key not in known:
            raise RuleError(f"{path}.{key}", f"unknown field{what}")


def reserved_namespace(key: str) -> bool:
    """Kubernetes' own namespaces (`kubernetes.io`, `k8s.io` and below), but for NFD's two."""
    ns = key.split("/", 1)[0] if "/" in key else ""
    return ns.endswith(("kubernetes.io", "k8s.io")) and not any(
        ns == a or ns.endswith("." + a) for a in ALLOWED_K8S_NS
    )


def exists(*keys: str) -> tuple[tuple[str, Expr], ...]:
    """`key: {op: Exists}` for each key (a flag feature's elements)."""
    return tuple((k, Expr("Exists")) for k in keys)


# NFD's built-in custom rules (source/custom/static_features.go), on unless `custom` is not a label source.
# They publish `custom-rdma.capable` and `custom-rdma.available` (what the RDMA device plugins select on;
# NFD's features.md calls the second `custom-rdma.enabled`, its code and every deployment `available`).
BUILTIN_RULES: tuple[Rule, ...] = (
    Rule(
        "RDMA capable static rule",
        "builtin",
        labels=(("custom-rdma.capable", "true"),),
        match_features=(Term("pci.device", (("vendor", Expr("In", ("15b3",))),)),),
    ),
    Rule(
        "RDMA available static rule",
        "builtin",
        labels=(("custom-rdma.available", "true"),),
        match_features=(Term("kernel.loadedmodule", exists("ib_uverbs", "rdma_ucm")),),
    ),
)
