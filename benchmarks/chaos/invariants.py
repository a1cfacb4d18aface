"""The fault campaign's invariants as pure checks over recorded facts (issue 25).

Why pure and apart from the observer: each rule is a precise statement that a unit test can make
pass and fail with a few recorded facts, while the observer (`observer.py`) only gathers those facts
from the live cluster (watches, /proc, the kubelet's pod-resources API, the audit log, pod logs)
and calls these functions. A rule that needs memory across looks (a cordon's age, a container's
previous device set) takes the previous state and returns the next one, so nothing here keeps any.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sro.api.names import (
    PREFIX,
    simulated_driver_opt_in_label,
    simulated_opt_in_label,
    upgrade_annotation,
    validated_label,
)
from sro.operator.remediation.record import ACTIVE as REMEDIATION_ACTIVE
from sro.operator.remediation.record import DONE as REMEDIATION_DONE
from sro.operator.remediation.record import HELD as REMEDIATION_HELD
from sro.operator.remediation.record import Record as RemediationRecord
from sro.operator.remediation.record import remediation_annotation
from sro.operator.upgrade.record import DONE as UPGRADE_DONE
from sro.operator.upgrade.record import FAILED as UPGRADE_FAILED
from sro.operator.upgrade.record import IN_PROGRESS as UPGRADE_IN_PROGRESS
from sro.operator.upgrade.record import UPGRADE_REQUIRED
from sro.operator.upgrade.record import Record as UpgradeRecord

KINDS = (
    "foreign-device",
    "devices-changed",
    "stale-cordon",
    "double-eviction",
    "pdb-broken",
    "two-writers",
    "traceback",
    "memory",
    "leftover",
)
# A step that ends uncordons on the operator's next pass, which follows the record's write within a
# second or two; under a fault (an API server restart, a paused leader waiting out its lease of
# 15 s) that pass can be late by a lease term or so. 30 s is twice that: longer is a stale cordon.
STALE_CORDON_GRACE_S = 30.0
# Issue 26's bound for the operator's resident memory.
RSS_BOUND_MIB = 150.0
# The PDB as the observer's watch saw it is a little late: its samples from PDB_SETTLE_S before an
# eviction to PDB_LAG_S after it (the disruption controller's update then still on its way) decide
# whether disruptions were allowed when it was accepted.
PDB_SETTLE_S = 1.0
PDB_LAG_S = 0.5


@dataclass(frozen=True)
class Violation:
    kind: str  # one of KINDS
    at: float  # time.time()
    detail: str


# ---- devices ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ContainerLook:
    """What one running container of the workload saw at one look, and what it was allocated."""

    at: float
    pod: str  # namespace/name
    container: str
    container_id: str
    seen: frozenset[str]  # the recipe's device nodes (host paths) the container can open
    allocated: frozenset[str]  # the device nodes of the ids the kubelet assigned it


def foreign_device(look: ContainerLook) -> Violation | None:
    """A device node the container sees that the kubelet never allocated it."""
    foreign = look.seen - look.allocated
    if not foreign:
        return None
    return Violation(
        "foreign-device",
        look.at,
        f"{look.pod}/{look.container} sees {', '.join(sorted(foreign))} "
        f"(allocated: {', '.join(sorted(look.allocated)) or 'none'})",
    )


def devices_changed(before: ContainerLook | None, now: ContainerLook) -> Violation | None:
    """The same running container (same id) seeing another set of devices than at its last look."""
    if before is None or before.container_id != now.container_id or before.seen == now.seen:
        return None
    return Violation(
        "devices-changed",
        now.at,
        f"{now.pod}/{now.container} ({now.container_id[:12]}) saw {', '.join(sorted(before.seen)) or 'none'}"
        f", now {', '.join(sorted(now.seen)) or 'none'}",
    )


def device_checks(
    previous: Mapping[str, ContainerLook], looks: Sequence[ContainerLook]
) -> tuple[list[Violation], dict[str, ContainerLook]]:
    """Both device rules over one round of looks; the looks kept by container id for the next round
    (containers gone since are dropped)."""
    out: list[Violation] = []
    for look in looks:
        for v in (foreign_device(look), devices_changed(previous.get(look.container_id), look)):
            if v is not None:
                out.append(v)
    return out, {look.container_id: look for look in looks}


# ---- cordons ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CordonFacts:
    node: str
    unschedulable: bool
    sro_cordoned: bool  # one of sro's records on the node says sro cordoned it
    in_step: bool  # an upgrade or remediation step is under way on it (or holds it for a person)


def cordon_facts(node: str, unschedulable: bool, annotations: Mapping[str, str], sr: str) -> CordonFacts:
    """The node's cordon as sro's two records (upgrade, remediation) of SpecialResource `sr` tell it.

    A record in LIMIT/FAILED keeps its cordon on purpose (left for a person, `sro remediation retry`
    / `sro upgrade retry`): that is a step holding the node, not a stale cordon."""
    up = UpgradeRecord.from_json(annotations.get(upgrade_annotation(sr), ""), f"node {node}")
    rem = RemediationRecord.from_json(annotations.get(remediation_annotation(sr), ""), f"node {node}")
    upgrade_steps = (UPGRADE_REQUIRED, *UPGRADE_IN_PROGRESS, UPGRADE_FAILED)
    in_step = (up is not None and up.state in upgrade_steps) or (
        rem is not None and rem.state in (*REMEDIATION_ACTIVE, *REMEDIATION_HELD)
    )
    # an upgrade's record keeps `cordoned` once done (history); a remediation's is cleared when sro
    # uncordons, so `done` with it still set is a cordon sro has yet to lift
    ours = (up is not None and up.cordoned and up.state != UPGRADE_DONE) or (rem is not None and rem.cordoned)
    return CordonFacts(node, unschedulable, ours, in_step)


def step_key(annotations: Mapping[str, str], sr: str) -> str:
    """The sro step on a node as its records name it, the same all through one step: an upgrade by
    its revisions, a remediation by when it began; "" when neither is under way. Two evictions of
    one pod under one key are one step's eviction asked twice."""
    up = UpgradeRecord.from_json(annotations.get(upgrade_annotation(sr), ""), "a node")
    rem = RemediationRecord.from_json(annotations.get(remediation_annotation(sr), ""), "a node")
    parts = []
    if up is not None and up.state != UPGRADE_DONE:
        parts.append(f"upgrade {up.from_rev}->{up.to_rev}")
    if rem is not None and rem.state != REMEDIATION_DONE:
        parts.append(f"remediation {rem.started}")
    return "; ".join(parts)


