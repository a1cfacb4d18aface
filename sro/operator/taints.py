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


def taints_after(taints: Sequence[Mapping[str, Any]], patch: NodePatch) -> list[dict[str, Any]]:
    """A node's taint list with the patch applied (others' taints untouched, nothing twice)."""
    out = [dict(t) for t in taints if not any(taint_matches(t, k, v) for k, v in patch.remove_taints)]
    for t in patch.add_taints:
        if not any(
            taint_matches(o, t["key"], t.get("value")) and o.get("effect") == t["effect"] for o in out
        ):
            out.append(dict(t))
    return out


def startup_taint(sr: str) -> dict[str, str]:
    return {"key": not_ready_taint(sr), "value": "true", "effect": "NoSchedule"}


def taint_changes(
    ctx: Context, node: NodeInfo, validated: bool
) -> tuple[tuple[Taint, ...], tuple[tuple[str, str | None], ...]]:
    """The startup taint until validated; the partitioning taint while asked for."""
    wanted = []
    if ctx.spec.startup_taint and not validated:
        wanted.append(startup_taint(ctx.sr))
    if ctx.spec.partitioning.taint:
        wanted.append(partitioning.taint(ctx.sr, ctx.recipe.resource))
    add = tuple(t for t in wanted if not any(taint_matches(o, t["key"], t["value"]) for o in node.taints))
    remove: list[tuple[str, str | None]] = []
    startup_key = not_ready_taint(ctx.sr)
    if not (ctx.spec.startup_taint and not validated) and any(
        taint_matches(t, startup_key, None) for t in node.taints
    ):
        remove.append((startup_key, None))
    part = partitioning.taint(ctx.sr, ctx.recipe.resource)
    if not ctx.spec.partitioning.taint and any(
        taint_matches(t, part["key"], part["value"]) for t in node.taints
    ):
        remove.append((part["key"], part["value"]))
    return add, tuple(remove)


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
