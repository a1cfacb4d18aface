"""NFD's `custom` feature source: rules over every other source's raw features -> labels.

Why here and pure: NFD evaluates custom rules against the raw features of all sources, not against
labels, so a rule can ask for a PCI vendor while the pci source labels only classes. `evaluate`
takes the pass's SourceResults and the parsed rules and returns labels (no I/O), after mapping
sro's raw features onto NFD's feature names (`pci.device`, `kernel.loadedmodule`, ...). NFD's
built-in rules (rdma.capable, rdma.available) run first, then the config's rules, in order;
each matched rule's labels and vars are visible to the rules after it as `rule.matched`.
Naming is today's NFD: a rule label without a namespace gets `feature.node.kubernetes.io/` (no
`custom-`; only legacy `matchOn` rules and the built-ins are named `custom-...`).
The source's own discovery reads only the node name, for `system.name` (legacy `nodename`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sro.api.names import NFD_PREFIX
from sro.host.reading import HostReader, Problem
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features, SourceResult
from sro.node.discovery.rules import (
    ATTRIBUTE,
    BUILTIN_RULES,
    FEATURES,
    FLAG,
    INSTANCE,
    Expr,
    Rule,
    Term,
    parse_rules_file,
    parse_version,
)
from sro.node.discovery.templating import render_labels

NAME = "custom"
CUSTOM_D = Path("kubernetes/node-feature-discovery/custom.d")  # under the host's etc, as in NFD
MAX_RULES_FILE = 256 * 1024
ALLOWED_K8S_NS = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")


@dataclass(frozen=True)
class FeatureSet:
    """One NFD feature (`pci.device`): its type and elements."""

    kind: str
    flags: frozenset[str] = frozenset()
    attrs: Attrs = field(default_factory=dict)
    instances: tuple[Attrs, ...] = ()


class FeatureView:
    """NFD's feature names over sro's raw features; each feature is built on first use only."""

    def __init__(self, results: Sequence[SourceResult]) -> None:
        self._by_source = {r.source: r.features for r in results}
        self._cache: dict[str, FeatureSet | None] = {}
        self.matched: dict[str, str] = {}  # `rule.matched`: earlier rules' labels and vars

    def get(self, name: str) -> FeatureSet | None:
        if name == "rule.matched":
            return FeatureSet(ATTRIBUTE, attrs=self.matched)
        if name not in self._cache:
            self._cache[name] = self._build(name)
        return self._cache[name]

    def _build(self, name: str) -> FeatureSet | None:
        kind = FEATURES.get(name)
        source, _, feature = name.partition(".")
        if name == "system.name":
            source, feature = NAME, "name"
        raw = self._by_source.get(source)
        if kind is None or raw is None:
            return None
        if kind == FLAG:
            flags = raw.flags.get(feature)
            return None if flags is None else FeatureSet(FLAG, flags=flags)
        if kind == INSTANCE:
            instances = raw.instances.get(feature)
            return None if instances is None else FeatureSet(INSTANCE, instances=instances)
        attrs = raw.attributes.get(feature)
        if attrs is None:
            return None
        if name == "system.osrelease" and "VERSION_ID" in attrs:
            major, _, rest = attrs["VERSION_ID"].partition(".")
            extra = {"VERSION_ID.major": major} if major.isdigit() else {}
            minor = rest.partition(".")[0]
            if extra and minor.isdigit():
                extra["VERSION_ID.minor"] = minor
            attrs = {**attrs, **extra}
        return FeatureSet(ATTRIBUTE, attrs=attrs)


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
    n = _int(text)
    return None if n is None else (n,)


def _int(text: str) -> int | None:
    try:
        return int(text.strip(), 10)
    except ValueError:
        return None


Element = Mapping[str, str]


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


def match_rule(rule: Rule, view: FeatureView) -> dict[str, dict[str, list[Element]]] | None:
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
    `custom-`; NFD's worker stopped prefixing rule labels); Kubernetes' own namespaces refused."""
    if "/" not in key:
        return f"{NFD_PREFIX}{key}"
    ns = key.split("/", 1)[0]
    if ns.endswith(("kubernetes.io", "k8s.io")) and not any(
        ns == a or ns.endswith("." + a) for a in ALLOWED_K8S_NS
    ):
        return None
    return key


