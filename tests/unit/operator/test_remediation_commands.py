"""`sro remediation status|pause|resume|retry` against a fake cluster: the table and the breaker line
from the nodes' records and the SpecialResource's status, the spec patch of pause/resume, and the
record `retry` writes — which the machine then takes as a node to uncordon, or to repair afresh."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from sro.api.specialresource import RemediationSpec
from sro.api.timestamps import stamp
from sro.devices.faultclasses import GPU_LOST, Fault
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.remediation import commands
from sro.operator.remediation.machine import Machine, NodeFacts
from sro.operator.remediation.record import (
    DONE,
    EVICTING,
    FAILED,
    LIMIT,
    WAITING,
    Record,
    read,
    remediation_annotation,
)
from sro.operator.remediation.table import age, breaker_line

SR = "gpus"
KEY = remediation_annotation(SR)
NOW = datetime.now(UTC)


class FakeObjects:
    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def merge_patch(
        self, kind: str, name: str, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        self.patches.append((kind, name, body))
        return {}


def rec(state: str, **kw: Any) -> Record:
    base: dict[str, Any] = {
        "fault_class": GPU_LOST,
        "action": "reset-device",
        "devices": ("3",),
        "xids": (79,),
        "attempts": (stamp(NOW - timedelta(minutes=5)),),
        "cordoned": True,
        "started": stamp(datetime.now(UTC) - timedelta(minutes=2, seconds=10)),
    }
    return Record(state, **{**base, **kw})


def node(name: str, record: Record | None = None, cordoned: bool = True) -> NodeInfo:
    ann = {KEY: record.to_json()} if record is not None else {}
    return NodeInfo(name, annotations=ann, unschedulable=cordoned and record is not None)


SUMMARY = {
    "nodes": {"evicting": 1, "limit": 1, "waiting": 2},
    "breaker": {"limit": 2, "unavailable": 2, "tripped": True},
    "paused": False,
    "dryRun": False,
}


def cluster(
    monkeypatch: pytest.MonkeyPatch, nodes: list[NodeInfo], status: dict[str, Any] | None = None, srs: int = 1
) -> FakeObjects:
    objects = FakeObjects()
    found = [
        SpecialResourceInfo(SR, "uid", {"recipe": "simulated-gpu", "remediation": {}}, status=status or {})
    ]
    if srs > 1:
        found.append(SpecialResourceInfo("other", "uid2", {"recipe": "nvidia-gpu"}))
    monkeypatch.setattr(commands, "_read", lambda kubeconfig: (objects, found, nodes))
    return objects


def invoke(*args: str) -> Any:
    return CliRunner().invoke(commands.remediation, list(args))


def test_status_shows_each_node_under_remediation_and_the_breaker(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [
        node("n2", rec(EVICTING, reason="evicting 1 pod(s): default/on-3")),
        node("n1", rec(LIMIT, reason="past the limit", attempts=("a", "b", "c"))),
        node("n3", rec(DONE, cordoned=False)),  # finished, nothing cordoned: not shown
        node("n4"),
    ]
    cluster(monkeypatch, nodes, {"remediation": SUMMARY})
    r = invoke("status")
    assert r.exit_code == 3, r.output  # a node held for a person
    lines = r.output.splitlines()
    assert lines[0] == "gpus: evicting 1, limit 1, waiting 2"
    n1 = next(i for i, line in enumerate(lines) if "│ n1" in line)
    n2 = next(i for i, line in enumerate(lines) if "│ n2" in line)
    assert n1 < n2  # in node order
    assert "GpuLost" in lines[n2] and "reset-device" in lines[n2] and "evicting" in lines[n2]
    # started 2m10s before the record was made: a second more by the time it is shown
    assert re.search(r"│ 2m1\ds ago", lines[n2]) and "default/on-3" in lines[n2]
    assert "limit" in lines[n1] and "│ 3 " in lines[n1]
    assert "n3" not in r.output and "n4" not in r.output
    assert lines[-1] == (
        "breaker: 2 of at most 2 node(s) out of service (spec.remediation.maxUnavailable), tripped: yes; "
        "paused: no; dry run: no"
    )


def test_status_with_nothing_to_show_exits_0_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster(monkeypatch, [node("n1")])
    r = invoke("status", SR)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == "gpus: no node under remediation"
    assert "breaker: not computed yet" in r.output


def test_status_names_the_specialresources_when_several(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster(monkeypatch, [], srs=2)
    r = invoke("status")
    assert r.exit_code == 1 and "several SpecialResources" in r.output and "gpus, other" in r.output
    r = invoke("status", "nope")
    assert r.exit_code == 1 and "no SpecialResource 'nope'" in r.output


def test_breaker_line_falls_back_to_the_specs_switches() -> None:
    sr = SpecialResourceInfo(SR, "u", {"remediation": {"paused": True, "dryRun": True}})
    assert breaker_line(sr).endswith("paused: yes; dry run: yes")


def test_breaker_line_says_when_remediation_is_off() -> None:
    sr = SpecialResourceInfo(SR, "u", {"recipe": "simulated-gpu"})
    assert breaker_line(sr).startswith("remediation off: the spec has no `remediation`")


def test_age_words() -> None:
    assert age(stamp(NOW - timedelta(seconds=5)), NOW) == "5s ago"
    assert age(stamp(NOW - timedelta(hours=3, minutes=4)), NOW) == "3h04m ago"
    assert age(stamp(NOW - timedelta(days=2, hours=1)), NOW) == "2d01h ago"
    assert age("garbage", NOW) == "garbage" and age("", NOW) == "-"


@pytest.mark.parametrize(("cmd", "paused"), [("pause", True), ("resume", False)])
def test_pause_and_resume_patch_the_spec(monkeypatch: pytest.MonkeyPatch, cmd: str, paused: bool) -> None:
    objects = cluster(monkeypatch, [])
    r = invoke(cmd, SR)
    assert r.exit_code == 0, r.output
    assert objects.patches == [("SpecialResource", SR, {"spec": {"remediation": {"paused": paused}}})]
    assert ("paused" if paused else "resumed") in r.output


@pytest.mark.parametrize("cmd", ["pause", "resume"])
def test_pause_never_turns_remediation_on(monkeypatch: pytest.MonkeyPatch, cmd: str) -> None:
    objects = cluster(monkeypatch, [], srs=2)
    r = invoke(cmd, "other")  # its spec has no remediation: a patch would turn it on
    assert r.exit_code == 1 and "other has no spec.remediation: remediation is off" in r.output
    assert objects.patches == []


@pytest.mark.parametrize("state", [LIMIT, FAILED])
def test_retry_clears_the_hold_and_the_machine_uncordons(monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    held = node("n1", rec(state, attempts=tuple(stamp(NOW - timedelta(minutes=m)) for m in (1, 2, 3))))
    objects = cluster(monkeypatch, [held])
    r = invoke("retry", "n1", "--specialresource", SR)
    assert r.exit_code == 0, r.output
    assert "uncordons it" in r.output
    [(kind, name, body)] = objects.patches
    assert (kind, name) == ("Node", "n1")
    written = replace(held, annotations=body["metadata"]["annotations"])
    again = read(written, SR)
    assert again is not None and again.state == DONE and again.attempts == () and again.cordoned
    # the fault is gone: the machine uncordons what it cordoned and forgets the record
    step = Machine(RemediationSpec(), SR, "sro.dev/gpu", NOW).run([NodeFacts(written)]).nodes["n1"]
    assert step.unschedulable is False and step.annotations == {KEY: None}
    # the fault is still there: a fresh remediation starts (attempt 1, not past the limit)
    lost = NodeFacts(written, faults=(Fault("3", GPU_LOST, 79),))
    step = Machine(RemediationSpec(), SR, "sro.dev/gpu", NOW).run([lost]).nodes["n1"]
    assert step.record is not None and step.record.state == EVICTING and len(step.record.attempts) == 1


@pytest.mark.parametrize(
    ("nodes", "args", "said"),
    [
        ([], ("retry", "n9"), "no node 'n9'"),
        ([node("n1")], ("retry", "n1"), "node n1 is not under remediation by gpus, not limit or failed"),
        ([node("n1", rec(WAITING))], ("retry", "n1", "--sr", SR), "node n1 is waiting, not limit or failed"),
    ],
)
def test_retry_refuses_a_node_not_held(
    monkeypatch: pytest.MonkeyPatch, nodes: list[NodeInfo], args: tuple[str, ...], said: str
) -> None:
    objects = cluster(monkeypatch, nodes)
    r = invoke(*args)
    assert r.exit_code == 1 and said in r.output, r.output
    assert objects.patches == []