# node -> (when the stale cordon was first seen, whether it was reported)
CordonClock = dict[str, tuple[float, bool]]


def stale_cordons(
    facts: Sequence[CordonFacts], clock: Mapping[str, tuple[float, bool]], now: float, grace: float
) -> tuple[list[Violation], CordonClock]:
    """A node cordoned by sro with no step on it for longer than `grace`: one violation per episode
    (the node uncordoned or a step started ends it)."""
    out: list[Violation] = []
    nxt: CordonClock = {}
    for f in facts:
        if not (f.unschedulable and f.sro_cordoned and not f.in_step):
            continue
        since, reported = clock.get(f.node, (now, False))
        if not reported and now - since >= grace:
            out.append(
                Violation(
                    "stale-cordon",
                    now,
                    f"node {f.node} cordoned by sro with no upgrade or remediation step for {now - since:.0f} s",
                )
            )
            reported = True
        nxt[f.node] = (since, reported)
    return out, nxt


# ---- evictions and the PDB -------------------------------------------------------------------------
@dataclass(frozen=True)
class Disruption:
    """A pod sro took away, from the audit log: an accepted eviction (201) or a direct delete."""

    at: float
    namespace: str
    name: str
    uid: str  # the pod's uid as the observer's watch knew it at that time ("" if unknown)
    step: str  # the sro step on the pod's node at that time ("" if none was seen)
    verb: str = "evict"  # "evict" | "delete"
    guarded: bool = True  # the pod matched the workload PDB's selector
    # the pod was Ready when taken (or not known not to be): only Ready pods count as healthy for a
    # PDB, and the API server accepts the eviction of a Pending one whatever the budget says
    counted: bool = True


def double_evictions(disruptions: Sequence[Disruption]) -> list[Violation]:
    """An eviction accepted twice for the same pod (namespace, name, uid) and step. Refused ones
    (429 while a PDB blocks) never reach here: only accepted evictions are disruptions."""
    seen: dict[tuple[str, str, str, str], Disruption] = {}
    out: list[Violation] = []
    for d in sorted((d for d in disruptions if d.verb == "evict"), key=lambda d: d.at):
        key = (d.namespace, d.name, d.uid, d.step)
        first = seen.get(key)
        if first is None:
            seen[key] = d
            continue
        out.append(
            Violation(
                "double-eviction",
                d.at,
                f"pod {d.namespace}/{d.name} (uid {d.uid or '?'}) evicted again {d.at - first.at:.1f} s after "
                f"its first accepted eviction, step {d.step or 'none'}",
            )
        )
    return out


