"""NFD's feature rules: the rule model, its parser, NFD's built-ins.

One language, two places: the worker's custom rules (`sources.custom` and `custom.d` files, read by
the discovery agent) and the `spec.rules` of NodeFeatureRule objects (read by the operator), which
may also set annotations, extended resources, taints and `varsTemplate` (`nodefeaturerule=True`).
Why a parser of its own: an admin brings the rules they wrote for NFD, and a typo in one rule must
cost that rule only. Every error names the field as written (`sources.custom[2].matchFeatures[0]
.matchExpressions.vendor.op`) and the rule is skipped; the others and the built-ins still apply.
Both of NFD's formats are read: `matchFeatures`/`matchAny` expressions, and the legacy `matchOn`
(pciId, usbId, loadedKMod, cpuId, kConfig, nodename), which is translated into expressions here
so that evaluation knows one format only. Pure: no I/O, so both sides may import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import yaml

from sro.api.problems import Problem
from sro.nfd.templating import compile_template

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

OPS = ("In", "NotIn", "InRegexp", "Exists", "DoesNotExist", "Gt", "Ge", "Lt", "Le", "GtLt", "GeLe",
       "IsTrue", "IsFalse")  # fmt: skip
NO_VALUES = ("Exists", "DoesNotExist", "IsTrue", "IsFalse")
ONE_OR_MORE = ("In", "NotIn", "InRegexp")
NUMERIC = {"Gt": 1, "Ge": 1, "Lt": 1, "Le": 1, "GtLt": 2, "GeLe": 2}
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Namespaces under kubernetes.io that NFD lets rules write to (labels, annotations, resources, taints).
ALLOWED_K8S_NS = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")
_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """NFD's `type: version`: `%d.%d.%d`, `%d.%d` or `%d`; anything after the numbers is ignored."""
    m = _VERSION.match(text.strip())
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0))


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


def _exists(*keys: str) -> tuple[tuple[str, Expr], ...]:
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
        match_features=(Term("kernel.loadedmodule", _exists("ib_uverbs", "rdma_ucm")),),
    ),
)


def parse_rules(
    value: object, where: str = "sources.custom", *, nodefeaturerule: bool = False
) -> tuple[tuple[Rule, ...], tuple[Problem, ...]]:
    """A list of rules -> good rules, and one problem per bad rule (which is skipped)."""
    if value is None:
        return (), ()
    if not isinstance(value, list):
        return (), (Problem(where, f"expected a list of rules, got {type(value).__name__}; ignored"),)
    rules: list[Rule] = []
    problems: list[Problem] = []
    for i, item in enumerate(value):
        path = f"{where}[{i}]"
        try:
            rule = parse_rule(item, path, nodefeaturerule=nodefeaturerule)
        except RuleError as e:
            name = item.get("name") if isinstance(item, Mapping) else None
            which = f"rule {name!r}" if isinstance(name, str) and name else "rule"
            problems.append(Problem(e.path, f"{e}; {which} skipped"))
            continue
        if rule.produces_nothing:
            what = (
                "labels, labelsTemplate, annotations, extendedResources, taints, vars or varsTemplate"
                if nodefeaturerule
                else "labels, labelsTemplate or vars"
            )
            problems.append(Problem(path, f"rule {rule.name!r} has no {what}; it produces nothing"))
        rules.append(rule)
    return tuple(rules), tuple(problems)


