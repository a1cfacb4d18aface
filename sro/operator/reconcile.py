"""The pure reconcile of one SpecialResource: observed cluster state in, a plan out.

Why pure: every rule — which nodes match, which state may start where, when a node label is set or
taken back, when a validation pod is (re)created, what the status says — is decided here from
records, so unit tests run it over recorded cluster states; `sro/kube/` reads the records and
carries the plan out, and the kopf handlers only call the two.

The fold, per matching node: walk the enabled states in order; each ready state keeps (or gets) its
label `sro.dev/<sr>.<state>=ready`; the first state that is not ready stops the walk, and its label
and every later one are removed, which makes the later states' DaemonSets leave that node (their
pods select the previous state's label). A validation state that is next in line gets its pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sro.api.names import (
    READY,
    STATE_NAMES,
    driver_revision_label,
    not_ready_taint,
    reached_annotation,
    state_label,
    upgrade_annotation,
    upgrade_state_label,
    validated_label,
)
from sro.api.recipes import BUILTIN, Recipe, RecipeError, recipe_from_dict
from sro.api.specialresource import SpecError, SpecialResourceSpec
from sro.api.specparsing import check_driver, parse_spec
from sro.operator import partitioning
from sro.operator.observed import NodeInfo, Observed, PodInfo, SpecialResourceInfo
from sro.operator.rendering import Context, RenderError, Term
from sro.operator.states import STATES, DriverState, State, ValidationState
from sro.operator.status import NodeRow, build_status
from sro.operator.upgrade import (
    DONE,
    Machine,
    NodeFacts,
    NodeUpgrade,
    Record,
    UpgradePlan,
    driver_ready,
    driver_revision,
    scan_pod_name,
)

SELECTED = "selected"  # key in the reached annotation: when the node first matched


Taint = Mapping[str, str]


@dataclass(frozen=True)
class NodePatch:
    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    add_taints: tuple[Taint, ...] = ()
    remove_taints: tuple[tuple[str, str | None], ...] = ()  # (key, value); None: any value
    unschedulable: bool | None = None  # cordon (True) or uncordon (False); None: leave as is

    @property
    def changes_taints(self) -> bool:
        return bool(self.add_taints or self.remove_taints)

    @property
    def empty(self) -> bool:
        return not (self.labels or self.annotations or self.changes_taints or self.unschedulable is not None)


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


@dataclass(frozen=True)
class NodeEvent:
    """An event about a node's upgrade, posted on the Node and on the SpecialResource."""

    node: str
    uid: str
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    status: dict[str, Any]
    apply: tuple[dict[str, Any], ...] = ()
    delete: tuple[tuple[str, str], ...] = ()  # (kind, name) in the operator's namespace
    delete_elsewhere: tuple[tuple[str, str, str], ...] = ()  # (kind, namespace or "", name)
    create_pods: tuple[dict[str, Any], ...] = ()
    delete_pods: tuple[str, ...] = ()
    node_patches: Mapping[str, NodePatch] = field(default_factory=dict)
    evict: tuple[tuple[str, str], ...] = ()  # (namespace, pod) through the Eviction API
    events: tuple[NodeEvent, ...] = ()
    rows: tuple[NodeRow, ...] = ()
    requeue: float = 30.0
    deployable: bool = True  # False: the spec cannot work; nothing was planned but the status
    label_keys: frozenset[str] = frozenset()  # node label keys this reconcile read (what wakes it)


def now_utc() -> datetime:
    return datetime.now(UTC)


