"""Which of a SpecialResource's taints a node carries: the startup taint and the partitioning taint.

Why apart: the walk adds and removes them, releasing a node takes them off, and the cluster side
applies a patch to a node's taint list; all three must match a taint the same way (by key, and by
value where the value says whose it is) and never touch a taint that is not sro's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sro.api.names import not_ready_taint
from sro.operator import partitioning
from sro.operator.observed import NodeInfo
from sro.operator.plan import NodePatch, Taint
from sro.operator.rendering import Context


def taint_matches(taint: Mapping[str, Any], key: str, value: str | None) -> bool:
    return taint.get("key") == key and (value is None or taint.get("value") == value)


def _in_slot(taints: Sequence[Mapping[str, Any]], key: str, effect: str) -> bool:
    """Whether a taint with this key and effect is there: the API server keeps at most one per key
    and effect, and refuses (422) a taint list with two, so a patch must never add a second."""
    return any(o.get("key") == key and o.get("effect") == effect for o in taints)


def taints_after(taints: Sequence[Mapping[str, Any]], patch: NodePatch) -> list[dict[str, Any]]:
    """A node's taint list with the patch applied (others' taints untouched, nothing twice: a taint
    whose key and effect are taken by one left in place is not added)."""
    out = [dict(t) for t in taints if not any(taint_matches(t, k, v) for k, v in patch.remove_taints)]
    for t in patch.add_taints:
        if not _in_slot(out, t["key"], t["effect"]):
            out.append(dict(t))
    return out


def startup_taint(sr: str) -> dict[str, str]:
    return {"key": not_ready_taint(sr), "value": "true", "effect": "NoSchedule"}


def taint_changes(
    ctx: Context, node: NodeInfo, validated: bool
) -> tuple[tuple[Taint, ...], tuple[tuple[str, str | None], ...]]:
    """The startup taint until validated; the partitioning taint while asked for.

    The startup taint's key names the SpecialResource, so every taint with it is ours: one edited
    by hand (another value or effect) is replaced by ours — adding ours beside it would be a second
    taint of that key and effect, which the API server refuses, and the whole node patch (the
    state labels with it) would fail on every pass. The partitioning taint's key is the resource's
    name, shared: its value says whose it is, and a slot another value holds is left alone."""
    add: list[Taint] = []
    remove: list[tuple[str, str | None]] = []
    startup = startup_taint(ctx.sr)
    present = [t for t in node.taints if taint_matches(t, startup["key"], None)]
    if ctx.spec.startup_taint and not validated:
        if [{k: t.get(k) for k in startup} for t in present] != [startup]:  # missing or edited
            if present:
                remove.append((startup["key"], None))
            add.append(startup)
    elif present:
        remove.append((startup["key"], None))
    part = partitioning.taint(ctx.sr, ctx.recipe.resource)
    if ctx.spec.partitioning.taint:
        if not _in_slot(node.taints, part["key"], part["effect"]):
            add.append(part)
    elif any(taint_matches(t, part["key"], part["value"]) for t in node.taints):
        remove.append((part["key"], part["value"]))
    return tuple(add), tuple(remove)


def taints_to_release(sr: str, resource: str | None, node: NodeInfo) -> tuple[tuple[str, str | None], ...]:
    """The startup and partitioning taints of `sr` a node carries (the latter matched by key and
    value: the value is the SpecialResource's name), as a patch's `remove_taints`."""
    remove: list[tuple[str, str | None]] = []
    if any(taint_matches(t, not_ready_taint(sr), None) for t in node.taints):
        remove.append((not_ready_taint(sr), None))
    if resource:
        part = partitioning.taint(sr, resource)
        if any(taint_matches(t, part["key"], part["value"]) for t in node.taints):
            remove.append((part["key"], part["value"]))
    return tuple(remove)