@dataclass(frozen=True)
class PdbSample:
    at: float  # when the observer's watch saw this status
    disruptions_allowed: int
    current_healthy: int
    desired_healthy: int


def pdb_broken(
    disruptions: Sequence[Disruption], samples: Sequence[PdbSample], namespace: str
) -> list[Violation]:
    """A disruption sro made in the PDB's namespace while the PDB allowed none.

    Precisely: for a disruption at t, the PDB status in effect over [t - PDB_SETTLE_S, t + PDB_LAG_S]
    (the last sample at or before t - PDB_SETTLE_S, and every sample inside the window) said
    `disruptionsAllowed` 0 throughout. Any sample allowing one clears it (the watch may have been
    late to show the change that allowed it), as does a pod that was not Ready (`counted`): it is
    not among the PDB's healthy pods, so taking it cannot take them below the budget. A fault that killed a pod is no disruption of sro's and
    never reaches here; with no sample before t the PDB's state is unknown and nothing is said."""
    ordered = sorted(samples, key=lambda s: s.at)
    out: list[Violation] = []
    for d in disruptions:
        if d.namespace != namespace or not d.guarded or not d.counted:
            continue
        start, end = d.at - PDB_SETTLE_S, d.at + PDB_LAG_S
        before = [s for s in ordered if s.at <= start]
        window = [s for s in ordered if start < s.at <= end]
        in_effect = ([before[-1]] if before else []) + window
        if not before or any(s.disruptions_allowed > 0 for s in in_effect):
            continue
        last = in_effect[-1]
        out.append(
            Violation(
                "pdb-broken",
                d.at,
                f"{'eviction' if d.verb == 'evict' else 'delete'} of {d.namespace}/{d.name} accepted while "
                f"the PDB allowed no disruption (healthy {last.current_healthy} of {last.desired_healthy} desired)",
            )
        )
    return out


def is_ready(pod: Mapping[str, object]) -> bool:
    """Whether a pod counts as healthy for a PDB: Running, condition Ready True, not being deleted."""
    status, meta = _mapping(pod.get("status")), _mapping(pod.get("metadata"))
    conditions = [_mapping(c) for c in _list(status.get("conditions"))]
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return status.get("phase") == "Running" and ready and not meta.get("deletionTimestamp")


def ready_at(history: Sequence[tuple[float, bool]], at: float) -> bool:
    """Whether a pod was Ready at `at`, from its readiness changes as a watch saw them (a little
    late): Ready if it was at its last change before `at` or became so within PDB_LAG_S after it;
    with no change seen before `at` it is taken as Ready (unknown: the check stays strict)."""
    before = [ready for t, ready in history if t <= at]
    if before and before[-1]:
        return True
    if any(ready for t, ready in history if at < t <= at + PDB_LAG_S):
        return True
    return not before


