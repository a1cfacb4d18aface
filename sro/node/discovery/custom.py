"""NFD's `custom` feature source: rules over every other source's raw features -> labels.

Why here and pure: NFD evaluates custom rules against the raw features of all sources, not against
labels, so a rule can ask for a PCI vendor while the pci source labels only classes. `evaluate`
takes the pass's SourceResults and the parsed rules and returns labels (no I/O), after mapping
sro's raw features onto NFD's feature names (`pci.device`, `kernel.loadedmodule`, ...; the same
names `nfd_features` gives the NodeFeature object). NFD's built-in rules (rdma.capable,
rdma.available) run first, then the config's rules, in order. The rule language itself (parsing,
matching, naming) is `sro.nfd`'s, shared with the operator's NodeFeatureRules.
The source's own discovery reads only the node name, for `system.name` (legacy `nodename`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from sro.host.reading import HostReader, Problem
from sro.nfd.matching import FeatureSet, run_rules
from sro.nfd.model import ATTRIBUTE, BUILTIN_RULES, FEATURES, FLAG, INSTANCE, Rule
from sro.nfd.rules import parse_rules_file
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features, SourceResult

NAME = "custom"
CUSTOM_D = Path("kubernetes/node-feature-discovery/custom.d")  # under the host's etc, as in NFD
MAX_RULES_FILE = 256 * 1024
NOT_FEATURES = frozenset({f"{NAME}.rules"})  # the custom.d files' text: input, not a feature


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
        if raw is None:
            return None
        if kind is None:  # not one of NFD's: sro's own (accelerators.*, cpu.cpuinfo_flags), by its section
            kind = next(
                (k for k, section in ((FLAG, raw.flags), (ATTRIBUTE, raw.attributes), (INSTANCE, raw.instances))
                 if feature in section),
                None,
            )  # fmt: skip
            if kind is None:
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


def evaluate(
    results: Sequence[SourceResult], rules: Sequence[Rule], *, builtins: bool = True
) -> tuple[dict[str, str], list[Problem]]:
    """Raw features + rules -> labels (NFD's full keys), and a warning per label not made."""
    out = run_rules(
        (*BUILTIN_RULES, *rules, *directory_rules(results)) if builtins else rules, FeatureView(results)
    )
    return out.labels, out.warnings


def nfd_features(results: Sequence[SourceResult]) -> dict[str, FeatureSet]:
    """Every raw feature of the pass under its NFD name (what a NodeFeature's spec.features holds)."""
    view = FeatureView(results)
    names: set[str] = set()
    for r in results:
        for section in (r.features.flags, r.features.attributes, r.features.instances):
            names.update(f"{r.source}.{feature}" for feature in section)
    out = {}
    for name in sorted(names - NOT_FEATURES):
        fs = view.get("system.name" if name == f"{NAME}.name" else name)
        if fs is not None:
            out["system.name" if name == f"{NAME}.name" else name] = fs
    return out


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


def _is_dir(reader: HostReader, path: str) -> bool:
    probe = HostReader(reader.host, recording=reader.recording)
    probe.list_dir(path)
    return not probe.problems


class CustomSource:
    """Reads the node name (NFD's `system.name`) and NFD's `custom.d` rule files; `evaluate` labels."""

    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        # NFD takes NODE_NAME (the pod's spec.nodeName); a host without it is named by its hostname.
        node = os.environ.get("NODE_NAME") or reader.read_value(f"{reader.host.proc}/sys/kernel/hostname")
        attributes: dict[str, Attrs] = {"name": {"nodename": node}} if node else {}
        files = self._rule_files(reader, f"{reader.host.etc}/{CUSTOM_D}", nested=True)
        if files:
            attributes["rules"] = files
        return Features(attributes=attributes)

    def _rule_files(self, reader: HostReader, directory: str, *, nested: bool) -> dict[str, str]:
        """NFD's custom.d: its files and those of its first-level subdirectories, hidden ones skipped."""
        files: dict[str, str] = {}
        for name in reader.list_dir(directory):
            path = f"{directory}/{name}"
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
