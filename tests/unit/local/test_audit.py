"""The audit log as records (a torn last line, rotation) and the one-leader-per-term rule, on events
in the API server's own JSON shape (audit.k8s.io/v1, stage ResponseComplete)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sro.local.audit import (
    AuditEvent,
    Cursor,
    end_of,
    follow,
    parse_event,
    read_events,
    replica_of,
    terms,
    writers_per_term,
)

T0 = datetime(2026, 11, 26, 5, 0, 0, tzinfo=UTC)
A = "sro-operator-7c9f8d-aaaaa"
B = "sro-operator-7c9f8d-bbbbb"


def agent(replica: str) -> str:
    return f"sro-operator/0.1.0 ({replica})"


def stamp(t: float) -> str:
    return (T0 + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event(
    t: float,
    verb: str,
    user_agent: str,
    resource: str,
    name: str,
    *,
    code: int = 200,
    subresource: str = "",
    namespace: str = "",
    took: float = 0.01,
    request: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource, "name": name, "apiVersion": "v1"}
    if namespace:
        ref["namespace"] = namespace
    if subresource:
        ref["subresource"] = subresource
    doc: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Request" if request else "Metadata",
        "auditID": f"id-{t}-{name}",
        "stage": "ResponseComplete",
        "requestURI": f"/api/v1/{resource}/{name}",
        "verb": verb,
        "user": {
            "username": "system:serviceaccount:sro-system:sro-operator",
            "groups": ["system:authenticated"],
        },
        "sourceIPs": ["10.244.0.7"],
        "userAgent": user_agent,
        "objectRef": ref,
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": stamp(t),
        "stageTimestamp": stamp(t + took),
    }
    if request is not None:
        doc["requestObject"] = request
    return doc


def lease(t: float, replica: str, holder: str | None = "same", code: int = 200) -> dict[str, Any]:
    spec = {"holderIdentity": replica if holder == "same" else holder, "leaseDurationSeconds": 15}
    return event(
        t,
        "patch",
        agent(replica),
        "leases",
        "sro-operator",
        namespace="sro-system",
        code=code,
        request={"metadata": {"resourceVersion": "1"}, "spec": spec},
    )


def node_write(t: float, replica: str, code: int = 200) -> dict[str, Any]:
    return event(t, "patch", agent(replica), "nodes", "vm", code=code)


def records(docs: list[dict[str, Any]]) -> list[AuditEvent]:
    out = [parse_event(d) for d in docs]
    assert all(e is not None for e in out)
    return [e for e in out if e is not None]


def test_an_event_is_read_with_its_writer_and_object() -> None:
    e = parse_event(
        event(1.0, "create", agent(A), "pods", "gpu-job-1", subresource="eviction", namespace="w", code=429)
    )
    assert e is not None
    assert (e.verb, e.resource, e.subresource, e.namespace, e.name, e.code) == (
        "create",
        "pods",
        "eviction",
        "w",
        "gpu-job-1",
        429,
    )
    assert e.user == "system:serviceaccount:sro-system:sro-operator"
    assert e.time == T0 + timedelta(seconds=1) and e.end == T0 + timedelta(seconds=1.01)
    assert e.replica == A and e.is_write and not e.accepted
    assert e.holder is None
    lease_write = parse_event(lease(2.0, B))
    assert lease_write is not None and lease_write.holder == B
    released = parse_event(lease(3.0, B, holder=None))
    assert released is not None and released.holder == ""


def test_replica_names_come_only_from_the_operators_user_agent() -> None:
    assert replica_of(agent(A)) == A
    assert replica_of("kopf/1.45.2") is None
    assert replica_of("kubectl/v1.20.15 (linux/amd64) kubernetes/abc") is None
    assert replica_of("sro-operator/0.1.0") is None


def test_reading_follows_the_log_and_leaves_a_torn_last_line_for_later(tmp_path: Path) -> None:
    log = tmp_path / "kube-apiserver-audit.log"
    first = json.dumps(node_write(1, A)) + "\n"
    second = json.dumps(node_write(2, A))
    log.write_text(first + second[:40])  # the API server is halfway through the second line
    events, offset = read_events(log)
    assert [e.time for e in events] == [T0 + timedelta(seconds=1)]
    assert offset == len(first.encode())
    with log.open("a") as f:
        f.write(second[40:] + "\n" + "not json\n")
    events, offset2 = read_events(log, offset)
    assert [e.time for e in events] == [T0 + timedelta(seconds=2)]
    assert offset2 == log.stat().st_size
    assert read_events(log, offset2) == ([], offset2)


def test_a_rotated_log_is_read_again_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "kube-apiserver-audit.log"
    log.write_text("".join(json.dumps(node_write(t, A)) + "\n" for t in range(5)))
    _, offset = read_events(log)
    log.write_text(json.dumps(node_write(9, B)) + "\n")  # renamed away; a new, shorter file
    events, _ = read_events(log, offset)
    assert [e.replica for e in events] == [B]
    assert read_events(tmp_path / "missing.log", 7) == ([], 7)


def test_following_reads_the_rest_of_a_rotated_file_then_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "kube-apiserver-audit.log"
    log.write_text(json.dumps(node_write(1, A)) + "\n")
    events, cursor = follow(log)
    assert [e.replica for e in events] == [A] and cursor == Cursor(log.stat().st_ino, log.stat().st_size)
    with log.open("a") as f:  # written after the last read, then the API server rotates
        f.write(json.dumps(node_write(2, A)) + "\n")
    log.rename(tmp_path / "kube-apiserver-audit-2026-11-26T09-30-00.000.log")
    log.write_text(json.dumps(node_write(3, B)) + "\n")
    events, cursor = follow(log, cursor)
    assert [(e.replica, e.time) for e in events] == [
        (A, T0 + timedelta(seconds=2)),
        (B, T0 + timedelta(seconds=3)),
    ]
    assert cursor == Cursor(log.stat().st_ino, log.stat().st_size)
    assert follow(log, cursor) == ([], cursor)
    assert end_of(log) == cursor and end_of(tmp_path / "missing.log") == Cursor()


def test_following_a_rotated_file_already_pruned_reads_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "kube-apiserver-audit.log"
    log.write_text(json.dumps(node_write(1, A)) + "\n")
    _, cursor = follow(log)
    log.unlink()  # between two rotations, for an instant: no file
    assert follow(log, cursor) == ([], cursor)  # nothing, the cursor kept
    log.write_text(json.dumps(node_write(1, A)) + "\n")
    _, cursor = follow(log)
    backup = tmp_path / "kube-apiserver-audit-2026-11-26T09-30-00.000.log"
    log.rename(backup)  # rotated, a new file begun, then the backup pruned past --audit-log-maxbackup
    log.write_text(json.dumps(node_write(3, B)) + "\n")
    backup.unlink()
    events, _ = follow(log, cursor)
    assert [e.replica for e in events] == [B]


def test_terms_follow_take_overs_not_renewals_or_refused_writes() -> None:
    log = records(
        [
            lease(0, A),
            lease(2, A),  # renewal
            lease(4, B, code=409),  # B tried while A held it: refused
            lease(20, B),  # take-over
            lease(30, B, holder=None),  # release
        ]
    )
    got = [(t.holder, t.start) for t in terms(log)]
    assert got == [
        (None, None),
        (A, T0 + timedelta(seconds=0.01)),
        (B, T0 + timedelta(seconds=20.01)),
        ("", T0 + timedelta(seconds=30.01)),
    ]


def test_two_replicas_alternating_by_term_never_overlap() -> None:
    docs = [lease(0, A), node_write(1, A), node_write(5, A), lease(6, A)]
    docs += [lease(25, B), node_write(26, B), node_write(27, B)]
    docs += [lease(50, A), node_write(51, A)]
    docs += [node_write(52, B, code=409)]  # B, deposed, tries once more: refused, nothing written
    assert writers_per_term(records(docs)) == []


def test_a_paused_ex_leader_writing_in_the_new_term_is_one_overlap() -> None:
    docs = [lease(0, A), node_write(1, A)]
    # A is stopped (SIGSTOP) past its lease; B takes it over and writes
    docs += [lease(20, B), node_write(21, B), node_write(22, B)]
    # A resumes: two writes land before it notices it lost the lease (its renewal is refused)
    docs += [
        node_write(23, A),
        event(23.5, "create", agent(A), "pods", "p", subresource="eviction", namespace="w"),
    ]
    docs += [lease(24, A, code=409), node_write(25, B)]
    overlaps = writers_per_term(records(docs))
    assert len(overlaps) == 1
    o = overlaps[0]
    assert (o.holder, o.writer, o.count) == (B, A, 2)
    assert (o.start, o.end) == (T0 + timedelta(seconds=23), T0 + timedelta(seconds=23.5))
    assert o.resources == ("nodes", "pods/eviction")


def test_a_write_received_before_the_take_over_completed_counts_in_the_old_term() -> None:
    docs = [lease(0, A), event(19.995, "patch", agent(A), "nodes", "vm", took=0.5), lease(19.99, B, code=200)]
    # B's lease write completed at 20.0; A's node write arrived at 19.995, before: not B's term
    assert writers_per_term(records(docs)) == []
    docs.append(node_write(20.001, A))
    assert [o.writer for o in writers_per_term(records(docs))] == [A]


def test_writing_after_releasing_the_lease_is_an_overlap_with_nobody() -> None:
    docs = [lease(0, A), node_write(1, A), lease(2, A, holder=None), node_write(3, A)]
    overlaps = writers_per_term(records(docs))
    assert [(o.holder, o.writer, o.count) for o in overlaps] == [("", A, 1)]


def test_before_the_first_lease_write_the_first_writer_is_taken_as_the_holder() -> None:
    docs = [node_write(1, A), node_write(2, A), node_write(3, B), lease(10, B), node_write(11, B)]
    overlaps = writers_per_term(records(docs))
    assert [(o.holder, o.writer, o.count) for o in overlaps] == [(A, B, 1)]


def test_other_clients_and_reads_are_not_counted() -> None:
    docs = [lease(0, A), node_write(1, A)]
    docs += [event(2, "patch", "kubectl/v1.20.15 (linux/amd64)", "nodes", "vm")]
    docs += [event(3, "get", agent(B), "nodes", "vm")]  # a standby reading is fine
    assert writers_per_term(records(docs)) == []


def test_lines_recorded_from_the_local_api_server_are_read() -> None:
    """Two lines as the local API server (1.20) wrote them: a Lease renewal (Request level, with its
    holderIdentity) and an eviction (Metadata level), from an operator image older than its user agent."""
    events, used = read_events(Path(__file__).parent / "data" / "audit-recorded.log")
    assert used == (Path(__file__).parent / "data" / "audit-recorded.log").stat().st_size
    renewal, eviction = events
    assert (renewal.verb, renewal.resource, renewal.name, renewal.namespace) == (
        "patch",
        "leases",
        "sro-operator",
        "sro-system",
    )
    assert renewal.holder and renewal.holder.startswith("sro-operator-") and renewal.code == 200
    assert renewal.user == "system:serviceaccount:sro-system:sro-operator"
    assert renewal.replica is None  # python-httpx: the operator did not name itself yet
    assert renewal.completed is not None and renewal.completed > renewal.time
    assert (eviction.verb, eviction.resource, eviction.subresource) == ("create", "pods", "eviction")
    assert eviction.user_agent.startswith("kubectl/") and eviction.code in (201, 429)
