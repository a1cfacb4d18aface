"""Raw features -> node labels under NFD's options; pure, so every rule has a unit test.

Applies, in NFD's order: enabled label sources (`core.labelSources`), each source's own rules
(class whitelist, label fields, cpuid black/whitelist, kernel configOpts, ...; NFD's custom rules over
all sources' raw features, in the custom source's place), then
`core.labelWhiteList` (matched against the name after the '/'), then Kubernetes' rules for label
keys and values (an invalid one is dropped with a problem naming it, never sent to the API).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from sro.api.names import NFD_PREFIX, PREFIX
from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.host.reading import Problem
from sro.nfd.matching import label_problem
from sro.node.discovery import custom
from sro.node.discovery.config import Config
from sro.node.discovery.features import Features, FeatureSource, SourceResult
from sro.node.discovery.remembered import Remembered, on_forget

# Kubernetes' label checks (three regexes) for each label of every pass: a node's labels change
# rarely, so the answers are remembered (pure function of key and value; bounded).
_label_problem = lru_cache(maxsize=4096)(label_problem)

# The accelerator source's keys: GFD's, the simulated GPU's, and every custom recipe's
# `sro.dev/<name>.` (count, product, simulated). Only keys in discovery's ownership record are ever
# mapped back to a source, so another writer's `sro.dev/` label (the operator's state labels, an
# opt-in `sro.dev/<name>.enabled`) is never taken for ours, nor removed.
ACCELERATOR_PREFIXES = (NVIDIA_GPU.label_prefix, SIMULATED_GPU.label_prefix, PREFIX)


@dataclass(frozen=True)
class Labeling:
    labels: Mapping[str, str]
    degraded: frozenset[str]  # sources with a failed read this pass: keep their old labels
    problems: tuple[Problem, ...]  # failed reads (degrading)
    warnings: tuple[Problem, ...]  # dropped labels, bad config fields, bad lines (not degrading)


def source_of_key(key: str, source_names: Sequence[str]) -> str:
    """Which source a label key belongs to, for keys we published in an earlier pass."""
    if key.startswith(ACCELERATOR_PREFIXES):
        return "accelerators"
    if key.startswith(NFD_PREFIX):
        head = key[len(NFD_PREFIX) :].split("-", 1)[0]
        if head in source_names and head != "local":
            return head
    return "local"


def keep_stale(labeling: Labeling, source_names: Sequence[str]) -> Callable[[str], bool]:
    """For the publisher: keep an old label when its source had a failed read this pass."""
    degraded = labeling.degraded
    return lambda key: source_of_key(key, source_names) in degraded


Checked = tuple[tuple[tuple[str, str], ...], tuple[Problem, ...]]  # labels kept, and why others were not


def _check(produced: Mapping[str, str], config: Config) -> Checked:
    """A source's labels under `core.labelWhiteList` and Kubernetes' rules, in key order."""
    kept: list[tuple[str, str]] = []
    dropped: list[Problem] = []
    whitelist = config.label_whitelist
    for key, value in sorted(produced.items()):
        if whitelist is not None and not whitelist.search(key.rpartition("/")[2]):
            continue
        why = _label_problem(key, value)
        if why:
            dropped.append(Problem(f"label {key}", f"{why}; not published"))
            continue
        kept.append((key, value))
    return tuple(kept), tuple(dropped)


def _labels_of(_: str, content: tuple[FeatureSource, Features, Config]) -> Checked:
    source, features, config = content
    return _check(source.labels(features, config), config)


# A source's checked labels are a pure function of its features and the config, and a node's
# features rarely change between passes: remembered per source while both are equal
# (sro.node.discovery.remembered; comparing them costs a fraction of deriving and checking again).
_checked_labels: Remembered[tuple[FeatureSource, Features, Config], Checked] = Remembered(_labels_of, size=32)
on_forget(_label_problem.cache_clear)


def build_labels(
    results: Sequence[SourceResult], config: Config, sources: Sequence[FeatureSource]
) -> Labeling:
    by_name = {s.name: s for s in sources}
    labels: dict[str, str] = {}
    problems: list[Problem] = []
    warnings: list[Problem] = list(config.problems)
    degraded = set()
    for result in results:
        problems.extend(result.problems)
        warnings.extend(result.warnings)
        if result.degraded:
            degraded.add(result.source)
        if not config.label_enabled(result.source) or result.source not in by_name:
            continue
        if result.source == custom.NAME:  # over every source's features: evaluated each pass
            produced, rule_warnings = custom.evaluate(results, config.custom_rules)
            warnings.extend(rule_warnings)
            kept, dropped = _check(produced, config)
        else:
            kept, dropped = _checked_labels(result.source, (by_name[result.source], result.features, config))
        warnings.extend(dropped)
        for key, value in kept:
            if key in labels and labels[key] != value:
                warnings.append(
                    Problem(f"label {key}", f"{result.source} overrides {labels[key]!r} with {value!r}")
                )
            labels[key] = value
    if degraded & custom.sources_used(config.custom_rules, results):
        degraded.add(custom.NAME)  # a rule over a failed read could flip: keep its labels this pass
    return Labeling(dict(sorted(labels.items())), frozenset(degraded), tuple(problems), tuple(warnings))
