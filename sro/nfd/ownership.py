"""Who owns which node label, annotation, extended resource and taint: the two records on the Node.

Two writers of feature labels, each touching only what it recorded as its own, so that neither
ever takes away the other's labels or one an admin set by hand:
- the discovery agent (`sro discover --publish`) records its labels in `sro.dev/feature-labels`
  (a comma-separated list, NFD's default namespace left out: NFD's own format);
- the operator's NodeFeatureRule step records what it applied in `sro.dev/nodefeaturerule-owned`
  (JSON: labels, annotations, extendedResources, taints).
Each reads the other's record only to hand labels over when the agent stops labelling the Node
itself (`core.noNodeLabels`): the operator takes a label the agent recorded and its own
NodeFeature still asks for, and the agent then forgets it. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from sro.api.names import NFD_PREFIX

FEATURE_LABELS_ANNOTATION: Final = "sro.dev/feature-labels"
RULES_OWNED_ANNOTATION: Final = "sro.dev/nodefeaturerule-owned"


def encode_feature_labels(keys: Iterable[str]) -> str:
    return ",".join(sorted(k.removeprefix(NFD_PREFIX) for k in keys))


def decode_feature_labels(value: str) -> set[str]:
    out = set()
    for item in value.split(","):
        item = item.strip()
        if item:
            out.add(item if "/" in item else NFD_PREFIX + item)
    return out


TaintId = tuple[str, str, str]  # key, value, effect


@dataclass(frozen=True)
class Owned:
    """What the NodeFeatureRule step applied to one node."""

    labels: frozenset[str] = frozenset()
    annotations: frozenset[str] = frozenset()
    extended_resources: frozenset[str] = frozenset()
    taints: frozenset[TaintId] = frozenset()

    def encode(self) -> str | None:
        """The annotation's value; None (remove it) when nothing is owned."""
        if not (self.labels or self.annotations or self.extended_resources or self.taints):
            return None
        doc = {
            "labels": sorted(self.labels),
            "annotations": sorted(self.annotations),
            "extendedResources": sorted(self.extended_resources),
            "taints": [{"key": k, "value": v, "effect": e} for k, v, e in sorted(self.taints)],
        }
        return json.dumps({k: v for k, v in doc.items() if v}, sort_keys=True, separators=(",", ":"))


def decode_owned(value: str | None) -> Owned:
    """The record, or nothing owned when it is absent or unreadable (nothing is removed then)."""
    if not value:
        return Owned()
    try:
        return _decode_owned(value)
    except Exception:  # anyone who may patch nodes writes it: any failure (RecursionError) is garbage
        return Owned()


def _decode_owned(value: str) -> Owned:
    doc = json.loads(value)
    if not isinstance(doc, dict):
        return Owned()

    def keys(name: str) -> frozenset[str]:
        items = doc.get(name)
        return frozenset(i for i in items if isinstance(i, str)) if isinstance(items, list) else frozenset()

    taints = doc.get("taints")
    return Owned(
        labels=keys("labels"),
        annotations=keys("annotations"),
        extended_resources=keys("extendedResources"),
        taints=frozenset(
            (str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
            for t in (taints if isinstance(taints, list) else [])
            if isinstance(t, dict) and t.get("key")
        ),
    )
