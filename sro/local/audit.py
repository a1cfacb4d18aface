"""The local API server's audit log, read as records, and the check that one operator leads at a time.

Why: two operator replicas that both believe they lead (one paused past its lease, then resumed) would
both write labels, taints and pods. The fault campaign proves they never do from what the API server
itself saw: the audit log (`Layout.audit_log`, policy `components.AUDIT_POLICY`) records every write
with the writer's user agent, and each operator replica's user agent names it
(`sro-operator/<version> (<replica>)`), the same name it holds the Lease as. Pure: text in, records
out; the caller reads the file (`read_events` and `follow` only open it and seek).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sro.api.names import OPERATOR_LEASE

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
OPERATOR_AGENT = "sro-operator/"  # how every operator replica's user agent starts
_REPLICA = re.compile(r"^sro-operator/\S+ \(([^)]+)\)")


@dataclass(frozen=True)
class AuditEvent:
    """One request as the API server audited it (stage ResponseComplete).

    `time`: when the request was received; `completed`: when its response was (a Lease take-over
    counts from then). `holder`: for a write of the operator's Lease, the holderIdentity the write
    set (`""`: released), `None` when the write did not say (or it is not the Lease).
    """

    time: datetime
    verb: str
    user: str
    user_agent: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int  # the response's HTTP status; 0 when the log does not say
    completed: datetime | None = None
    holder: str | None = None

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS

    @property
    def accepted(self) -> bool:
        """The API server did it: 0 (not said) counts as done, so a write is never missed."""
        return self.code < 400

    @property
    def replica(self) -> str | None:
        """The operator replica that sent it (the name in its user agent), None for anyone else."""
        return replica_of(self.user_agent)

    @property
    def end(self) -> datetime:
        return self.completed or self.time


def replica_of(user_agent: str) -> str | None:
    """`sro-operator/0.1.0 (sro-operator-5d9c-abcde)` -> `sro-operator-5d9c-abcde`."""
    m = _REPLICA.match(user_agent)
    return m.group(1) if m else None


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def parse_event(doc: dict[str, Any]) -> AuditEvent | None:
    """One audit.k8s.io/v1 Event as a record; None for what is not one (another stage, no time)."""
    if doc.get("kind") != "Event" or doc.get("stage", "ResponseComplete") != "ResponseComplete":
        return None
    received = _time(doc.get("requestReceivedTimestamp"))
    completed = _time(doc.get("stageTimestamp"))
    if received is None:
        return None
    ref = doc.get("objectRef") or {}
    holder = None
    request = doc.get("requestObject")
    if ref.get("resource") == "leases" and isinstance(request, dict):
        spec = request.get("spec")
        if isinstance(spec, dict) and "holderIdentity" in spec:
            holder = spec["holderIdentity"] or ""
    return AuditEvent(
        time=received,
        verb=str(doc.get("verb", "")),
        user=str((doc.get("user") or {}).get("username", "")),
        user_agent=str(doc.get("userAgent", "")),
        resource=str(ref.get("resource", "")),
        subresource=str(ref.get("subresource", "")),
        namespace=str(ref.get("namespace", "")),
        name=str(ref.get("name", "")),
        code=int((doc.get("responseStatus") or {}).get("code") or 0),
        completed=completed,
        holder=holder,
    )


def parse_lines(data: bytes) -> tuple[list[AuditEvent], int]:
    """The events of the complete lines in `data` and how many bytes they took: a last line not yet
    ended by a newline (the API server is still writing it) is left for the next read."""
    end = data.rfind(b"\n") + 1
    events = []
    for line in data[:end].splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a line torn by a crash: nothing to learn from it
        event = parse_event(doc) if isinstance(doc, dict) else None
        if event is not None:
            events.append(event)
    return events, end


def read_events(path: Path, since_offset: int = 0) -> tuple[list[AuditEvent], int]:
    """The events written to `path` after byte `since_offset`, and the offset to read from next.
    A file shorter than the offset is read from its start; a missing file reads as no events. To
    follow a log the API server rotates, use `follow`."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            start = since_offset if since_offset <= size else 0
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return [], since_offset
    events, used = parse_lines(data)
    return events, start + used


@dataclass(frozen=True)
class Cursor:
    """Where a reader of the log is: the file it was reading (its inode; 0 before the first read)
    and the byte after the last complete line it read there."""

    inode: int = 0
    offset: int = 0


def rotated(path: Path, inode: int) -> Path | None:
    """The backup the API server renamed `path` to (`<stem>-<time><suffix>` beside it, the same
    inode), or None when it is gone (pruned past --audit-log-maxbackup)."""
    for backup in path.parent.glob(f"{path.stem}-*{path.suffix}"):
        try:
            if backup.stat().st_ino == inode:
                return backup
        except FileNotFoundError:
            continue
    return None


