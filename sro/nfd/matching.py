"""Evaluating NFD rules against a node's features: matching, `@` values, templates, naming.

Why apart from where the features come from: the discovery agent evaluates its custom rules over
what it just read from the host, the operator evaluates NodeFeatureRules over the features in the
cluster's NodeFeature objects. Both hand `run_rules` a `FeatureLookup` (a feature by NFD name, and
the `rule.matched` backreferences) and get the same outputs; the rules run in order and each
matched rule's labels and vars are visible to the rules after it as `rule.matched`. Naming is
today's NFD: a key without a namespace gets `feature.node.kubernetes.io/` (no `custom-`; only legacy
`matchOn` rules and the built-ins are named `custom-...`), and Kubernetes' own namespaces are
refused but for NFD's two. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sro.api.names import NFD_PREFIX
from sro.api.problems import Problem
from sro.nfd.expressions import parse_version
from sro.nfd.model import ATTRIBUTE, FLAG, INSTANCE, Expr, Rule, Taint, Term, reserved_namespace
from sro.nfd.templating import render_labels

Attrs = Mapping[str, str]
Element = Mapping[str, str]
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A Kubernetes resource quantity (what an extended resource's capacity must be).
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[KMGTPE]i?|[mkMGTPE])?$")


@dataclass(frozen=True)
class FeatureSet:
    """One NFD feature (`pci.device`): its type and elements."""

    kind: str
    flags: frozenset[str] = frozenset()
    attrs: Attrs = field(default_factory=dict)
    instances: tuple[Attrs, ...] = ()


class FeatureLookup(Protocol):
    """A node's features by NFD name, and the backreferences (`rule.matched`) of this evaluation."""

    @property
    def matched(self) -> MutableMapping[str, str]: ...

    def get(self, name: str) -> FeatureSet | None: ...


class FeatureMap:
    """A FeatureLookup over features already in NFD's model (a NodeFeature's `spec.features`)."""

    def __init__(self, features: Mapping[str, FeatureSet]) -> None:
        self.features = features
        self.matched: dict[str, str] = {}

    def get(self, name: str) -> FeatureSet | None:
        if name == "rule.matched":
            return FeatureSet(ATTRIBUTE, attrs=self.matched)
        return self.features.get(name)


def match_value(expr: Expr, exists: bool, value: str) -> bool:
    """NFD's MatchExpression on one element (an input that is not a number never matches Gt/Lt)."""
    op = expr.op
    if op == "Exists":
        return exists
    if op == "DoesNotExist":
        return not exists
    if not exists:
        return False
    if op == "In":
        return value in expr.values
    if op == "NotIn":
        return value not in expr.values
    if op == "InRegexp":
        return any(p.search(value) for p in expr.patterns)
    if op == "IsTrue":
        return value == "true"
    if op == "IsFalse":
        return value == "false"
    got = _number(value, expr.version)
    bounds = [_number(v, expr.version) for v in expr.values]  # checked when parsed
    if got is None or None in bounds:
        return False
    lo, hi = bounds[0] or (), bounds[-1] or ()
    if op == "Gt":
        return got > lo
    if op == "Ge":
        return got >= lo
    if op == "Lt":
        return got < lo
    if op == "Le":
        return got <= lo
    if op == "GtLt":
        return lo < got < hi
    return lo <= got <= hi  # GeLe


def _number(text: str, version: bool) -> tuple[int, ...] | None:
    """Integers and versions both compare as tuples of ints."""
    if version:
        return parse_version(text)
    try:
        return (int(text.strip(), 10),)
    except ValueError:
        return None


def match_term(term: Term, fs: FeatureSet | None) -> list[Element] | None:
    """The elements a term matched (for templates), or None when it does not match."""
    if fs is None:
        return None
    if fs.kind == INSTANCE:
        hits = [
            i
            for i in fs.instances
            if all(match_value(e, k in i, i.get(k, "")) for k, e in term.expressions)
            and (term.name is None or any(match_value(term.name, True, a) for a in i))
        ]
        return hits or None
    elements = {f: "" for f in fs.flags} if fs.kind == FLAG else dict(fs.attrs)
    out: dict[str, str] = {}
    for key, expr in term.expressions:
        exists = key in elements
        if not match_value(expr, exists, elements.get(key, "")):
            return None
        if exists:
            out[key] = elements[key]
    if term.name is not None:
        named = {k: v for k, v in elements.items() if match_value(term.name, True, k)}
        if not named:
            return None
        out.update(named)
    elif not term.expressions:
        out = elements
    return [{"Name": k, "Value": v} for k, v in sorted(out.items())]


