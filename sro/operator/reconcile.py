"""The pure reconcile of one SpecialResource: observed cluster state in, a plan out.

Why pure: every rule — which nodes match, which state may start where, when a node label is set or
taken back, when a validation pod is (re)created, what the status says — is decided from records,
so unit tests run it over recorded cluster states; `sro.operator.cluster` reads the records and
carries the plan out, and the kopf handlers only call the two.

This module is the fold; its parts live by job: `admission` (may the spec be deployed, on which
nodes), `walk` (one node over the states), `upgrade` (driver upgrades), `taints` and `release`
(what sro puts on a node and takes back), `plan` (what comes out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sro.api.names import GATE_VALUES, state_label
from sro.api.timestamps import now_utc
from sro.operator import partitioning, recipedistribution
from sro.operator.admission import (
    Refusal,
    admit,
    claim_of,
    conflict_message,
    contested,
    custom_conflict,
    matches,
    refused,
    selection_terms,
)
from sro.operator.observed import NodeInfo, Observed, PodInfo
from sro.operator.plan import NodeEvent, NodePatch, Plan, merge
from sro.operator.release import release
from sro.operator.remediation import adapter as remediation
from sro.operator.rendering import Context, RenderError, Term, decorate
from sro.operator.states import STATES, DriverState, State, ValidationState, retry_due
from sro.operator.status import NodeRow, build_status, without_empty
from sro.operator.upgrade.adapter import as_patch, release_upgrade, upgrades, with_upgrade
from sro.operator.upgrade.machine import UpgradePlan
from sro.operator.walk import WalkMemo

RECIPE_COMPONENT = "recipe"  # the component (and state) label of a custom recipe's ConfigMap
ACTING_REQUEUE = 3.0  # a pass that changed something looks again this soon (its watch events do first)
SETTLED_REQUEUE = 30.0  # a pass that changed nothing: only a timer of its own, or an event, wakes it


def reconcile(
    obs: Observed, namespace: str, now: datetime | None = None, memo: WalkMemo | None = None
) -> Plan:
    """The plan that brings the cluster to what `obs.sr` asks for, one step closer (`memo`: the
    walks of steady nodes kept from the last pass, the same plan with or without it)."""
    now = now or now_utc()
    sr = obs.sr
    admitted = admit(obs, namespace)
    if isinstance(admitted, Refusal):
        return refused(obs, admitted)
    spec, recipe = admitted.spec, admitted.recipe
    ctx = Context(
        sr.name,
        sr.uid,
        spec,
        recipe,
        namespace,
        obs.image,
        dict(obs.custom_manifests or {}),
        obs.prometheus_operator,
        obs.openshift,
    )
    terms = selection_terms(spec, recipe)
    selected = [n for n in obs.nodes if matches(n, terms)]
    # nodes an older SpecialResource holds for the same resource: refused here, listed in the status
    claims = [c for o in obs.others if (c := claim_of(o, obs.other_recipes, obs.nodes)) is not None]
    held = contested(sr, recipe.resource, selected, claims, recipe.announced_resources)
    refused_rows = [
        NodeRow(
            name, reason="ResourceConflict", message=conflict_message(holder, recipe.resource), refused=True
        )
        for name, holder in sorted(held.items())
    ]
    selected = [n for n in selected if n.name not in held]
    chain: list[State] = [s for s in STATES if s.enabled(ctx)]
    try:
        objects = _render(ctx, chain, selected, terms, sorted(held))
        # what sro renders itself, to tell the custom manifests' own objects (only with them)
        builtin = _render(replace(ctx, custom={}), chain, selected, terms, sorted(held)) if ctx.custom else []
    except (RenderError, ValueError) as e:
        return refused(obs, Refusal("RenderFailed", str(e), recipe.resource))

    shaping = [*partitioning.objects(sr.name, sr.uid, spec, recipe, obs.namespaces), *_discovery(ctx)]
    clash = custom_conflict(objects, builtin, shaping) if ctx.custom else None
    if clash is not None:
        return refused(obs, replace(clash, resource=recipe.resource))
    all_refused = bool(held) and not selected
    if all_refused:  # every node it selects is another's: nothing deployed (what it had is removed)
        objects, shaping = [], []
    wanted = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in shaping}
    stale_elsewhere = tuple(sorted(k for k in obs.owned_elsewhere if k not in wanted))

    patches: dict[str, NodePatch] = {}
    create_pods: list[dict[str, Any]] = []
    delete_pods: list[str] = []
    rows: list[NodeRow] = []
    # each node's pods, indexed once: every rule below looks at one node's pods (at 1,000 nodes a
    # scan of all pods per node and state would be most of a pass)
    by_node: dict[str, list[PodInfo]] = {}
    for pod in obs.pods:
        by_node.setdefault(pod.node, []).append(pod)
    walker = memo or WalkMemo()
    walker.begin(ctx)
    for node in selected:
        row, patch, creates, deletes = walker.walk(ctx, chain, node, by_node.get(node.name, []), now)
        rows.append(row)
        if patch is not None:
            patches[node.name] = patch
        create_pods.extend(creates)
        delete_pods.extend(deletes)
    walker.end()
    evict: list[tuple[str, str]] = []
    events: list[NodeEvent] = []
    pinned: frozenset[str] = frozenset()
    upgrading: UpgradePlan | None = None
    if any(isinstance(s, DriverState) for s in chain):
        upgrading = upgrades(ctx, selected, rows, obs, by_node, now)
        pinned = upgrading.pinned
        uids = {n.name: n.uid for n in selected}
        for name, step in upgrading.nodes.items():
            patches[name] = merge(patches.get(name), as_patch(step))
            evict.extend(step.evict)
            create_pods.extend(step.create_pods)
            delete_pods.extend(p for p in step.delete_pods if p not in delete_pods)
            events.extend(NodeEvent(name, uids[name], *e) for e in step.events)
        rows = [with_upgrade(r, upgrading.nodes.get(r.name)) for r in rows]
    else:  # no driver deployed: no revisions, no upgrades
        for node in selected:
            patches[node.name] = merge(patches.get(node.name), release_upgrade(sr.name, node))
    remedy = None
    if remediation.enabled(sr):
        remedy = remediation.remediations(ctx, chain, selected, rows, obs, by_node, now)
        for name, patch in remedy.patches.items():
            patches[name] = merge(patches.get(name), patch)
        evict.extend(e for e in remedy.evict if e not in evict)
        create_pods.extend(remedy.create_pods)
        delete_pods.extend(p for p in remedy.delete_pods if p not in delete_pods)
        events.extend(remedy.events)
        rows = [remediation.with_remediation(r, remedy.plan.nodes.get(r.name)) for r in rows]
    else:  # no remediation asked for (any more): its records and cordons taken back
        for node in selected:
            patches[node.name] = merge(patches.get(node.name), remediation.release_remediation(sr.name, node))
    patches = {k: v for k, v in patches.items() if not v.empty}
    selected_names = {n.name for n in selected}
    patches.update(_released(sr.name, recipe.resource, obs.nodes, selected_names))
    delete_pods.extend(_stale_validations(obs.pods, chain, selected_names, delete_pods))
    strays = remediation.stray_action_pods(obs.pods, selected_names if remedy is not None else set())
    delete_pods.extend(p for p in strays if p not in delete_pods)

    # an older driver revision's objects stay while a node runs it (or may go back to it)
    desired = {(o["kind"], o["metadata"]["name"]) for o in objects}
    stale = tuple(
        sorted(
            k
            for k in obs.owned
            if k[0] != "Pod" and k not in desired and obs.revisions.get(k, "") not in pinned
        )
    )
    state_modes = {s.name: ("enabled" if s in chain else "disabled") for s in STATES}
    status = build_status(
        sr,
        [*rows, *refused_rows],
        state_modes,
        _counts(rows, chain),
        recipe.resource,
        now,
        patches_refused=obs.refused_patches,
    )
    if recipe.pools:  # a recipe with pools announces several resources: all of them, for sro status
        status["resources"] = list(recipe.announced_resources)
    if spec.partitioning.quotas:
        status["quotas"] = without_empty(partitioning.quota_rows(spec, recipe, obs.quotas, obs.namespaces))
    if upgrading is not None and (upgrading.summary.get("nodes") or upgrading.summary.get("blocked")):
        status["driverUpgrade"] = without_empty(upgrading.summary)
    busy = bool(create_pods or delete_pods or patches or evict) or (upgrading is not None and upgrading.busy)
    if remedy is not None:
        status["remediation"] = without_empty(dict(remedy.plan.summary))
        busy = busy or remedy.plan.busy
    return Plan(
        status=status,
        apply=(*objects, *shaping),
        delete=stale,
        delete_elsewhere=stale_elsewhere,
        create_pods=tuple(create_pods),
        delete_pods=tuple(delete_pods),
        node_patches=patches,
        evict=tuple(evict),
        events=tuple(events),
        node_conditions=remedy.conditions if remedy is not None else {},
        remediation=remedy.plan if remedy is not None else None,
        rows=tuple(rows),
        requeue=ACTING_REQUEUE if busy else _retry_due(obs.pods, chain, selected_names, now),
        deployable=not all_refused,
        label_keys=frozenset({*(k for t in terms for k in t), recipe.count_label}),
    )


def _retry_due(pods: Sequence[PodInfo], chain: Sequence[State], selected: set[str], now: datetime) -> float:
    """Seconds until the next pass when this one changed nothing: when a failed validation may run
    again (the one thing a walk waits for by the clock), else SETTLED_REQUEUE.

    Why not a poll every few seconds while a node is not validated: everything else a waiting node
    waits for comes as a watch event (its pods, its labels, Ready, allocatable, health reports), and
    a node that stays broken would keep the pass, and its API reads, running every 3 s for as long
    as it is broken; at 1,000 nodes a change elsewhere (a node relabelled) then waits behind it.
    """
    validations = {s.name for s in chain if isinstance(s, ValidationState)}
    due = [
        (when - now).total_seconds()
        for p in pods
        if p.state in validations and p.node in selected and (when := retry_due(p)) is not None
    ]
    return min(SETTLED_REQUEUE, max(1.0, min(due, default=SETTLED_REQUEUE)))


def _render(
    ctx: Context,
    chain: Sequence[State],
    selected: Sequence[NodeInfo],
    terms: Sequence[Term],
    refused: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Every enabled state's cluster objects, each gated on the previous state's label. The first
    state is gated on the selector alone (the driver also on its revision label, which only the
    nodes of this SpecialResource get): it leaves out the nodes another SpecialResource holds."""
    objects: list[dict[str, Any]] = []
    if ctx.spec.recipe_config_map:  # the admitted custom recipe, mounted by every agent below
        doc = recipedistribution.config_map(ctx.sr, ctx.namespace, ctx.recipe)
        objects.append(decorate(doc, ctx, RECIPE_COMPONENT))
    gate: Sequence[Term] = terms
    for i, state in enumerate(chain):
        rendered = state.render(ctx, selected, gate)
        if i == 0 and refused:
            for obj in rendered:
                _exclude(obj, refused)
        objects.extend(rendered)
        gate = [{state_label(ctx.sr, state.name): GATE_VALUES}]
    # Render one validation pod per validation state now, so a bad template is refused up front.
    for state in chain:
        if isinstance(state, ValidationState):
            state.pod(ctx, "node", "check")
    return objects


