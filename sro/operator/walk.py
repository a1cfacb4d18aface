"""One node's walk over the enabled states: its status row, its label patch, its validation pods.

Why per node: each ready state keeps (or gets) its label `sro.dev/<sr>.<state>=ready`; the first
state that is not ready stops the walk, and its label and every later one are removed, which makes
the later states' DaemonSets leave that node (their pods select the previous state's label). A
validation state that is next in line gets its pod. A node that is not Ready is held as it is.
A node whose driver was just replaced walks again only what the new driver invalidated
(`sro.operator.upgrade.rewalk`): those states show `revalidating`, the others stay as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sro.api.names import READY, REVALIDATING, reached_annotation, state_label, validated_label
from sro.api.timestamps import stamp
from sro.operator.observed import NodeInfo, PodInfo
from sro.operator.plan import NodePatch
from sro.operator.reached import SELECTED, format_reached, parse_reached
from sro.operator.release import our_keys
from sro.operator.rendering import Context
from sro.operator.states import State, ValidationState
from sro.operator.status import NodeRow
from sro.operator.taints import taint_changes
from sro.operator.upgrade.rewalk import rewalk_of

NODE_NOT_READY = "NodeNotReady"


class WalkMemo:
    """The walks that came out validated with nothing to change, kept for the next pass.

    Why: at 1,000 validated nodes a pass walked every node's states again (~0.3 s of CPU) though
    nothing of theirs had changed, and a change on one node (a relabel) waited for all of it. A walk
    is a pure function of the Context, the node's record and its pods' records, so its result
    stands while they do: the records are the operator's cache's own objects, replaced on every
    watch event, so *the same objects* (identity, not equality: one compare each) mean nothing
    changed, and an equal Context means the same spec and recipe. Only the steady outcome is kept —
    validated, no patch, no pod to create or delete —, the one that reads no clock: a walk that
    still has work waits on time (a failed validation's pause, a new state's timestamp) and is made
    again each pass. A reconcile without a memo (the tests, `sro status`) gives the same plan."""

    def __init__(self) -> None:
        self.ctx: Context | None = None
        self._rows: dict[str, tuple[NodeInfo, tuple[PodInfo, ...], NodeRow]] = {}
        self._next: dict[str, tuple[NodeInfo, tuple[PodInfo, ...], NodeRow]] = {}

    def begin(self, ctx: Context) -> None:
        """A new pass: what was kept under another Context is dropped, and nodes not walked in this
        pass are forgotten at its end (`end`)."""
        if ctx != self.ctx:
            self._rows.clear()
        self.ctx, self._next = ctx, {}

    def walk(
        self, ctx: Context, chain: Sequence[State], node: NodeInfo, pods: Sequence[PodInfo], now: datetime
    ) -> tuple[NodeRow, NodePatch | None, list[dict[str, Any]], list[str]]:
        """`walk(...)`, or its kept result when the node and its pods are the same records."""
        kept = self._rows.get(node.name)
        if (
            kept is not None
            and kept[0] is node
            and len(kept[1]) == len(pods)
            and all(a is b for a, b in zip(kept[1], pods, strict=True))
        ):
            self._next[node.name] = kept
            return kept[2], None, [], []
        row, patch, creates, deletes = walk(ctx, chain, node, pods, now)
        if row.validated and patch is None and not creates and not deletes:
            self._next[node.name] = (node, tuple(pods), row)
        return row, patch, creates, deletes

    def end(self) -> None:
        self._rows, self._next = self._next, {}


def walk(
    ctx: Context, chain: Sequence[State], node: NodeInfo, pods: Sequence[PodInfo], now: datetime
) -> tuple[NodeRow, NodePatch | None, list[dict[str, Any]], list[str]]:
    """One node's fold over the states (`pods`: the node's): its row, label patch and validation pods."""
    sr = ctx.sr
    if not node.ready:
        return held(ctx, chain, node, now), None, [], []
    ready: list[str] = []
    revalidating: list[str] = []  # invalidated by a new driver, walked again (`upgrade.rewalk`)
    notes: list[str] = []  # what the ready states say beyond "ready" (a validation's skipped checks)
    failing = None
    creates: list[dict[str, Any]] = []
    deletes: list[str] = []
    again = rewalk_of(ctx, node)
    old_pods = pods
    if again is not None:  # the old driver's operand pods count no more; restarted below
        pods = [p for p in pods if p.uid not in again.stale]
    names = [s.name for s in chain]
    for state in chain:
        # a state the new driver invalidated, on a node where it was walked before: it waits for
        # the states it comes after, and its label says so; the others are judged as always
        rewalked = (
            again is not None
            and state.name in again.states
            and node.labels.get(state_label(sr, state.name)) in (READY, REVALIDATING)
        )
        if rewalked and again is not None and again.waits(state.name, set(ready), names):
            revalidating.append(state.name)
            # its verdict on the old driver goes now, so its new pod starts as soon as it may
            if isinstance(state, ValidationState):
                verdict_pod = state.current(ctx, node.name, pods)
                if (
                    verdict_pod is not None
                    and not verdict_pod.deleting
                    and verdict_pod.phase in ("Succeeded", "Failed")
                ):
                    deletes.append(verdict_pod.name)
            continue
        if rewalked and again is not None:
            deletes.extend(
                p.name for p in old_pods if p.uid in again.stale and p.state == state.name and not p.deleting
            )
        if isinstance(state, ValidationState) and state.needs_new_pod(ctx, node.name, pods, now):
            current = state.current(ctx, node.name, pods)
            if current is not None:
                deletes.append(current.name)  # same name: the new one is created once it is gone
            elif state.held(ctx, node) is None:
                creates.append(state.pod(ctx, node.name, state.inputs(ctx, node.name, pods), node.capacity))
        verdict = state.readiness(ctx, node, pods, now)
        if not verdict.ready:
            if rewalked and not verdict.failed:  # on its way back: the later states keep running
                failing = failing or (state.name, verdict)
                revalidating.append(state.name)
                continue
            failing = (state.name, verdict)
            break
        ready.append(state.name)
        if verdict.message:
            notes.append(f"{state.name}: {verdict.message}")

    validated = failing is None
    want: dict[str, str | None] = {state_label(sr, s): READY for s in ready}
    want.update({state_label(sr, s): REVALIDATING for s in revalidating})
    if validated:
        want[validated_label(sr)] = "true"
    labels: dict[str, str | None] = {k: v for k, v in want.items() if node.labels.get(k) != v}
    labels.update({k: None for k in our_keys(sr, node) if k not in want})

    ann_key = reached_annotation(sr)
    old = parse_reached(node.annotations.get(ann_key, ""))
    now_text = stamp(now)
    reached = {SELECTED: old.get(SELECTED, now_text)}
    for s in ready:
        reached[s] = old.get(s, now_text)
    if validated:
        reached["validated"] = old.get("validated", now_text)
    annotations: dict[str, str | None] = {}
    if reached != old:
        annotations[ann_key] = format_reached(reached)

    add, remove = taint_changes(ctx, node, validated)

    since = (
        reached.get("validated") if validated else (reached.get(ready[-1]) if ready else reached[SELECTED])
    )
    row = NodeRow(
        name=node.name,
        ready_states=tuple(ready),
        validated=validated,
        failing=failing[0] if failing else "",
        reason=failing[1].reason if failing else "",
        message=failing[1].message if failing else "",
        log=failing[1].log if failing else "",
        failed=failing[1].failed if failing else False,
        note="; ".join(notes),
        since=since or now_text,
        reached=reached,
    )
    patch = NodePatch(labels, annotations, add, remove) if (labels or annotations or add or remove) else None
    return row, patch, creates, deletes


def held(ctx: Context, chain: Sequence[State], node: NodeInfo, now: datetime) -> NodeRow:
    """A node that is not Ready keeps its labels, pods and taints as they are.

    Why: when a kubelet stops reporting, the node lifecycle controller marks every pod on the node
    not Ready without knowing anything about them. Taking the states' labels away then would make
    the DaemonSet controller delete the later states' pods, and the node would redo the whole chain
    once it reported again — at scale, a control plane too busy to take leases in time would turn
    into a storm of pod deletions and re-creations. Holding costs nothing: a node that is not Ready
    takes no pods anyway, and its row says why its states are not being judged.
    """
    kept = []
    for state in chain:
        if node.labels.get(state_label(ctx.sr, state.name)) != READY:
            break
        kept.append(state.name)
    reached = parse_reached(node.annotations.get(reached_annotation(ctx.sr), ""))
    return NodeRow(
        name=node.name,
        ready_states=tuple(kept),
        failing="node",
        reason=NODE_NOT_READY,
        message="the node is not Ready (its kubelet is not reporting): its states are held as they "
        "were and judged again once it reports",
        since=(reached.get(kept[-1]) if kept else None) or reached.get(SELECTED) or stamp(now),
        reached=reached,
    )