def stamp(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_reached(value: str) -> dict[str, str]:
    out = {}
    for item in value.split(","):
        key, sep, when = item.partition("=")
        if sep and key:
            out[key] = when
    return out


def format_reached(reached: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in reached.items())


def resolve_recipe(spec: SpecialResourceSpec, custom: Mapping[str, Any] | None) -> Recipe:
    if spec.recipe_config_map:
        if custom is None:
            raise SpecError(
                f"spec.recipeConfigMap: ConfigMap {spec.recipe_config_map!r} (key recipe.yaml) not found "
                "in the operator's namespace"
            )
        try:
            recipe = recipe_from_dict(custom)
        except RecipeError as e:
            raise SpecError(f"spec.recipeConfigMap {spec.recipe_config_map!r}: {e}") from e
        if recipe.name != spec.recipe:
            raise SpecError(
                f"spec.recipe: {spec.recipe!r} but the ConfigMap's recipe is named {recipe.name!r}"
            )
        return recipe
    if spec.recipe not in BUILTIN:
        raise SpecError(
            f"spec.recipe: unknown recipe {spec.recipe!r}; built-in: {', '.join(sorted(BUILTIN))} "
            "(or name a custom one with spec.recipeConfigMap)"
        )
    return BUILTIN[spec.recipe]


def conflict(sr: SpecialResourceInfo, recipe: Recipe, others: Sequence[SpecialResourceInfo]) -> str | None:
    """The older SpecialResource claiming the same extended resource, if any: it wins."""
    for other in others:
        name = str(other.spec.get("recipe", ""))
        other_resource = BUILTIN[name].resource if name in BUILTIN else name
        mine = recipe.resource if recipe.name in BUILTIN else recipe.name
        if other_resource == mine and (other.created, other.name) < (sr.created, sr.name):
            return other.name
    return None


def matches(node: NodeInfo, terms: Sequence[Term]) -> bool:
    return any(
        all((k in node.labels) if not v else node.labels.get(k) == v for k, v in term.items())
        for term in terms
    )


def selection_terms(spec: SpecialResourceSpec, recipe: Recipe) -> tuple[Term, ...]:
    return (dict(spec.node_selector),) if spec.node_selector else recipe.default_node_selector_terms()


def _not_deployable(obs: Observed, reason: str, message: str, resource: str = "") -> Plan:
    status = build_status(obs.sr, [], {}, {}, resource, now_utc(), problem=(reason, message))
    return Plan(status=status, deployable=False, requeue=60.0)


def our_label_keys(sr: str) -> frozenset[str]:
    """Exactly the label keys the operator writes for `sr`. Not a prefix match: a SpecialResource
    named like its recipe shares `sro.dev/<name>.` with the recipe's own labels (discovery's
    `sro.dev/simulated-gpu.count`, the admin's opt-in `.enabled`), which are never ours to remove."""
    return frozenset({*(state_label(sr, s) for s in STATE_NAMES), validated_label(sr)})


def _our_keys(sr: str, node: NodeInfo) -> list[str]:
    ours = our_label_keys(sr)
    return [k for k in node.labels if k in ours]


def reconcile(obs: Observed, namespace: str, now: datetime | None = None) -> Plan:
    """The plan that brings the cluster to what `obs.sr` asks for, one step closer."""
    now = now or now_utc()
    sr = obs.sr
    try:
        spec = parse_spec(sr.name, sr.spec)
        recipe = resolve_recipe(spec, obs.custom_recipe)
        check_driver(spec, recipe.simulated)
        partitioning.check(spec, recipe)
    except SpecError as e:
        return _not_deployable(obs, "SpecInvalid", str(e))
    winner = conflict(sr, recipe, obs.others)
    if winner:
        return _not_deployable(
            obs,
            "ResourceConflict",
            f"SpecialResource {winner!r} already manages {recipe.resource}; delete one of them",
            recipe.resource,
        )
    if spec.custom_manifests and obs.custom_manifests is None:
        return _not_deployable(
            obs,
            "CustomManifestsMissing",
            f"spec.customManifests: ConfigMap {spec.custom_manifests!r} not found in namespace {namespace}",
            recipe.resource,
        )
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
    chain: list[State] = [s for s in STATES if s.enabled(ctx)]

    # Cluster objects: every enabled state's, gated on the previous one's label.
    objects: list[dict[str, Any]] = []
    try:
        gate: Sequence[Term] = terms
        for state in chain:
            objects.extend(state.render(ctx, selected, gate))
            gate = [{state_label(sr.name, state.name): READY}]
        # Render one validation pod per validation state now, so a bad template is refused up front.
        for state in chain:
            if isinstance(state, ValidationState):
                state.pod(ctx, "node", "check")
    except (RenderError, ValueError) as e:
        return _not_deployable(obs, "RenderFailed", str(e), recipe.resource)

    desired = {(o["kind"], o["metadata"]["name"]) for o in objects}
    shaping = partitioning.objects(sr.name, sr.uid, spec, recipe, obs.namespaces)
    wanted = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in shaping}
    stale_elsewhere = tuple(sorted(k for k in obs.owned_elsewhere if k not in wanted))

    patches: dict[str, NodePatch] = {}
    create_pods: list[dict[str, Any]] = []
    delete_pods: list[str] = []
    rows: list[NodeRow] = []
    selected_names = {n.name for n in selected}
    # each node's pods, indexed once: every rule below looks at one node's pods (at 1,000 nodes a
    # scan of all pods per node and state would be most of a pass)
    by_node: dict[str, list[PodInfo]] = {}
    for pod in obs.pods:
        by_node.setdefault(pod.node, []).append(pod)
    for node in selected:
        row, patch, creates, deletes = _walk(ctx, chain, node, by_node.get(node.name, []), now)
        rows.append(row)
        if patch is not None:
            patches[node.name] = patch
        create_pods.extend(creates)
        delete_pods.extend(deletes)
    evict: list[tuple[str, str]] = []
    events: list[NodeEvent] = []
    pinned: frozenset[str] = frozenset()
    upgrading: UpgradePlan | None = None
    if any(isinstance(s, DriverState) for s in chain):
        upgrading = _upgrades(ctx, selected, rows, obs, by_node, now)
        pinned = upgrading.pinned
        uids = {n.name: n.uid for n in selected}
        for name, step in upgrading.nodes.items():
            patches[name] = merge(patches.get(name), _as_patch(step))
            evict.extend(step.evict)
            create_pods.extend(step.create_pods)
            delete_pods.extend(p for p in step.delete_pods if p not in delete_pods)
            events.extend(NodeEvent(name, uids[name], *e) for e in step.events)
        rows = [_with_upgrade(r, upgrading.nodes.get(r.name)) for r in rows]
    else:  # no driver deployed: no revisions, no upgrades
        for node in selected:
            patches[node.name] = merge(patches.get(node.name), release_upgrade(sr.name, node))
    patches = {k: v for k, v in patches.items() if not v.empty}
    # Nodes that stopped matching (or a label someone copied): take every key of ours back.
    for node in obs.nodes:
        if node.name in selected_names:
            continue
        patch = release(sr.name, recipe.resource, node)
        if patch is not None:
            patches[node.name] = patch
    # Validation pods of nodes that left or stopped matching, or of states no longer enabled.
    enabled_validations = {s.name for s in chain if isinstance(s, ValidationState)}
    for pod in obs.pods:
        if pod.deleting or pod.name in delete_pods:
            continue
        is_validation = any(isinstance(s, ValidationState) and s.name == pod.state for s in STATES)
        if is_validation and (pod.node not in selected_names or pod.state not in enabled_validations):
            delete_pods.append(pod.name)

    # an older driver revision's objects stay while a node runs it (or may go back to it)
    stale = tuple(
        sorted(
            k
            for k in obs.owned
            if k[0] != "Pod" and k not in desired and obs.revisions.get(k, "") not in pinned
        )
    )
    state_modes = {s.name: ("enabled" if s in chain else "disabled") for s in STATES}
    status = build_status(sr, rows, state_modes, _counts(rows, chain), recipe.resource, now)
    if spec.partitioning.quotas:
        status["quotas"] = partitioning.quota_rows(spec, recipe, obs.quotas, obs.namespaces)
    if upgrading is not None and (upgrading.summary.get("nodes") or upgrading.summary.get("blocked")):
        status["driverUpgrade"] = dict(upgrading.summary)
    busy = any(not r.validated for r in rows) or bool(create_pods or delete_pods or patches or evict)
    busy = busy or (upgrading is not None and upgrading.busy)
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
        rows=tuple(rows),
        requeue=3.0 if busy else 30.0,
        label_keys=frozenset({*(k for t in terms for k in t), recipe.count_label}),
    )


