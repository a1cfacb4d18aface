"""The fault campaign's pure parts: the seeded schedule (replayable, spaced, every kind reachable,
filtered by --faults), the runner's fault loop against a stand-in observer, and the report's text."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import pytest

from benchmarks.chaos import runner
from benchmarks.chaos.faults import INJECTORS
from benchmarks.chaos.report import FaultRecord, Outcome, quantile, render, replay_command
from benchmarks.chaos.schedule import COMPONENTS, KINDS, MIN_GAP_S, XIDS, Planned, parse_kinds, schedule


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert schedule(7, 10) == schedule(7, 10)


def test_different_seeds_give_different_schedules() -> None:
    plans = {
        tuple((p.at_s, p.kind, tuple(sorted(p.params.items()))) for p in schedule(s, 10)) for s in range(20)
    }
    assert len(plans) == 20


def test_faults_are_spaced_and_within_the_minutes() -> None:
    for seed in range(30):
        plan = schedule(seed, 10)
        times = [p.at_s for p in plan]
        assert times == sorted(times)
        assert all(b - a >= MIN_GAP_S - 0.1 for a, b in itertools.pairwise(times))
        assert times[0] >= MIN_GAP_S and times[-1] < 600


def test_every_kind_and_parameter_is_reachable() -> None:
    plans = [p for seed in range(40) for p in schedule(seed, 10)]
    assert {p.kind for p in plans} == set(KINDS)
    assert {p.params["component"] for p in plans if p.kind == "component-restarted"} == set(COMPONENTS)
    assert {p.params["xid"] for p in plans if p.kind == "device-fault"} == set(XIDS)
    assert {p.params["change"] for p in plans if p.kind == "spec-changed"} == {
        "device-plugin-config",
        "state-toggled",
        "driver-version",
    }


def test_a_short_run_meets_every_kind_before_any_twice() -> None:
    plan = schedule(3, 10)
    assert len(plan) >= len(KINDS)
    assert sorted(p.kind for p in plan[: len(KINDS)]) == sorted(KINDS)


def test_a_stop_outlasts_the_operator_lease() -> None:
    stops = [p for seed in range(40) for p in schedule(seed, 10) if p.kind == "leader-stopped"]
    assert stops and all(float(p.params["stop_s"]) > 15 for p in stops)


def test_faults_filter_picks_kinds() -> None:
    kinds = parse_kinds("device-fault,leader-killed")
    assert kinds == ("leader-killed", "device-fault")  # in KINDS order
    assert {p.kind for p in schedule(1, 10, kinds)} == set(kinds)
    assert parse_kinds("") == KINDS
    with pytest.raises(ValueError, match=r"unknown fault kind.*nope"):
        parse_kinds("leader-killed,nope")
    with pytest.raises(ValueError, match="no fault kind"):
        schedule(1, 10, ())


def test_every_kind_has_an_injector() -> None:
    assert set(INJECTORS) == set(KINDS)


# ---- the runner's loop with a stand-in observer ------------------------------------------------------
@dataclass(frozen=True)
class V:
    kind: str
    at: float
    detail: str


class StandIn:
    """Converged except for the 2 looks right after each fault."""

    def __init__(self) -> None:
        self.operator_restarts, self.rss_peak_mib = 1, 80.0
        self.unsettled = 0
        self.found: list[V] = []

    def start(self) -> None: ...
    def stop(self) -> list[Any]:
        return self.found

    def violations(self) -> list[Any]:
        return list(self.found)

    def converged(self) -> bool:
        self.unsettled -= 1
        return self.unsettled < 0

    def final_checks(self) -> list[Any]:
        return []


def test_run_faults_injects_in_order_and_measures_convergence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "POLL_S", 0.01)
    obs = StandIn()
    calls: list[str] = []

    def inject(t: Any, p: dict[str, Any]) -> str:
        calls.append(str(p["n"]))
        obs.unsettled = 2
        return f"fault {p['n']}"

    def broken(t: Any, p: dict[str, Any]) -> str:
        raise RuntimeError("boom")

    plan = [Planned(0.0, "a", {"n": 1}), Planned(0.3, "b", {"n": 2}), Planned(0.6, "a", {"n": 3})]
    out = Outcome(5, 1, ("a", "b"), plan)
    out.started_at = time.time()
    runner.run_faults(None, obs, plan, out, lambda _: None, {"a": inject, "b": broken}, 0.05)  # type: ignore[arg-type]
    assert calls == ["1", "3"]
    assert out.faults[0].line == "fault 1"
    assert "boom" in out.faults[1].line and out.errors and "b at" in out.errors[0]
    assert out.faults[0].converged_s is not None and out.faults[0].converged_s < 0.3
    assert out.faults[2].converged_s is None  # the last one: wait_converged measures it
    assert runner.wait_converged(obs, time.time(), 1.0) is not None
    assert [round(f.started_s, 1) for f in out.faults] == [0.0, 0.3, 0.6]  # on time


def test_a_fault_that_runs_late_pushes_the_next_by_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "POLL_S", 0.01)

    def slow(t: Any, p: dict[str, Any]) -> str:
        time.sleep(float(p["s"]))
        return "done"

    plan = [Planned(0.0, "a", {"s": 0.5}), Planned(0.1, "a", {"s": 0.0})]
    out = Outcome(5, 1, ("a",), plan)
    out.started_at = time.time()
    runner.run_faults(None, StandIn(), plan, out, lambda _: None, {"a": slow}, 0.3)  # type: ignore[arg-type]
    assert out.faults[1].started_s >= out.faults[0].ended_s + 0.3


# ---- the report ----------------------------------------------------------------------------------------
def _outcome(violations: list[V], final: float | None = 12.0) -> Outcome:
    plan = [
        Planned(5.0, "leader-killed"),
        Planned(20.0, "device-fault", {"device": 2, "xid": 79, "hold_s": 4.0}),
    ]
    o = Outcome(42, 3, KINDS, plan, bound_s=240, operator_restarts=2, rss_peak_mib=97.25, started_at=1000.0)
    o.faults = [
        FaultRecord(plan[0], 5.0, 5.2, "deleted leader pod sro-operator-a", 8.0),
        FaultRecord(plan[1], 20.0, 24.1, "Xid 79 on device 2", None),
    ]
    o.violations = list(violations)
    o.final_converged_s = final
    return o


def test_report_table_counts_faults_and_convergence() -> None:
    text = render(_outcome([]))
    assert "seed 42, 3 min, 2 faults" in text
    assert any(line.split() == ["leader-killed", "1"] for line in text.splitlines())
    assert any(line.split() == ["sr-reapplied", "0"] for line in text.splitlines())
    assert "p50 10.0 s, p99 12.0 s" in text  # over 8 and the final 12
    assert "operator restarts: 2; operator RSS peak: 97.2 MiB" in text
    assert "   5.0-    5.2  leader-killed" in text
    assert text.count("[converged +8.0 s]") == 1 and "24.1  device-fault" in text
    assert "Xid 79 on device 2  [converged +12.0 s]" in text  # the last fault: the final wait
    assert text.splitlines()[-1].startswith("OK — 0 violations")
    assert "FAILED" not in text


def test_a_failing_report_prints_seed_schedule_and_replay() -> None:
    text = render(_outcome([V("stale-cordon", 1030.5, "node cordoned 31 s with no step")]))
    assert any(line.split() == ["stale-cordon", "1"] for line in text.splitlines())
    assert "30.5          VIOLATION stale-cordon: node cordoned 31 s" in text
    assert "FAILED — seed 42" in text
    assert "   20.0  device-fault device=2 hold_s=4.0 xid=79" in text
    assert text.splitlines()[-1] == "replay: python -m benchmarks chaos --seed 42 --minutes 3"


def test_no_convergence_fails_the_run() -> None:
    o = _outcome([], final=None)
    assert o.failed
    assert "converged after the last fault: NOT within 240 s" in render(o)


def test_replay_names_the_faults_only_when_filtered() -> None:
    assert replay_command(1, 10, KINDS) == "python -m benchmarks chaos --seed 1 --minutes 10"
    assert replay_command(1, 2.5, ("device-fault",)).endswith("--minutes 2.5 --faults device-fault")


def test_quantiles() -> None:
    assert quantile([3.0], 0.99) == 3.0
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert 4.9 < quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.99) <= 5.0


def test_pod_and_daemonset_faults_draw_only_states_that_run_a_daemonset() -> None:
    """feature-discovery is a label state: a kill or delete drawn for it injected nothing."""
    from sro.api.names import FEATURE_DISCOVERY

    plan = schedule(3, 30.0, ("operand-pod-killed", "daemonset-deleted"))
    states = {p.params["state"] for p in plan}
    assert FEATURE_DISCOVERY not in states and states <= {"driver", "runtime", "device-plugin", "monitoring"}