def _discovery(ctx: Context) -> list[dict[str, Any]]:
    """The NodeFeatureRule that finds a custom recipe's real hardware (cluster-wide, labelled with
    the SpecialResource: deleted with it, or when it stops naming that recipe)."""
    if not ctx.spec.recipe_config_map:
        return []
    rule = recipedistribution.node_feature_rule(ctx.sr, ctx.recipe)
    return [rule] if rule is not None else []


def _exclude(obj: dict[str, Any], nodes: Sequence[str]) -> None:
    """Every node selector term of a DaemonSet's (or pod's) affinity also says: none of `nodes`."""
    pod_spec = (
        obj.get("spec", {}).get("template", {}).get("spec") if obj["kind"] != "Pod" else obj.get("spec")
    )
    affinity = (pod_spec or {}).get("affinity") or {}
    required = affinity.get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    for term in required.get("nodeSelectorTerms") or ():
        term.setdefault("matchFields", []).append(
            {"key": "metadata.name", "operator": "NotIn", "values": list(nodes)}
        )


def _released(
    sr: str, resource: str, nodes: Sequence[NodeInfo], selected: set[str]
) -> Mapping[str, NodePatch]:
    """Nodes that stopped matching (or a label someone copied): every key of ours taken back."""
    out: dict[str, NodePatch] = {}
    for node in nodes:
        if node.name in selected:
            continue
        patch = release(sr, resource, node)
        if patch is not None:
            out[node.name] = patch
    return out


def _stale_validations(
    pods: Sequence[PodInfo], chain: Sequence[State], selected: set[str], deleting: Sequence[str]
) -> list[str]:
    """Validation pods of nodes that left or stopped matching, or of states no longer enabled."""
    enabled = {s.name for s in chain if isinstance(s, ValidationState)}
    validations = {s.name for s in STATES if isinstance(s, ValidationState)}
    out: list[str] = []
    for pod in pods:
        if pod.deleting or pod.name in deleting or pod.name in out:
            continue
        if pod.state in validations and (pod.node not in selected or pod.state not in enabled):
            out.append(pod.name)
    return out


def _counts(rows: Sequence[NodeRow], chain: Sequence[State]) -> dict[str, int]:
    return {s.name: sum(1 for r in rows if s.name in r.ready_states) for s in chain}