def _upgrades(
    ctx: Context,
    selected: Sequence[NodeInfo],
    rows: Sequence[NodeRow],
    obs: Observed,
    by_node: Mapping[str, Sequence[PodInfo]],
    now: datetime,
) -> UpgradePlan:
    """Run the upgrade machine over the selected nodes, with the walk's verdicts."""
    rev_key = driver_revision_label(ctx.sr)
    by_row = {r.name: r for r in rows}
    pods_by_node: dict[str, list[Any]] = {}
    for w in obs.workloads:
        pods_by_node.setdefault(w.node, []).append(w)
    read = set(obs.workload_nodes)
    by_name = {p.name: p for p in obs.pods}
    facts = []
    for node in selected:
        row = by_row[node.name]
        scan_name = scan_pod_name(ctx, node.name)
        facts.append(
            NodeFacts(
                node=node,
                validated=row.validated,
                failing=f"{row.failing}: {row.reason} {row.message}".strip() if row.failing else "",
                driver_ready=driver_ready(node, by_node.get(node.name, ()), rev_key),
                workloads=tuple(pods_by_node.get(node.name, ())) if node.name in read else None,
                scan=by_name.get(scan_name),
            )
        )
    return Machine(ctx, driver_revision(ctx), now, stamp(now)).run(facts)


