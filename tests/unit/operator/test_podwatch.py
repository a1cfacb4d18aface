"""A pod event wakes its SpecialResource's pass at once only when the walk acts on it (ready, finished,
deleted); a status-only change (created, Running but not ready, a waiting reason) wakes it later."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from sro.api.names import SPECIALRESOURCE_LABEL, STATE_LABEL
from sro.operator import podwatch
from sro.operator.handlers import Operator
from sro.operator.observed import SpecialResourceInfo
from sro.operator.podwatch import PodWatch
from tests.unit.operator.fakes import FakeIO


def pod(
    sr: str = "gpus", name: str = "plugin-x", phase: str = "Pending", ready: bool = False
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "sro-system",
            "uid": f"uid-{name}",
            "labels": {SPECIALRESOURCE_LABEL: sr, STATE_LABEL: "device-plugin"},
        },
        "spec": {"nodeName": "a"},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "c", "ready": ready, "restartCount": 0, "state": {"running": {}}}],
        },
    }


def test_only_what_the_walk_acts_on_is_urgent() -> None:
    watch = PodWatch()
    created = pod()
    assert not watch.urgent("ADDED", created)
    running = pod(phase="Running")
    assert not watch.urgent("MODIFIED", running)
    ready = pod(phase="Running", ready=True)
    assert watch.urgent("MODIFIED", ready)
    restarted = copy.deepcopy(ready)
    restarted["status"]["containerStatuses"][0]["restartCount"] = 1
    assert not watch.urgent("MODIFIED", restarted)  # still ready: the status shows it, no step follows
    assert watch.urgent("MODIFIED", pod(phase="Running"))  # not ready any more: the walk stops there
    deleting = pod(phase="Running")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    assert watch.urgent("MODIFIED", deleting)
    assert watch.urgent("DELETED", deleting)


def test_a_validation_pod_that_finishes_is_urgent_and_a_pod_seen_first_when_ready_too() -> None:
    watch = PodWatch()
    assert not watch.urgent("ADDED", pod(name="validation", phase="Running"))
    assert watch.urgent("MODIFIED", pod(name="validation", phase="Succeeded"))
    assert watch.urgent("MODIFIED", pod(name="other", phase="Failed"))
    assert watch.urgent("MODIFIED", pod(name="known-after-a-restart", phase="Running", ready=True))


def test_the_operator_wakes_now_for_an_urgent_event_and_later_for_the_others() -> None:
    op = Operator(FakeIO(SpecialResourceInfo(name="gpus", uid="u", spec={"recipe": "simulated-gpu"})))  # type: ignore[arg-type]

    async def run() -> list[bool]:
        mine, other = op.event_for("gpus"), op.event_for("fpga")
        seen = []
        op.pod_event("ADDED", pod())
        op.pod_event("MODIFIED", pod(phase="Running"))  # one later wake-up for both
        seen.append(mine.is_set())  # not at once
        await asyncio.sleep(podwatch.LATER + 0.2)
        seen.append(mine.is_set() and not other.is_set())  # then
        mine.clear()
        op.pod_event("MODIFIED", pod(name="exporter", phase="Running"))
        op.pod_event("MODIFIED", pod(phase="Running", ready=True))
        seen.append(mine.is_set())  # the ready pod: at once
        mine.clear()
        await asyncio.sleep(podwatch.LATER + 0.2)
        seen.append(not mine.is_set())  # the earlier event's wake-up went with the urgent pass
        op.pod_event("RESYNC", None)
        seen.append(mine.is_set() and other.is_set())  # a fresh list: everyone
        return seen

    assert asyncio.run(run()) == [False, True, True, True, True]