def selects(selector: Mapping[str, object], labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels, matchExpressions) against a pod's labels; a PDB's
    empty selector selects every pod of its namespace (policy/v1 semantics)."""
    for key, value in _mapping(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for e in map(_mapping, _list(selector.get("matchExpressions"))):
        key, op, values = str(e.get("key")), e.get("operator"), [str(v) for v in _list(e.get("values"))]
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(str(op), False)
        if not ok:
            return False
    return True


# ---- the operator's log and memory -----------------------------------------------------------------
def tracebacks(logs: Mapping[str, str], at: float) -> list[Violation]:
    """A Python traceback in an operator log; `logs` maps `pod/container[ (previous)]` to its text.
    The detail names the log and the exception line (the first unindented line after it)."""
    out: list[Violation] = []
    for where, text in sorted(logs.items()):
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if "Traceback (most recent call last)" not in line:
                continue
            tail = next((x for x in lines[i + 1 :] if x and not x.startswith((" ", "\t"))), "")
            out.append(Violation("traceback", at, f"{where}: {tail.strip()[:300] or line.strip()}"))
    return out


def memory(peak_mib: float, at: float, bound: float = RSS_BOUND_MIB) -> list[Violation]:
    """The operator's resident memory past its bound (issue 26's figure)."""
    if peak_mib <= bound:
        return []
    return [Violation("memory", at, f"operator RSS peaked at {peak_mib:.1f} MiB (bound {bound:.0f} MiB)")]


def operator_restarts(restart_counts: Mapping[str, int], initial: Mapping[str, int]) -> int:
    """Restarts since the observer started: container restarts (the highest restartCount seen per pod
    uid, less the count the pod had at start: `initial`, uid -> restartCount of the pods running
    then) plus pods that replaced those."""
    replaced = len(set(restart_counts) - set(initial))
    since = sum(max(0, n - initial.get(uid, 0)) for uid, n in restart_counts.items())
    return since + replaced


# ---- convergence and leftovers ---------------------------------------------------------------------
def not_converged(
    sr: Mapping[str, object] | None, nodes: Sequence[Mapping[str, object]], name: str
) -> list[str]:
    """Why SpecialResource `name` has not converged (empty: it has): Ready True for its current
    generation, every row of its status validated with no upgrade or remediation under way, and the
    node labels agreeing (each row's node labelled validated; no other node labelled so)."""
    if sr is None:
        return [f"SpecialResource {name} not found"]
    meta = _mapping(sr.get("metadata"))
    status = _mapping(sr.get("status"))
    why: list[str] = []
    ready = next((c for c in _list(status.get("conditions")) if _mapping(c).get("type") == "Ready"), None)
    if ready is None or _mapping(ready).get("status") != "True":
        why.append("Ready is not True")
    if status.get("observedGeneration") != meta.get("generation"):
        why.append(
            f"status is for generation {status.get('observedGeneration')}, not {meta.get('generation')}"
        )
    rows = [_mapping(r) for r in _list(status.get("nodes")) if _mapping(r).get("state") != "refused"]
    if not rows:
        why.append("no node row in the status")
    label = validated_label(name)
    labelled = {
        str(_mapping(n.get("metadata")).get("name"))
        for n in nodes
        if _mapping(_mapping(n.get("metadata")).get("labels")).get(label) == "true"
    }
    row_names = {str(r.get("name")) for r in rows}
    for r in rows:
        if r.get("state") != "validated":
            why.append(f"node {r.get('name')} is {r.get('state') or 'not validated'}")
        for step in ("upgrade", "remediation"):
            if r.get(step):
                why.append(f"node {r.get('name')}: {step} under way")
    for n in sorted(row_names - labelled):
        why.append(f"node {n}: status says validated, label {label} not true")
    for n in sorted(labelled - row_names):
        why.append(f"node {n}: labelled {label}=true but not in the status")
    return why


def node_leftovers(
    sr: str, nodes: Sequence[Mapping[str, object]], at: float, condition: str
) -> list[Violation]:
    """What SpecialResource `sr` (deleted) left on nodes: labels, annotations or taints under
    `sro.dev/<sr>.`, and its remediation's node `condition`."""
    prefix = f"{PREFIX}{sr}."
    # a node's opt-in to a recipe of the same name (`sro.dev/simulated-gpu.enabled`) is the admin's
    admins = {simulated_opt_in_label(sr), simulated_driver_opt_in_label(sr)}
    out: list[Violation] = []
    for n in nodes:
        meta = _mapping(n.get("metadata"))
        name = meta.get("name")
        keys = [k for k in _mapping(meta.get("labels")) if k.startswith(prefix) and k not in admins]
        keys += [k for k in _mapping(meta.get("annotations")) if k.startswith(prefix)]
        spec, status = _mapping(n.get("spec")), _mapping(n.get("status"))
        keys += [
            f"taint {t.get('key')}"
            for t in map(_mapping, _list(spec.get("taints")))
            if str(t.get("key", "")).startswith(prefix)
        ]
        keys += [
            f"condition {condition}"
            for c in map(_mapping, _list(status.get("conditions")))
            if c.get("type") == condition
        ]
        if keys:
            out.append(Violation("leftover", at, f"node {name}: {', '.join(sorted(keys))}"))
    return out


def object_leftovers(objects: Sequence[str], at: float, sr: str) -> list[Violation]:
    """Objects (`kind/namespace/name`) still labelled with SpecialResource `sr` after its delete."""
    return [Violation("leftover", at, f"{o} of SpecialResource {sr} left") for o in sorted(objects)]


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []
