"""NFD's NodeFeature objects as data: features to and from `spec.features`, several merged per node.

Why here: the discovery agent writes its node's raw features as a NodeFeature (`to_spec`), the
operator reads every NodeFeature of the cluster and evaluates NodeFeatureRules over them
(`from_spec`, `merge`). NFD's model is kept exactly: `spec.features.flags.<name>.elements` is a map
of names to `{}`, `attributes.<name>.elements` a map of strings, `instances.<name>.elements` a list
of `{attributes: {...}}`; `spec.labels` are labels asked for directly. A node's objects are found by
the label `nfd.node.kubernetes.io/node-name`. Malformed parts of an object (another vendor's) are
skipped with a problem naming the field; the rest is used. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sro.api.nfd_crds import NODE_NAME_LABEL
from sro.api.problems import Problem
from sro.nfd.matching import FeatureSet
from sro.nfd.model import ATTRIBUTE, FLAG, INSTANCE


def to_spec(features: Mapping[str, FeatureSet]) -> dict[str, Any]:
    """FeatureSets by NFD name -> NodeFeature `spec.features` (sorted, so equal inputs give equal docs)."""
    flags: dict[str, Any] = {}
    attributes: dict[str, Any] = {}
    instances: dict[str, Any] = {}
    for name, fs in sorted(features.items()):
        if fs.kind == FLAG:
            flags[name] = {"elements": {f: {} for f in sorted(fs.flags)}}
        elif fs.kind == ATTRIBUTE:
            attributes[name] = {"elements": {k: str(v) for k, v in sorted(fs.attrs.items())}}
        else:
            instances[name] = {
                "elements": [{"attributes": {k: str(v) for k, v in sorted(i.items())}} for i in fs.instances]
            }
    return {"flags": flags, "attributes": attributes, "instances": instances}


@dataclass(frozen=True)
class NodeFeatures:
    """What the NodeFeature objects of one node say, merged."""

    features: Mapping[str, FeatureSet] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    sources: tuple[str, ...] = ()  # `namespace/name` of each object, in merge order


def target_node(doc: Mapping[str, Any]) -> str:
    """The node a NodeFeature is for (its `nfd.node.kubernetes.io/node-name` label), or ""."""
    labels = (doc.get("metadata") or {}).get("labels") or {}
    value = labels.get(NODE_NAME_LABEL, "")
    return value if isinstance(value, str) else ""


def _where(doc: Mapping[str, Any]) -> str:
    md = doc.get("metadata") or {}
    return f"NodeFeature {md.get('namespace', '')}/{md.get('name', '')}"


def from_spec(doc: Mapping[str, Any]) -> tuple[dict[str, FeatureSet], dict[str, str], list[Problem]]:
    """One NodeFeature object -> its features, its labels, and a problem per part skipped."""
    where = _where(doc)
    problems: list[Problem] = []
    spec = doc.get("spec") or {}
    features: dict[str, FeatureSet] = {}
    raw = spec.get("features") or {} if isinstance(spec, Mapping) else {}
    if not isinstance(raw, Mapping):
        return {}, {}, [Problem(f"{where} spec.features", "expected a mapping; ignored")]
    for kind, key in ((FLAG, "flags"), (ATTRIBUTE, "attributes"), (INSTANCE, "instances")):
        section = raw.get(key) or {}
        if not isinstance(section, Mapping):
            problems.append(Problem(f"{where} spec.features.{key}", "expected a mapping; ignored"))
            continue
        for name, body in section.items():
            path = f"{where} spec.features.{key}.{name}"
            elements = body.get("elements") if isinstance(body, Mapping) else None
            fs = _feature_set(kind, elements)
            if fs is None:
                problems.append(Problem(path, "malformed elements; feature ignored"))
                continue
            features[str(name)] = fs
    labels: dict[str, str] = {}
    raw_labels = spec.get("labels") or {} if isinstance(spec, Mapping) else {}
    if isinstance(raw_labels, Mapping):
        labels = {str(k): str(v) for k, v in raw_labels.items() if isinstance(v, str | int | float)}
    else:
        problems.append(Problem(f"{where} spec.labels", "expected a mapping of strings; ignored"))
    return features, labels, problems


def _feature_set(kind: str, elements: object) -> FeatureSet | None:
    if kind == FLAG:
        if elements is None:
            return FeatureSet(FLAG)
        return (
            FeatureSet(FLAG, flags=frozenset(str(k) for k in elements))
            if isinstance(elements, Mapping)
            else None
        )
    if kind == ATTRIBUTE:
        if elements is None:
            return FeatureSet(ATTRIBUTE)
        if not isinstance(elements, Mapping):
            return None
        return FeatureSet(ATTRIBUTE, attrs={str(k): str(v) for k, v in elements.items() if v is not None})
    if elements is None:
        return FeatureSet(INSTANCE)
    if not isinstance(elements, list):
        return None
    instances = []
    for item in elements:
        attrs = item.get("attributes") if isinstance(item, Mapping) else None
        if not isinstance(attrs, Mapping):
            return None
        instances.append({str(k): str(v) for k, v in attrs.items() if v is not None})
    return FeatureSet(INSTANCE, instances=tuple(instances))


def merge(docs: Iterable[Mapping[str, Any]]) -> tuple[dict[str, NodeFeatures], list[Problem]]:
    """Every NodeFeature object -> what each node's objects say together.

    Objects are merged in order of namespace and name: flags are united, attributes of a later object
    win, instances are appended, labels of a later object win. An object without the node-name
    label targets no node and is skipped (reported).
    """
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    problems: list[Problem] = []
    for doc in docs:
        node = target_node(doc)
        if not node:
            problems.append(Problem(_where(doc), f"no {NODE_NAME_LABEL} label: targets no node; ignored"))
            continue
        by_node.setdefault(node, []).append(doc)
    out: dict[str, NodeFeatures] = {}
    for node, objs in by_node.items():
        objs.sort(
            key=lambda d: (
                (d.get("metadata") or {}).get("namespace", ""),
                (d.get("metadata") or {}).get("name", ""),
            )
        )
        features: dict[str, FeatureSet] = {}
        labels: dict[str, str] = {}
        for doc in objs:
            feats, labs, bad = from_spec(doc)
            problems.extend(bad)
            labels.update(labs)
            for name, fs in feats.items():
                have = features.get(name)
                features[name] = fs if have is None or have.kind != fs.kind else _merge(have, fs)
        out[node] = NodeFeatures(
            features, labels, tuple(_where(d).removeprefix("NodeFeature ") for d in objs)
        )
    return out, problems


def _merge(a: FeatureSet, b: FeatureSet) -> FeatureSet:
    if a.kind == FLAG:
        return FeatureSet(FLAG, flags=a.flags | b.flags)
    if a.kind == ATTRIBUTE:
        return FeatureSet(ATTRIBUTE, attrs={**a.attrs, **b.attrs})
    return FeatureSet(INSTANCE, instances=a.instances + b.instances)
