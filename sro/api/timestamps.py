"""RFC 3339 timestamps as Kubernetes writes them in objects (`2026-11-22T12:00:00Z`).

Why here: the status conditions, the reached and upgrade annotations on nodes and the metrics that
read them back must write and read one format, to the second, in UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime


def now_utc() -> datetime:
    return datetime.now(UTC)


def stamp(t: datetime) -> str:
    """`t` in UTC to the second, as `...Z`."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(value: str | None) -> datetime | None:
    """The time `value` names; None when it is empty or not a timestamp."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