def end_of(path: Path) -> Cursor:
    """A cursor at the log's end: follow from here on (a missing log: from its start, once made)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return Cursor()
    return Cursor(st.st_ino, st.st_size)


def follow(path: Path, cursor: Cursor = Cursor()) -> tuple[list[AuditEvent], Cursor]:
    """The events written since `cursor`, and the cursor to pass back next time.

    Why by inode: the API server rotates the log by renaming it and starting a new file, and the
    lines written to the old file between the last read and the rename would be lost by a reader
    that only sees the path start over. When the path's inode is no longer the cursor's, the rest
    of the renamed file is read first, then the new file from its start."""
    try:
        inode = path.stat().st_ino
    except FileNotFoundError:
        return [], cursor
    events: list[AuditEvent] = []
    offset = cursor.offset
    if cursor.inode and inode != cursor.inode:
        old = rotated(path, cursor.inode)
        if old is not None:
            events, _ = read_events(old, cursor.offset)
        offset = 0
    new, offset = read_events(path, offset)
    return events + new, Cursor(inode, offset)


@dataclass(frozen=True)
class Term:
    """A stretch of the log during which one replica held the Lease (`holder`; `""` nobody, after a
    release; `None` unknown: before the first Lease write the log shows). `end` None: still held."""

    holder: str | None
    start: datetime | None
    end: datetime | None


@dataclass(frozen=True)
class Overlap:
    """Writes by `writer` while `holder` held the Lease (for the stretch before the log's first Lease
    write: the first replica that wrote in it): `count` of them, from `start` to `end`."""

    holder: str | None
    writer: str
    start: datetime
    end: datetime
    count: int
    resources: tuple[str, ...]  # e.g. ("nodes", "pods/eviction"), sorted


def _is_lease(e: AuditEvent, lease_name: str) -> bool:
    return e.resource == "leases" and e.name == lease_name and not e.subresource


def terms(events: Iterable[AuditEvent], lease_name: str = OPERATOR_LEASE) -> list[Term]:
    """The Lease's terms, from its accepted writes (create, update, patch) in order of completion.

    A write that names a holder (or, not saying, comes from a replica) makes that holder's term
    begin when it completed, unless the same holder's term is already running (a renewal); one that
    sets none (a release) begins a term of nobody. Writes the API server refused (a stale
    resourceVersion: a paused ex-leader renewing) change nothing.
    """
    out: list[Term] = []
    current: str | None = None  # unknown until the log's first Lease write
    start: datetime | None = None
    writes = sorted(
        (e for e in events if _is_lease(e, lease_name) and e.is_write and e.accepted), key=lambda e: e.end
    )
    for e in writes:
        holder = "" if e.verb == "delete" else (e.holder if e.holder is not None else e.replica)
        if holder is None or holder == current:
            continue  # a renewal, or a write that says nothing of the holder (someone else's edit)
        out.append(Term(current, start, e.end))
        current, start = holder, e.end
    out.append(Term(current, start, None))
    return out


def writers_per_term(events: Sequence[AuditEvent], lease_name: str = OPERATOR_LEASE) -> list[Overlap]:
    """Every stretch in which an operator replica wrote while it did not hold the Lease.

    The rule, precisely:
    - writes: accepted (status < 400, or not said) create/update/patch/delete/deletecollection sent by an
      operator replica (user agent `sro-operator/<version> (<replica>)`), anything but the Lease itself;
      reads, refused writes and other clients' writes are not looked at;
    - each write is placed in the term running when the API server *received* it (`time`), and a
      term begins when the Lease write that began it *completed*: a write already on its way when the
      Lease changed hands counts in the earlier term, never against the new one;
    - in a term held by H, every write by a replica R != H is an overlap (also before H's own first
      write: R acted without the lease); in a term of nobody (released), every write is; in the
      stretch before the log's first Lease write (holder unknown), the first replica to write is
      taken as the holder and any other replica's write is an overlap;
    - all the overlapping writes of one replica within one term are one Overlap (its first and last
      write, how many, on what).
    Two replicas alternating the Lease, each writing only in its own terms, give none.
    """
    spans = terms(events, lease_name)
    writes = sorted(
        (
            e
            for e in events
            if e.is_write and e.accepted and e.replica is not None and not _is_lease(e, lease_name)
        ),
        key=lambda e: e.time,
    )
    overlaps: list[Overlap] = []
    open_: dict[tuple[int, str], list[AuditEvent]] = {}
    first_writer: dict[int, str] = {}
    i = 0
    for e in writes:
        while (end := spans[i].end) is not None and e.time >= end:
            i += 1
        writer = e.replica
        assert writer is not None
        holder = spans[i].holder
        if holder is None:
            holder = first_writer.setdefault(i, writer)
        if writer == holder:
            continue
        open_.setdefault((i, writer), []).append(e)
    for (i, writer), group in sorted(open_.items(), key=lambda kv: kv[1][0].time):
        overlaps.append(
            Overlap(
                holder=spans[i].holder if spans[i].holder is not None else first_writer.get(i),
                writer=writer,
                start=group[0].time,
                end=group[-1].time,
                count=len(group),
                resources=tuple(sorted({f"{g.resource}/{g.subresource}".rstrip("/") for g in group})),
            )
        )
    return overlaps
