"""Keeping this node's feature labels in step with discovery, touching only labels we own.

Ownership is recorded on the Node itself, in the annotation `sro.dev/feature-labels` (NFD keeps the
same record in `nfd.node.kubernetes.io/feature-labels`): a comma-separated list of the label keys
sro published, with NFD's default namespace left out. From it the pure `plan` decides:
- a discovered label is set unless the key already exists on the node and is not ours (then it is
  left alone and reported);
- a label we published before and no longer discover is removed, unless its source had a failed
  read in this pass (nothing is removed because we could not look);
- `cleanup` removes every label we own and the record itself.
With `core.noNodeLabels` (the default `sro install` configures) the agent does not label the Node at
all: the labels go in its NodeFeature, and the operator applies them and takes over what this record
lists (`sro.operator.nodefeaturerules`).
The Publisher applies a plan with the node's resourceVersion and re-plans on a conflict; the
daemon loop survives an API server that goes away (warns, retries with back-off).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sro.api.names import NFD_PREFIX
from sro.kube.nodes import NodeApiError, NodeMeta
from sro.nfd.ownership import (
    FEATURE_LABELS_ANNOTATION,
    RULES_OWNED_ANNOTATION,
    Owned,
    decode_feature_labels,
    encode_feature_labels,
)
from sro.nfd.ownership import decode_owned as decode_rules_owned

log = logging.getLogger(__name__)

OWNED_ANNOTATION = FEATURE_LABELS_ANNOTATION
MAX_CONFLICT_RETRIES = 5


class NodeApi(Protocol):
    def read(self, name: str) -> NodeMeta: ...

    def patch(
        self,
        name: str,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
        resource_version: str = "",
    ) -> NodeMeta: ...


def encode_owned(keys: Sequence[str] | set[str]) -> str:
    return encode_feature_labels(keys)


def decode_owned(value: str) -> set[str]:
    return decode_feature_labels(value)


@dataclass(frozen=True)
class Plan:
    set_labels: Mapping[str, str]
    remove_labels: tuple[str, ...]
    owned: tuple[str, ...]  # keys we own after the patch (sorted)
    annotation: str | None  # new value of the ownership record; None removes it
    foreign: tuple[str, ...] = ()  # discovered keys already set by someone else: left alone
    kept: tuple[str, ...] = ()  # stale keys kept because their source had a failed read
    record_changed: bool = False
    other_annotations: Mapping[str, str | None] = field(
        default_factory=dict
    )  # cleanup: the operator's record

    @property
    def changed(self) -> bool:
        return bool(self.set_labels or self.remove_labels or self.record_changed or self.other_annotations)

    def label_patch(self) -> dict[str, str | None]:
        patch: dict[str, str | None] = dict(self.set_labels)
        patch.update(dict.fromkeys(self.remove_labels))
        return patch


def plan(node: NodeMeta, desired: Mapping[str, str], keep: Callable[[str], bool] = lambda _: False) -> Plan:
    """The patch that makes `node` carry `desired`, within the keys we own (pure)."""
    record = node.annotations.get(OWNED_ANNOTATION)
    previous = decode_owned(record or "")
    owned: set[str] = set()
    to_set: dict[str, str] = {}
    foreign = []
    for key, value in desired.items():
        if key in node.labels and key not in previous:
            foreign.append(key)
            continue
        owned.add(key)
        if node.labels.get(key) != value:
            to_set[key] = value
    remove, kept = [], []
    for key in sorted(previous - desired.keys()):
        if key not in node.labels:
            continue  # someone removed it already; just forget it
        if keep(key):
            kept.append(key)
            owned.add(key)
        else:
            remove.append(key)
    annotation = encode_owned(owned)
    return Plan(
        set_labels=dict(sorted(to_set.items())),
        remove_labels=tuple(remove),
        owned=tuple(sorted(owned)),
        annotation=annotation,
        foreign=tuple(sorted(foreign)),
        kept=tuple(kept),
        record_changed=annotation != record,
    )


def cleanup_plan(node: NodeMeta) -> Plan:
    """Remove every label we own and the ownership record, and every label the operator applied (by
    default it applies discovery's labels, from the NodeFeature), struck from its record (pure)."""
    record = node.annotations.get(OWNED_ANNOTATION)
    operators = node.annotations.get(RULES_OWNED_ANNOTATION)
    applied = decode_rules_owned(operators)
    keys = decode_owned(record or "") | applied.labels
    remove = tuple(sorted(k for k in keys if k in node.labels))
    other: dict[str, str | None] = {}
    if applied.labels:
        rest = Owned(annotations=applied.annotations, extended_resources=applied.extended_resources,
                     taints=applied.taints).encode()  # fmt: skip
        if rest != operators:
            other[RULES_OWNED_ANNOTATION] = rest
    return Plan({}, remove, (), None, record_changed=record is not None, other_annotations=other)


class Publisher:
    """Applies plans to one Node; re-reads and re-plans when the Node changed under us."""

    def __init__(self, api: NodeApi, node_name: str) -> None:
        self.api = api
        self.node_name = node_name
        self._reported_foreign: tuple[str, ...] = ()

    def _apply(self, make_plan: Callable[[NodeMeta], Plan]) -> Plan:
        for attempt in range(MAX_CONFLICT_RETRIES):
            node = self.api.read(self.node_name)
            p = make_plan(node)
            if not p.changed:
                return p
            try:
                self.api.patch(
                    self.node_name,
                    p.label_patch(),
                    {**p.other_annotations, **({OWNED_ANNOTATION: p.annotation} if p.record_changed else {})},
                    node.resource_version,
                )
                return p
            except NodeApiError as e:
                if not e.conflict or attempt == MAX_CONFLICT_RETRIES - 1:
                    raise
                log.info("node %s changed while patching; re-reading", self.node_name)
        raise AssertionError("unreachable")

    def publish(self, desired: Mapping[str, str], keep: Callable[[str], bool] = lambda _: False) -> Plan:
        p = self._apply(lambda node: plan(node, desired, keep))
        if p.foreign and p.foreign != self._reported_foreign:
            log.warning(
                "node %s: labels set by someone else left alone (not published): %s",
                self.node_name,
                ", ".join(p.foreign),
            )
        self._reported_foreign = p.foreign
        if p.changed:
            changes = [*p.set_labels, *(f"-{k}" for k in p.remove_labels)]
            shown = ", ".join(k.removeprefix(NFD_PREFIX) for k in changes[:12])
            more = f" and {len(changes) - 12} more" if len(changes) > 12 else ""
            log.info(
                "node %s: set %d label(s), removed %d: %s%s",
                self.node_name,
                len(p.set_labels),
                len(p.remove_labels),
                shown,
                more,
            )
        return p

    def read(self) -> NodeMeta:
        return self.api.read(self.node_name)

    def cleanup(self) -> Plan:
        return self._apply(cleanup_plan)


@dataclass
class Backoff:
    """Seconds to wait after consecutive API failures: 1, 2, 4, ... capped at `cap`."""

    cap: float
    failures: int = 0

    def next(self) -> float:
        self.failures += 1
        return float(min(self.cap, 2 ** (self.failures - 1)))

    def reset(self) -> None:
        self.failures = 0


def wait(stop: threading.Event, seconds: float) -> bool:
    """Sleep until `stop` or timeout; True when asked to stop."""
    return stop.wait(seconds if seconds > 0 else None)