@lru_cache(maxsize=64)
def parse_rules_file(text: str, where: str) -> tuple[tuple[Rule, ...], tuple[Problem, ...]]:
    """A `custom.d` file (a YAML list of rules); cached by content, as it is re-read every pass."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return (), (Problem(where, f"not valid YAML ({str(e).splitlines()[0]}); ignored"),)
    return parse_rules(doc, where)


def parse_rule(doc: object, path: str, *, nodefeaturerule: bool = False) -> Rule:
    """One rule; RuleError names the first bad field. `nodefeaturerule`: NodeFeatureRule's fields
    (annotations, extendedResources, taints, varsTemplate) and any feature name (NodeFeature
    objects of other vendors bring their own) are accepted."""
    if not isinstance(doc, Mapping):
        raise RuleError(path, f"expected a mapping with `name` and `matchFeatures`, got {type(doc).__name__}")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        raise RuleError(f"{path}.name", "required: a non-empty string")
    if any(k.lower() == "matchon" for k in doc if isinstance(k, str)):
        if nodefeaturerule:
            raise RuleError(
                f"{path}.matchOn", "the legacy matchOn format is for the worker's custom rules only"
            )
        return _parse_legacy(doc, name, path)
    known = {"name", "labels", "labelsTemplate", "vars", "varsTemplate", "matchFeatures", "matchAny",
             "annotations", "taints", "extendedResources"}  # fmt: skip
    for key in doc:
        if key not in known:
            raise RuleError(f"{path}.{key}", "unknown field")
    if not nodefeaturerule:
        for key in ("annotations", "taints", "extendedResources", "varsTemplate"):
            if doc.get(key):
                raise RuleError(
                    f"{path}.{key}", "not available in the worker's custom rules (NodeFeatureRule only)"
                )
    labels = _string_map(doc.get("labels"), f"{path}.labels")
    template = _template(doc, "labelsTemplate", path)
    match_any = doc.get("matchAny") or []
    if not isinstance(match_any, list):
        raise RuleError(f"{path}.matchAny", f"expected a list, got {type(match_any).__name__}")
    groups = []
    for j, item in enumerate(match_any):
        if not isinstance(item, Mapping) or set(item) - {"matchFeatures"}:
            raise RuleError(f"{path}.matchAny[{j}]", "expected a mapping with only `matchFeatures`")
        groups.append(
            _terms(item.get("matchFeatures"), f"{path}.matchAny[{j}].matchFeatures", nodefeaturerule)
        )
    return Rule(
        name.strip(),
        path,
        labels=labels,
        vars=_string_map(doc.get("vars"), f"{path}.vars"),
        labels_template=template,
        match_features=_terms(doc.get("matchFeatures"), f"{path}.matchFeatures", nodefeaturerule),
        match_any=tuple(groups),
        annotations=_string_map(doc.get("annotations"), f"{path}.annotations"),
        extended_resources=_string_map(doc.get("extendedResources"), f"{path}.extendedResources"),
        taints=_taints(doc.get("taints"), f"{path}.taints"),
        vars_template=_template(doc, "varsTemplate", path),
    )


def _template(doc: Mapping[str, Any], key: str, path: str) -> str:
    template = doc.get(key) or ""
    if not isinstance(template, str):
        raise RuleError(f"{path}.{key}", f"expected a string, got {type(template).__name__}")
    if template:
        try:
            compile_template(template)
        except ValueError as e:
            raise RuleError(f"{path}.{key}", str(e)) from None
    return template


def reserved_namespace(key: str) -> bool:
    """Kubernetes' own namespaces (`kubernetes.io`, `k8s.io` and below), but for NFD's two."""
    ns = key.split("/", 1)[0] if "/" in key else ""
    return ns.endswith(("kubernetes.io", "k8s.io")) and not any(
        ns == a or ns.endswith("." + a) for a in ALLOWED_K8S_NS
    )


def _taints(value: object, path: str) -> tuple[Taint, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RuleError(path, f"expected a list of {{key, value, effect}}, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            raise RuleError(where, "expected a mapping with `key`, `effect` and optionally `value`")
        for k in item:
            if k not in ("key", "value", "effect"):
                raise RuleError(f"{where}.{k}", "unknown field")
        key = item.get("key")
        if not isinstance(key, str) or not key:
            raise RuleError(f"{where}.key", "required: a non-empty string")
        if "/" not in key:
            raise RuleError(
                f"{where}.key", f"{key!r} has no namespace (e.g. example.com/{key}); NFD refuses it"
            )
        if reserved_namespace(key):
            raise RuleError(f"{where}.key", f"{key!r}: namespace reserved by Kubernetes")
        effect = item.get("effect")
        if effect not in TAINT_EFFECTS:
            raise RuleError(f"{where}.effect", f"expected one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
        raw = item.get("value")
        if isinstance(raw, Mapping | list):
            raise RuleError(f"{where}.value", f"expected a string, got {raw!r}")
        out.append(Taint(key, str(effect), "" if raw is None else _scalar(raw)))
    return tuple(out)


def _string_map(value: object, path: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise RuleError(path, f"expected a mapping of strings, got {type(value).__name__}")
    out = []
    for k, v in value.items():
        if not isinstance(k, str) or not k or isinstance(v, Mapping | list) or v is None:
            raise RuleError(f"{path}.{k}", f"expected a string value, got {v!r}")
        out.append((k, _scalar(v)))
    return tuple(out)


def _scalar(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _terms(value: object, path: str, any_feature: bool = False) -> tuple[Term, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RuleError(path, f"expected a list, got {type(value).__name__}")
    return tuple(_term(item, f"{path}[{i}]", any_feature) for i, item in enumerate(value))


def _term(doc: object, path: str, any_feature: bool = False) -> Term:
    if not isinstance(doc, Mapping):
        raise RuleError(path, "expected a mapping with `feature` and `matchExpressions`")
    for key in doc:
        if key not in ("feature", "matchExpressions", "matchName"):
            raise RuleError(f"{path}.{key}", "unknown field")
    feature = doc.get("feature")
    if any_feature and isinstance(feature, str) and feature.strip():
        feature = feature.strip()
    elif not isinstance(feature, str) or feature not in FEATURES:
        raise RuleError(
            f"{path}.feature", f"unknown feature {feature!r} (known: {', '.join(sorted(FEATURES))})"
        )
    kind = FEATURES.get(feature)
    exprs = doc.get("matchExpressions") or {}
    if not isinstance(exprs, Mapping):
        raise RuleError(
            f"{path}.matchExpressions", f"expected a mapping key -> {{op, value}}, got {type(exprs).__name__}"
        )
    parsed = []
    for key, spec in exprs.items():
        expr = parse_expr(spec, f"{path}.matchExpressions.{key}")
        if kind == FLAG and expr.op not in ("Exists", "DoesNotExist"):
            raise RuleError(
                f"{path}.matchExpressions.{key}.op",
                f"{feature} is a flag feature: only Exists and DoesNotExist apply, not {expr.op!r}",
            )
        parsed.append((str(key), expr))
    name = parse_expr(doc["matchName"], f"{path}.matchName") if doc.get("matchName") is not None else None
    return Term(feature, tuple(parsed), name)


def parse_expr(spec: object, path: str) -> Expr:
    if not isinstance(spec, Mapping):
        raise RuleError(path, f"expected a mapping with `op` and `value`, got {spec!r}")
    for key in spec:
        if key not in ("op", "value", "type"):
            raise RuleError(f"{path}.{key}", "unknown field")
    op = spec.get("op")
    if op not in OPS:
        raise RuleError(f"{path}.op", f"unknown op {op!r} (valid: {', '.join(OPS)})")
    raw = spec.get("value")
    values: tuple[str, ...]
    if raw is None:
        values = ()
    elif isinstance(raw, list):
        if any(isinstance(v, Mapping | list) or v is None for v in raw):
            raise RuleError(f"{path}.value", "expected a list of strings")
        values = tuple(_scalar(v) for v in raw)
    elif isinstance(raw, Mapping):
        raise RuleError(f"{path}.value", "expected a list of strings, got a mapping")
    else:
        values = (_scalar(raw),)
    kind = spec.get("type")
    if kind not in (None, "", "version"):
        raise RuleError(f"{path}.type", f"unknown type {kind!r} (valid: version)")
    version = kind == "version"
    if version and op not in NUMERIC:
        raise RuleError(f"{path}.type", f"type version applies to {', '.join(NUMERIC)} only, not {op}")
    if op in NO_VALUES and values:
        raise RuleError(f"{path}.value", f"{op} takes no values, got {list(values)}")
    if op in ONE_OR_MORE and not values:
        raise RuleError(f"{path}.value", f"{op} needs at least one value")
    if op in NUMERIC:
        if len(values) != NUMERIC[op]:
            raise RuleError(f"{path}.value", f"{op} needs exactly {NUMERIC[op]} value(s), got {len(values)}")
        nums: list[object] = []
        for v in values:
            n = parse_version(v) if version else _int(v)
            if n is None:
                what = "a version" if version else "an integer"
                raise RuleError(f"{path}.value", f"{op} needs {what}, got {v!r}")
            nums.append(n)
        if len(nums) == 2 and not nums[0] < nums[1]:  # type: ignore[operator]
            raise RuleError(
                f"{path}.value", f"{op} needs the first value below the second, got {list(values)}"
            )
    patterns: tuple[re.Pattern[str], ...] = ()
    if op == "InRegexp":
        compiled = []
        for i, v in enumerate(values):
            try:
                compiled.append(re.compile(v))
            except re.error as e:
                raise RuleError(f"{path}.value[{i}]", f"invalid regular expression {v!r} ({e})") from None
        patterns = tuple(compiled)
    return Expr(op, values, version, patterns)


def _int(text: str) -> int | None:
    try:
        return int(text.strip(), 10)
    except ValueError:
        return None


# Legacy `matchOn` matchers -> (feature, how each listed item becomes an expression).
def _parse_legacy(doc: Mapping[str, Any], name: str, path: str) -> Rule:
    """NFD's legacy rule: `custom-<name>=<value|true>` when any matcher of `matchOn` holds (OR of ANDs)."""
    for key in doc:
        if key not in ("name", "value", "matchOn"):
            raise RuleError(f"{path}.{key}", "unknown field in a legacy (matchOn) rule")
    matchers = doc.get("matchOn")
    if not isinstance(matchers, list) or not matchers:
        raise RuleError(f"{path}.matchOn", "expected a non-empty list of matchers")
    groups = []
    for j, m in enumerate(matchers):
        mpath = f"{path}.matchOn[{j}]"
        if not isinstance(m, Mapping) or not m:
            raise RuleError(mpath, "expected a mapping of pciId, usbId, loadedKMod, cpuId, kConfig, nodename")
        groups.append(tuple(_legacy_term(str(k), v, f"{mpath}.{k}") for k, v in m.items()))
    value = doc.get("value", "true")
    if isinstance(value, Mapping | list) or value is None:
        raise RuleError(f"{path}.value", f"expected a string, got {value!r}")
    key = name.strip() if "/" in name else f"custom-{name.strip()}"  # NFD prefixes legacy names only
    return Rule(name.strip(), path, labels=((key, _scalar(value)),), match_any=tuple(groups))