def _resolve(value: str, view: FeatureView) -> str | None:
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


def evaluate(
    results: Sequence[SourceResult], rules: Sequence[Rule], *, builtins: bool = True
) -> tuple[dict[str, str], list[Problem]]:
    """Raw features + rules -> labels (NFD's full keys), and a warning per label not made."""
    view = FeatureView(results)
    labels: dict[str, str] = {}
    warnings: list[Problem] = []
    for rule in (*BUILTIN_RULES, *rules, *directory_rules(results)) if builtins else rules:
        matched = match_rule(rule, view)
        if matched is None:
            continue
        out: dict[str, str] = {}
        if rule.labels_template:
            made, bad = render_labels(rule.labels_template, matched)
            out.update(made)
            warnings.extend(Problem(f"{rule.where}.labelsTemplate", b) for b in bad)
        for pairs, into in ((rule.labels, out), (rule.vars, None)):
            for key, raw in pairs:
                value = _resolve(raw, view)
                if value is None:
                    warnings.append(
                        Problem(f"{rule.where}", f"{raw!r} names no feature value; {key} not set")
                    )
                    continue
                if into is None:
                    view.matched[key] = value
                else:
                    into[key] = value
        for key, value in out.items():
            view.matched[key] = value
            full = label_key(key)
            if full is None:
                warnings.append(
                    Problem(f"{rule.where}", f"label {key}: namespace reserved by Kubernetes; not published")
                )
                continue
            labels[full] = value
    return labels, warnings


def sources_used(
    rules: Sequence[Rule], results: Sequence[SourceResult] = (), *, builtins: bool = True
) -> frozenset[str]:
    """The sources whose features the rules read: a failed read there makes custom labels stale-kept."""
    names: set[str] = {NAME}  # a custom.d file that failed to read
    for rule in (*BUILTIN_RULES, *rules, *directory_rules(results)) if builtins else rules:
        for feature in rule.features:
            names.add(NAME if feature == "system.name" else feature.partition(".")[0])
    return frozenset(names)


def directory_rules(results: Sequence[SourceResult]) -> tuple[Rule, ...]:
    """The rules of the `custom.d` files this pass read (parsed once per content)."""
    files = next((r.features.attributes.get("rules", {}) for r in results if r.source == NAME), {})
    return tuple(rule for path, text in files.items() for rule in parse_rules_file(text, path)[0])


def _is_dir(reader: HostReader, path: Path) -> bool:
    probe = HostReader(reader.host, recording=reader.recording)
    probe.list_dir(path)
    return not probe.problems


class CustomSource:
    """Reads the node name (NFD's `system.name`) and NFD's `custom.d` rule files; `evaluate` labels."""

    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        # NFD takes NODE_NAME (the pod's spec.nodeName); a host without it is named by its hostname.
        node = os.environ.get("NODE_NAME") or reader.read_value(reader.host.proc / "sys/kernel/hostname")
        attributes: dict[str, Attrs] = {"name": {"nodename": node}} if node else {}
        files = self._rule_files(reader, reader.host.etc / CUSTOM_D, nested=True)
        if files:
            attributes["rules"] = files
        return Features(attributes=attributes)

    def _rule_files(self, reader: HostReader, directory: Path, *, nested: bool) -> dict[str, str]:
        """NFD's custom.d: its files and those of its first-level subdirectories, hidden ones skipped."""
        files: dict[str, str] = {}
        for name in reader.list_dir(directory):
            path = directory / name
            if _is_dir(reader, path):
                if nested:
                    files.update(self._rule_files(reader, path, nested=False))
                continue
            text = reader.read_text(path, limit=MAX_RULES_FILE)
            if text is None:
                continue
            for p in parse_rules_file(text, str(path))[1]:
                reader.warn(p.path, p.message)  # the author's to fix: reported, the other rules apply
            files[str(path)] = text
        return files

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        return {}


SOURCE = CustomSource()
