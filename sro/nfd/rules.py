"""NFD's feature rules: the parser of the rule language (records in `sro.nfd.model`).

One language, two places: the worker's custom rules (`sources.custom` and `custom.d` files, read by
the discovery agent) and the `spec.rules` of NodeFeatureRule objects (read by the operator), which
may also set annotations, extended resources, taints and `varsTemplate` (`nodefeaturerule=True`).
Why a parser of its own: an admin brings the rules they wrote for NFD, and a typo in one rule must
cost that rule only. Every error names the field as written (`sources.custom[2].matchFeatures[0]
.matchExpressions.vendor.op`) and the rule is skipped; the others and the built-ins still apply.
Both of NFD's formats are read: `matchFeatures`/`matchAny` expressions, and the legacy `matchOn`
(pciId, usbId, loadedKMod, cpuId, kConfig, nodename), which `sro.nfd.legacy` translates into
expressions so that evaluation knows one format only. Pure: no I/O, so both sides may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import yaml

from sro.api.problems import Problem
from sro.api.yamltext import yaml_error
from sro.nfd.expressions import parse_expr, scalar
from sro.nfd.legacy import parse_legacy
from sro.nfd.model import FEATURES, FLAG, Rule, RuleError, Taint, Term, refuse_unknown, reserved_namespace
from sro.nfd.templating import compile_template

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


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
        return (), (Problem(where, f"not valid YAML ({yaml_error(e)}); ignored"),)
    except Exception as e:  # RecursionError when nested past the stack: garbage all the same
        return (), (Problem(where, f"not readable as YAML ({type(e).__name__}); ignored"),)
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
        return parse_legacy(doc, name, path)
    known = {"name", "labels", "labelsTemplate", "vars", "varsTemplate", "matchFeatures", "matchAny",
             "annotations", "taints", "extendedResources"}  # fmt: skip
    refuse_unknown(doc, known, path)
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
        refuse_unknown(item, ("key", "value", "effect"), where)
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
        out.append(Taint(key, str(effect), "" if raw is None else scalar(raw)))
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
        out.append((k, scalar(v)))
    return tuple(out)


def _terms(value: object, path: str, any_feature: bool = False) -> tuple[Term, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RuleError(path, f"expected a list, got {type(value).__name__}")
    return tuple(_term(item, f"{path}[{i}]", any_feature) for i, item in enumerate(value))


def _term(doc: object, path: str, any_feature: bool = False) -> Term:
    if not isinstance(doc, Mapping):
        raise RuleError(path, "expected a mapping with `feature` and `matchExpressions`")
    refuse_unknown(doc, ("feature", "matchExpressions", "matchName"), path)
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
