"""The ClusterOperator status folded from SpecialResources' conditions (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sro.openshift.clusteroperator import summary

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
LATER = datetime(2024, 5, 1, 12, 5, tzinfo=UTC)


def _sr(name: str, ready: bool, progressing: bool, degraded: bool, nodes: int = 1, validated: int = 1,
        reason: str = "R", message: str = "m") -> dict[str, Any]:  # fmt: skip
    def c(t: str, v: bool) -> dict[str, str]:
        return {"type": t, "status": str(v), "reason": f"{t}{reason}", "message": f"{t} {message}"}

    return {
        "metadata": {"name": name},
        "status": {
            "nodeCount": nodes,
            "validatedCount": validated,
            "conditions": [c("Ready", ready), c("Progressing", progressing), c("Degraded", degraded)],
        },
    }


def _conds(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_no_special_resources_is_available() -> None:
    st = summary([], "0.1.0", "sro-system", now=NOW)
    assert _conds(st) == {
        "Available": ("True", "NoSpecialResources"),
        "Progressing": ("False", "AsExpected"),
        "Degraded": ("False", "AsExpected"),
    }
    assert st["versions"] == [{"name": "operator", "version": "0.1.0"}]
    assert st["relatedObjects"] == [{"group": "", "resource": "namespaces", "name": "sro-system"}]


def test_ready_progressing_and_degraded_fold() -> None:
    srs = [
        _sr("a-ready", True, False, False),
        _sr("b-rolling", False, True, False, nodes=3, validated=1, message="node-2 at runtime"),
        _sr("c-one-node-failing", False, False, True, nodes=2, validated=1, message="node-1 failing"),
    ]
    st = summary(srs, "0.1.0", "sro-system", sccs=["sro-driver"], now=NOW)
    assert _conds(st) == {
        "Available": ("True", "AsExpected"),
        "Progressing": ("True", "SpecialResourcesProgressing"),
        "Degraded": ("True", "SpecialResourcesDegraded"),
    }
    msgs = {c["type"]: c["message"] for c in st["conditions"]}
    assert msgs["Available"] == "1 of 3 SpecialResource(s) ready"
    assert msgs["Progressing"] == "b-rolling: ProgressingR: Progressing node-2 at runtime"
    assert msgs["Degraded"].startswith("c-one-node-failing: DegradedR")
    names = [(o["resource"], o["name"]) for o in st["relatedObjects"]]
    assert names == [
        ("namespaces", "sro-system"),
        ("specialresources", "a-ready"),
        ("specialresources", "b-rolling"),
        ("specialresources", "c-one-node-failing"),
        ("securitycontextconstraints", "sro-driver"),
    ]


def test_unavailable_when_nothing_of_a_special_resource_works() -> None:
    bad_spec = _sr("bad", False, False, True, nodes=0, validated=0, reason="UnknownRecipe")
    all_failing = _sr("broken", False, False, True, nodes=2, validated=0)
    starting = _sr("starting", False, True, False, nodes=2, validated=0)  # a rollout is not unavailability
    st = summary([bad_spec, all_failing, starting], "v", "ns", now=NOW)
    avail = st["conditions"][0]
    assert (avail["status"], avail["reason"]) == ("False", "SpecialResourcesUnavailable")
    assert "bad: DegradedUnknownRecipe" in avail["message"] and "broken:" in avail["message"]
    assert "starting" not in avail["message"]
    assert summary([starting], "v", "ns", now=NOW)["conditions"][0]["status"] == "True"


def test_transition_time_kept_while_the_status_holds_and_messages_are_short() -> None:
    first = summary([_sr("a", False, True, False)], "v", "ns", now=NOW)
    again = summary(
        [_sr("a", False, True, False, message="x" * 5000)], "v", "ns", previous=first["conditions"], now=LATER
    )
    assert [c["lastTransitionTime"] for c in again["conditions"]] == ["2024-05-01T12:00:00Z"] * 3
    assert all(len(c["message"]) <= 1000 for c in again["conditions"])
    done = summary([_sr("a", True, False, False)], "v", "ns", previous=again["conditions"], now=LATER)
    times = {c["type"]: c["lastTransitionTime"] for c in done["conditions"]}
    assert times == {
        "Available": "2024-05-01T12:00:00Z",
        "Progressing": "2024-05-01T12:05:00Z",
        "Degraded": "2024-05-01T12:00:00Z",
    }


def test_deleting_and_unseen_special_resources() -> None:
    deleting = {
        **_sr("gone", False, False, True, validated=0),
        "metadata": {"name": "gone", "deletionTimestamp": "x"},
    }
    unseen = {"metadata": {"name": "new"}}
    st = summary([deleting, unseen], "v", "ns", now=NOW)
    assert _conds(st)["Available"] == ("True", "AsExpected")
    assert [o["name"] for o in st["relatedObjects"]] == ["ns", "new"]