def _legacy_term(kind: str, value: object, path: str) -> Term:
    if kind in ("pciId", "usbId"):
        feature = "pci.device" if kind == "pciId" else "usb.device"
        fields = ("class", "vendor", "device") if kind == "usbId" else ("class", "vendor", "device",
                                                                     "subsystem_vendor", "subsystem_device")  # fmt: skip
        if not isinstance(value, Mapping) or not value:
            raise RuleError(path, f"expected a mapping of {', '.join(fields)} -> list of ids")
        exprs = []
        for key, ids in value.items():
            if key not in fields:
                raise RuleError(f"{path}.{key}", f"unknown field (valid: {', '.join(fields)})")
            exprs.append((str(key), Expr("In", _legacy_list(ids, f"{path}.{key}", lower=True))))
        return Term(feature, tuple(exprs))
    items = _legacy_list(value, path)
    if kind == "loadedKMod":
        return Term("kernel.loadedmodule", _exists(*items))
    if kind == "cpuId":
        return Term("cpu.cpuid", _exists(*items))
    if kind == "kConfig":
        exprs = []
        for item in items:
            flag, sep, want = item.partition("=")
            # a bare option means "set": built in or a module
            exprs.append((flag, Expr("In", (want,) if sep else ("y", "m"))))
        return Term("kernel.config", tuple(exprs))
    if kind == "nodename":
        return Term(
            "system.name", (("nodename", parse_expr({"op": "InRegexp", "value": list(items)}, path)),)
        )
    raise RuleError(path, "unknown matcher (valid: pciId, usbId, loadedKMod, cpuId, kConfig, nodename)")


def _legacy_list(value: object, path: str, lower: bool = False) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not value
        or any(isinstance(v, Mapping | list) or v is None for v in value)
    ):
        raise RuleError(path, "expected a non-empty list of strings")
    return tuple(_scalar(v).lower() if lower else _scalar(v) for v in value)