def match_rule(rule: Rule, view: FeatureLookup) -> dict[str, dict[str, list[Element]]] | None:
    """AND over matchFeatures, OR over matchAny (both must hold when both are given)."""
    matched: dict[str, dict[str, list[Element]]] = {}

    def all_of(terms: Sequence[Term]) -> bool:
        found = []
        for t in terms:
            hits = match_term(t, view.get(t.feature))
            if hits is None:
                return False
            found.append((t.feature, hits))
        for feature, hits in found:
            domain, _, name = feature.partition(".")
            matched.setdefault(domain, {}).setdefault(name, []).extend(hits)
        return True

    if rule.match_features and not all_of(rule.match_features):
        return None
    if rule.match_any and not any(all_of(group) for group in rule.match_any):
        return None
    return matched


def label_key(key: str) -> str | None:
    """NFD's naming: a key without a namespace gets NFD's (legacy rules' names already carry
    `custom-`; NFD's worker stopped prefixing rule labels); Kubernetes' own namespaces refused.
    The same for annotation and extended resource names."""
    if "/" not in key:
        return f"{NFD_PREFIX}{key}"
    return None if reserved_namespace(key) else key


def key_problem(key: str) -> str | None:
    """Why Kubernetes would refuse this label, annotation or resource name, or None."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS.match(prefix)):
        return f"invalid prefix {prefix!r}"
    if not _NAME.match(name):
        return f"invalid name {name!r} (at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends)"
    return None


def label_problem(key: str, value: str) -> str | None:
    """Why Kubernetes would refuse this label, or None."""
    why = key_problem(key)
    if why:
        return why.replace("invalid ", "invalid label ", 1)
    if not _VALUE.match(value):
        return f"invalid value {value[:80]!r} (at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends)"
    return None


def resolve(value: str, view: FeatureLookup) -> str | None:
    """`@kernel.config.LSM`: the value of an attribute (or "true" for a flag) of a feature."""
    if not value.startswith("@"):
        return value
    domain, _, rest = value[1:].partition(".")
    feature, _, element = rest.partition(".")
    fs = view.get(f"{domain}.{feature}")
    if fs is None or not element:
        return None
    if fs.kind == FLAG:
        return "true" if element in fs.flags else None
    return fs.attrs.get(element)


@dataclass
class Outcome:
    """What a list of rules produced for one node (full keys), and a warning per output not made."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    extended_resources: dict[str, str] = field(default_factory=dict)
    taints: dict[tuple[str, str], Taint] = field(default_factory=dict)  # by (key, effect)
    warnings: list[Problem] = field(default_factory=list)
    matched_rules: list[str] = field(default_factory=list)  # each matched rule's `where`


def _values(
    rule: Rule, pairs: Sequence[tuple[str, str]], view: FeatureLookup, out: Outcome
) -> dict[str, str]:
    made: dict[str, str] = {}
    for key, raw in pairs:
        value = resolve(raw, view)
        if value is None:
            out.warnings.append(Problem(f"{rule.where}", f"{raw!r} names no feature value; {key} not set"))
            continue
        made[key] = value
    return made


def _named(rule: Rule, what: str, made: Mapping[str, str], into: dict[str, str], out: Outcome) -> None:
    for key, value in made.items():
        full = label_key(key)
        if full is None:
            out.warnings.append(
                Problem(f"{rule.where}", f"{what} {key}: namespace reserved by Kubernetes; not published")
            )
            continue
        into[full] = value


def run_rules(rules: Sequence[Rule], view: FeatureLookup, out: Outcome | None = None) -> Outcome:
    """Evaluate `rules` in order against `view`; `out` carries on (several NodeFeatureRules in a row)."""
    out = out if out is not None else Outcome()
    for rule in rules:
        matched = match_rule(rule, view)
        if matched is None:
            continue
        out.matched_rules.append(rule.where)
        labels: dict[str, str] = {}
        variables: dict[str, str] = {}
        for template, into, fld in (
            (rule.labels_template, labels, "labelsTemplate"),
            (rule.vars_template, variables, "varsTemplate"),
        ):
            if template:
                made, bad = render_labels(template, matched)
                into.update(made)
                out.warnings.extend(Problem(f"{rule.where}.{fld}", b) for b in bad)
        labels.update(_values(rule, rule.labels, view, out))  # labels win over the template
        variables.update(_values(rule, rule.vars, view, out))
        view.matched.update(variables)
        view.matched.update(labels)
        _named(rule, "label", labels, out.labels, out)
        _named(rule, "annotation", _values(rule, rule.annotations, view, out), out.annotations, out)
        resources = _values(rule, rule.extended_resources, view, out)
        for key, value in list(resources.items()):
            if not _QUANTITY.match(value):
                out.warnings.append(
                    Problem(f"{rule.where}.extendedResources.{key}", f"{value!r} is not a quantity; not set")
                )
                del resources[key]
        _named(rule, "extended resource", resources, out.extended_resources, out)
        for taint in rule.taints:
            out.taints[(taint.key, taint.effect)] = taint
    return out
