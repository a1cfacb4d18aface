"""The remediation metrics: nodes per state, the breaker, and each remediation counted once when it
ends (succeeded, failed, limit), by class and action; a deleted SpecialResource leaves no series."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sro.api.specialresource import RemediationSpec
from sro.devices.faultclasses import GPU_LOST, Fault
from sro.operator.metrics import REGISTRY
from sro.operator.observed import NodeInfo
from sro.operator.remediation import metrics
from sro.operator.remediation.machine import Machine, NodeFacts, NodeRemediation, RemediationPlan
from sro.operator.remediation.record import DONE, FAILED, LIMIT, Record

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
LOST = Fault("3", GPU_LOST, 79)


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def ended(sr: str, result: str, cls: str = GPU_LOST, action: str = "reset-device") -> float | None:
    return value(
        "sro_operator_remediations_total", specialresource=sr, **{"class": cls}, action=action, result=result
    )


def plan(nodes: dict[str, NodeRemediation], counts: dict[str, int], tripped: bool = False) -> RemediationPlan:
    summary = {"nodes": counts, "breaker": {"limit": 1, "unavailable": 1, "tripped": tripped}}
    return RemediationPlan(nodes, summary, busy=False)


def finished(state: str, reason: str, started: str = "2026-11-25T12:00:00Z") -> NodeRemediation:
    rec = Record(state, GPU_LOST, "reset-device", ("3",), (79,), started=started)
    return NodeRemediation(record=rec, events=(("Warning" if state != DONE else "Normal", reason, "..."),))


def test_nodes_per_state_and_the_breaker_follow_the_plan() -> None:
    metrics.observe("m-gauges", plan({}, {"waiting": 3, "evicting": 1}, tripped=True))
    assert value("sro_operator_remediation_nodes", specialresource="m-gauges", state="waiting") == 3
    assert value("sro_operator_remediation_nodes", specialresource="m-gauges", state="evicting") == 1
    assert value("sro_operator_remediation_nodes", specialresource="m-gauges", state="limit") == 0
    assert value("sro_operator_remediation_breaker_tripped", specialresource="m-gauges") == 1
    metrics.observe("m-gauges", plan({}, {"done": 1}))  # a state no node is in any more reads 0
    assert value("sro_operator_remediation_nodes", specialresource="m-gauges", state="waiting") == 0
    assert value("sro_operator_remediation_nodes", specialresource="m-gauges", state="done") == 1
    assert value("sro_operator_remediation_breaker_tripped", specialresource="m-gauges") == 0


def test_a_remediation_is_counted_once_when_it_ends_by_result() -> None:
    sr = "m-count"
    metrics.observe(sr, plan({"n1": finished(DONE, "RemediationSucceeded")}, {"done": 1}))
    assert ended(sr, "succeeded") == 1
    # the same ending again (its pass's writes failed, the pass ran again): not counted twice
    metrics.observe(sr, plan({"n1": finished(DONE, "RemediationSucceeded")}, {"done": 1}))
    assert ended(sr, "succeeded") == 1
    # a later remediation on the same node, and others that failed or hit the limit
    later = finished(DONE, "RemediationSucceeded", started="2026-11-25T12:30:00Z")
    metrics.observe(
        sr,
        plan(
            {
                "n1": later,
                "n2": finished(FAILED, "RemediationFailed"),
                "n3": finished(LIMIT, "RemediationLimit"),
            },
            {"done": 1, "failed": 1, "limit": 1},
        ),
    )
    assert ended(sr, "succeeded") == 2 and ended(sr, "failed") == 1 and ended(sr, "limit") == 1
    # steps on the way are not endings
    step = NodeRemediation(
        record=Record("evicting", GPU_LOST, "reset-device", ("3",), started="2026-11-25T13:00:00Z"),
        events=(("Normal", "RemediationStarted", "..."), ("Normal", "RemediationEvicting", "...")),
    )
    metrics.observe(sr, plan({"n4": step}, {"evicting": 1}))
    assert ended(sr, "succeeded") == 2 and ended(sr, "failed") == 1


def test_the_machine_walk_counts_one_success() -> None:
    sr = "m-walk"
    s = RemediationSpec()
    n = NodeInfo("n1")
    f = NodeFacts(n, faults=(LOST,), workloads=())
    for i, facts in enumerate(
        (
            f,
            f,
            replace(f, faults=(), resets={"3": NOW + timedelta(seconds=2)}),
            replace(
                f,
                faults=(),
                resets={"3": NOW + timedelta(seconds=2)},
                validated_at=NOW + timedelta(seconds=9),
            ),
        )
    ):
        p = Machine(s, sr, "sro.dev/gpu", NOW + timedelta(seconds=i * 3)).run([replace(facts, node=n)])
        metrics.observe(sr, p)
        step = p.nodes["n1"]
        ann = {k: v for k, v in {**n.annotations, **step.annotations}.items() if v is not None}
        n = replace(
            n,
            annotations=ann,
            unschedulable=n.unschedulable if step.unschedulable is None else step.unschedulable,
        )
    assert step.record is not None and step.record.state == DONE
    assert ended(sr, "succeeded") == 1 and not n.unschedulable


def test_forget_removes_every_series_of_the_specialresource() -> None:
    sr = "m-gone"
    metrics.observe(sr, plan({"n1": finished(FAILED, "RemediationFailed")}, {"failed": 1}, tripped=True))
    metrics.observe("m-kept", plan({}, {"waiting": 1}))
    assert ended(sr, "failed") == 1
    metrics.forget(sr)
    assert ended(sr, "failed") is None
    assert value("sro_operator_remediation_nodes", specialresource=sr, state="failed") is None
    assert value("sro_operator_remediation_breaker_tripped", specialresource=sr) is None
    assert value("sro_operator_remediation_nodes", specialresource="m-kept", state="waiting") == 1
    metrics.forget(sr)  # twice: nothing to remove, no error
    # counted afresh if it comes back
    metrics.observe(sr, plan({"n1": finished(FAILED, "RemediationFailed")}, {"failed": 1}))
    assert ended(sr, "failed") == 1