def _as_patch(step: NodeUpgrade) -> NodePatch:
    return NodePatch(labels=step.labels, annotations=step.annotations, unschedulable=step.unschedulable)


def _with_upgrade(row: NodeRow, step: NodeUpgrade | None) -> NodeRow:
    """The row carries the node's upgrade while one is under way (a finished one lives on the node)."""
    if step is None or step.record is None or step.record.state == DONE:
        return row
    return replace(row, upgrade=step.to_status())


def merge(a: NodePatch | None, b: NodePatch | None) -> NodePatch:
    """Two patches of one node as one (b's keys win)."""
    a, b = a or NodePatch(), b or NodePatch()
    return NodePatch(
        labels={**a.labels, **b.labels},
        annotations={**a.annotations, **b.annotations},
        add_taints=(*a.add_taints, *b.add_taints),
        remove_taints=(*a.remove_taints, *b.remove_taints),
        unschedulable=b.unschedulable if b.unschedulable is not None else a.unschedulable,
    )


def release_upgrade(sr: str, node: NodeInfo) -> NodePatch:
    """The driver revision and upgrade keys taken off a node, uncordoning it if sro cordoned it."""
    keys = [k for k in (driver_revision_label(sr), upgrade_state_label(sr)) if k in node.labels]
    ann = upgrade_annotation(sr)
    rec = Record.from_json(node.annotations.get(ann, ""))
    ours = rec is not None and rec.cordoned and rec.state not in (DONE,) and node.unschedulable
    return NodePatch(
        labels={k: None for k in keys},
        annotations={ann: None} if ann in node.annotations else {},
        unschedulable=False if ours else None,
    )


def _counts(rows: Sequence[NodeRow], chain: Sequence[State]) -> dict[str, int]:
    return {s.name: sum(1 for r in rows if s.name in r.ready_states) for s in chain}


def _walk(
    ctx: Context, chain: Sequence[State], node: NodeInfo, pods: Sequence[PodInfo], now: datetime
) -> tuple[NodeRow, NodePatch | None, list[dict[str, Any]], list[str]]:
    """One node's fold over the states (`pods`: the node's): its row, label patch and validation pods."""
    sr = ctx.sr
    if not node.ready:
        return _held(ctx, chain, node, now), None, [], []
    ready: list[str] = []
    failing = None
    creates: list[dict[str, Any]] = []
    deletes: list[str] = []
    for state in chain:
        if isinstance(state, ValidationState) and state.needs_new_pod(ctx, node.name, pods, now):
            current = state.current(ctx, node.name, pods)
            if current is not None:
                deletes.append(current.name)  # same name: the new one is created once it is gone
            else:
                creates.append(state.pod(ctx, node.name, state.inputs(ctx, node.name, pods)))
        verdict = state.readiness(ctx, node, pods, now)
        if not verdict.ready:
            failing = (state.name, verdict)
            break
        ready.append(state.name)

    validated = failing is None
    want: dict[str, str | None] = {state_label(sr, s): READY for s in ready}
    if validated:
        want[validated_label(sr)] = "true"
    labels: dict[str, str | None] = {k: v for k, v in want.items() if node.labels.get(k) != v}
    labels.update({k: None for k in _our_keys(sr, node) if k not in want})

    ann_key = reached_annotation(sr)
    old = parse_reached(node.annotations.get(ann_key, ""))
    reached = {SELECTED: old.get(SELECTED, stamp(now))}
    for s in ready:
        reached[s] = old.get(s, stamp(now))
    if validated:
        reached["validated"] = old.get("validated", stamp(now))
    annotations: dict[str, str | None] = {}
    if reached != old:
        annotations[ann_key] = format_reached(reached)

    add, remove = _taint_changes(ctx, node, validated)

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
        since=since or stamp(now),
        reached=reached,
    )
    patch = NodePatch(labels, annotations, add, remove) if (labels or annotations or add or remove) else None
    return row, patch, creates, deletes


NODE_NOT_READY = "NodeNotReady"


def _held(ctx: Context, chain: Sequence[State], node: NodeInfo, now: datetime) -> NodeRow:
    """A node that is not Ready keeps its labels, pods and taints as they are.

    Why: when a kubelet stops reporting, the node lifecycle controller marks every pod on the node
    not Ready without knowing anything about them. Taking the states' labels away then would make
    the DaemonSet controller delete the later states' pods, and the node would redo the whole chain
    once it reported again — at scale, a control plane too busy to take leases in time would turn
    into a storm of pod deletions and re-creations. Holding costs nothing: a node that is not Ready
    takes no pods anyway, and its row says why its states are not being judged.
    """
    held = []
    for state in chain:
        if node.labels.get(state_label(ctx.sr, state.name)) != READY:
            break
        held.append(state.name)
    reached = parse_reached(node.annotations.get(reached_annotation(ctx.sr), ""))
    return NodeRow(
        name=node.name,
        ready_states=tuple(held),
        failing="node",
        reason=NODE_NOT_READY,
        message="the node is not Ready (its kubelet is not reporting): its states are held as they "
        "were and judged again once it reports",
        since=(reached.get(held[-1]) if held else None) or reached.get(SELECTED) or stamp(now),
        reached=reached,
    )


def startup_taint(sr: str) -> dict[str, str]:
    return {"key": not_ready_taint(sr), "value": "true", "effect": "NoSchedule"}


def _taint_changes(
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


def release(sr: str, resource: str | None, node: NodeInfo) -> NodePatch | None:
    """Everything of `sr` taken off a node: its labels, annotation, startup and partitioning taints
    (the latter matched by key and value: the value is the SpecialResource's name)."""
    keys = _our_keys(sr, node)
    ann = reached_annotation(sr)
    remove: list[tuple[str, str | None]] = []
    if any(taint_matches(t, not_ready_taint(sr), None) for t in node.taints):
        remove.append((not_ready_taint(sr), None))
    if resource:
        part = partitioning.taint(sr, resource)
        if any(taint_matches(t, part["key"], part["value"]) for t in node.taints):
            remove.append((part["key"], part["value"]))
    patch = merge(
        NodePatch(
            labels={k: None for k in keys},
            annotations={ann: None} if ann in node.annotations else {},
            remove_taints=tuple(remove),
        ),
        release_upgrade(sr, node),
    )
    return None if patch.empty else patch
