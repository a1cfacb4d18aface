"""The observer's audit-log path and bookkeeping without a cluster: recorded audit lines, pod and PDB
watch events fed to its handlers, a stand-in API client. The rules are test_chaos_invariants.py's;
here: that the observer turns the API server's records into the right facts for them, and that
`stop()` and `final_checks()` together count each violation once."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.chaos import observer as observer_module
from benchmarks.chaos.invariants import PdbSample, Violation
from benchmarks.chaos.observer import Observer

NS = "apps"
AGENT = "sro-operator/0.1.0 (sro-operator-{})"


def line(
    at: float, verb: str, name: str, code: int, replica: str = "a", sub: str = "eviction", **ref: Any
) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e6):06d}Z"
    doc = {
        "kind": "Event",
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": "system:serviceaccount:sro-system:sro-operator"},
        "userAgent": AGENT.format(replica),
        "objectRef": {"resource": "pods", "namespace": NS, "name": name, "subresource": sub, **ref},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": stamp,
        "stageTimestamp": stamp,
    }
    return json.dumps(doc) + "\n"


class NoClient:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture
def observer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Observer:
    monkeypatch.setattr(observer_module, "Client", NoClient)
    return Observer(sr="gpu", workload_ns=NS, pdb="w", audit_log=tmp_path / "audit.log")


def pod(name: str, uid: str, app: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": uid, "labels": {"app": app}},
        "spec": {"nodeName": "n"},
    }


def test_the_audit_log_gives_double_evictions_and_a_broken_pdb_and_refusals_are_not_counted(
    observer: Observer,
) -> None:
    t0 = time.time() - 30
    observer._on_pdb(
        "ADDED", {"spec": {"selector": {"matchLabels": {"app": "g"}}}, "status": {"disruptionsAllowed": 0}}
    )
    observer._pdb[0] = PdbSample(t0 - 10, 0, 1, 1)  # seen long before the disruptions
    observer._on_pod("ADDED", pod("v", "u-v", "v"))
    observer._on_pod("ADDED", pod("g", "u-g", "g"))
    observer._uids = {k: [(t0 - 10, u)] for k, [(_, u)] in observer._uids.items()}
    observer.audit_log.write_text(
        line(t0, "create", "v", 201)
        + line(t0 + 1, "create", "g", 429)  # refused by the PDB: expected
        + line(t0 + 2, "create", "v", 201)  # the same pod, the same (no) step: twice
        + line(t0 + 3, "delete", "g", 200, sub="")  # past the PDB
    )
    found = observer._check_audit(time.time())
    assert sorted(v.kind for v in found) == ["double-eviction", "pdb-broken"], found
    assert [d.uid for d in observer._disruptions] == ["u-v", "u-v", "u-g"]
    # read on from where it stopped: nothing new, nothing found again once said
    assert observer._add(found) == found and observer._add(observer._check_audit(time.time())) == []


def test_a_replica_writing_outside_its_lease_term_is_two_writers(observer: Observer) -> None:
    t0 = time.time() - 30

    def lease(at: float, holder: str) -> str:
        doc = json.loads(line(at, "update", "sro-operator", 200, replica=holder, sub="", resource="leases"))
        doc["objectRef"]["namespace"] = "sro-system"
        doc["requestObject"] = {"spec": {"holderIdentity": f"sro-operator-{holder}"}}
        return json.dumps(doc) + "\n"

    ok = lease(t0, "a") + line(t0 + 1, "patch", "x", 200, replica="a", sub="")
    observer.audit_log.write_text(ok)
    assert [v.kind for v in observer._check_audit(time.time())] == []
    with observer.audit_log.open("a") as f:
        f.write(lease(t0 + 2, "b") + line(t0 + 3, "patch", "x", 200, replica="a", sub=""))
    found = observer._check_audit(time.time())
    assert [v.kind for v in found] == ["two-writers"], found
    assert "sro-operator-a" in found[0].detail and "sro-operator-b held" in found[0].detail


def test_final_checks_return_only_what_is_new_and_stop_does_not_repeat_it(
    observer: Observer, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = Violation("traceback", 1.0, "op-1/operator: KeyError")
    new = Violation("traceback", 2.0, "op-2/operator: ValueError")
    observer._add([old])
    monkeypatch.setattr(observer, "_sample_memory", lambda now: [])
    monkeypatch.setattr(observer, "_check_logs", lambda now: [old, new])
    assert observer.final_checks() == [new]
    assert observer.violations() == [old]
    assert observer._add([Violation("memory", 3.0, "151 MiB"), Violation("memory", 4.0, "160 MiB")]) == [
        Violation("memory", 3.0, "151 MiB")
    ]
