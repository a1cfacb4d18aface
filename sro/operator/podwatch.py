"""Which pod events of a SpecialResource's pods a pass must act on at once, and which can wait.

Why: a state's pod reports twice as it starts — Running (not ready yet), then Ready a moment later —
and only the second lets the walk go on. Woken by the first, a pass was still running (or its gap
was: `WakeLoop.gap`) when the second came, and the node's label waited for it: 0.1-0.3 s per state
on the operator bench. So an event that changes what the walk acts on — the pod turned ready or
not, finished (Succeeded, Failed), is being deleted or is gone — wakes the pass at once; any other
(created, Running but not ready, a new waiting reason or restart count: what the status shows) wakes
one `LATER` seconds on, unless an urgent one came first (its pass reads the cache, so it shows
those too). Pure, so it is unit-tested on recorded events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sro.operator.observed import PodInfo, pod_from_json

LATER = 0.5  # seconds: a status-only change is shown within this, or with the next urgent pass
FINISHED = ("Succeeded", "Failed")
Acted = tuple[bool, str, bool]


def acted_on(pod: PodInfo) -> Acted:
    """What of a pod the walk acts on: ready, a finished phase, being deleted."""
    return (pod.ready, pod.phase if pod.phase in FINISHED else "", pod.deleting)


class PodWatch:
    """The acted-on view of every pod seen; `urgent` says whether an event must wake a pass now."""

    def __init__(self) -> None:
        self._seen: dict[str, Acted] = {}

    def urgent(self, kind: str, body: Mapping[str, Any]) -> bool:
        md = body.get("metadata") or {}
        key = f"{md.get('namespace', '')}/{md.get('name', '')}"
        if kind == "DELETED":
            self._seen.pop(key, None)
            return True
        view = acted_on(pod_from_json(body))
        before = self._seen.get(key)
        self._seen[key] = view
        if before is None:  # new to this watch: urgent only when there is already something to act on
            return view != (False, "", False)
        return view != before
