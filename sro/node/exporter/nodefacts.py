"""What the exporter reports from its own Node (pure): allocatable devices and the stack's state.

Allocatable comes from the Node's status because kubelet 1.20's pod-resources API cannot say it
(`GetAllocatableResources` is 1.21+); only the recipe's resources count (same domain: `nvidia.com/gpu`,
`nvidia.com/gpu.shared`, `nvidia.com/mig-1g.10gb`). The stack's state comes from the labels the
operator keeps on the Node: `sro.dev/<sr>.<state>=ready` for each ordered state and
`sro.dev/<sr>.validated=true` once every state is; each SpecialResource seen in those labels (or
named with `--sr`) gets one series per state, 1 when ready, plus `state="validated"`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sro.api.names import PREFIX, READY, STATE_NAMES, state_label, validated_label
from sro.node.exporter.attribution import in_domain

VALIDATED = "validated"


@dataclass(frozen=True)
class NodeFacts:
    allocatable: Mapping[str, int] = field(default_factory=dict)  # recipe resource -> count
    stack: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)  # sr -> state -> ready
    problems: tuple[str, ...] = ()


def specialresources(labels: Iterable[str]) -> set[str]:
    """SpecialResource names that have a state or validated label on the node."""
    found = set()
    for key in labels:
        if not key.startswith(PREFIX):
            continue
        name = key[len(PREFIX) :]
        for state in (*STATE_NAMES, VALIDATED):
            if name.endswith("." + state) and len(name) > len(state) + 1:
                found.add(name[: -len(state) - 1])
    return found


def facts(
    labels: Mapping[str, str], allocatable: Mapping[str, str], domain: str, srs: Iterable[str] = ()
) -> NodeFacts:
    counts: dict[str, int] = {}
    problems = []
    for resource, quantity in sorted(allocatable.items()):
        if not in_domain(resource, domain):
            continue
        try:
            counts[resource] = int(quantity)
        except ValueError:
            problems.append(f"allocatable {resource}={quantity!r} is not a whole number")
    stack: dict[str, dict[str, bool]] = {}
    for sr in sorted(specialresources(labels) | set(srs)):
        states = {s: labels.get(state_label(sr, s)) == READY for s in STATE_NAMES}
        states[VALIDATED] = labels.get(validated_label(sr)) == "true"
        stack[sr] = states
    return NodeFacts(counts, stack, tuple(problems))
