"""A failing pod's log tail is read once per failure, not on every pass: a pass waits for its slowest
read, and at one failing node of a thousand that read was in every pass's time."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from sro.operator.cluster.specialresources import SpecialResourceIO
from sro.operator.observed import PodInfo


class Pods:
    """The cache's pods of one SpecialResource, and the log reads the pass makes."""

    def __init__(self, pods: list[PodInfo]) -> None:
        self.pods = pods
        self.reads: list[str] = []
        self.answer = "Error: no driver\n"

    def pods_of(self, sr: str) -> list[PodInfo]:
        return self.pods

    async def log_tail(self, pod: str, namespace: str, lines: int) -> str:
        self.reads.append(pod)
        return self.answer


def _io(cache: Pods) -> SpecialResourceIO:
    io = SpecialResourceIO(object(), cache, "sro-system", "img")  # type: ignore[arg-type]
    io.objects = cache  # type: ignore[assignment]
    return io


def _logs(io: SpecialResourceIO) -> dict[str, str]:
    return {p.name: p.log for p in asyncio.run(io._pods("gpus"))}


def test_a_failing_pods_log_is_read_once_per_failure() -> None:
    crashing = PodInfo(
        "drv", "n1", "driver", uid="u1", phase="Running", reason="CrashLoopBackOff", restarts=3
    )
    failed = PodInfo("val", "n2", "driver-validation", uid="u2", phase="Failed")
    fine = PodInfo("ok", "n3", "driver", uid="u3", phase="Running", ready=True)
    cache = Pods([crashing, failed, fine])
    io = _io(cache)
    for _ in range(3):
        assert _logs(io) == {"drv": "Error: no driver\n", "val": "Error: no driver\n", "ok": ""}
    assert sorted(cache.reads) == ["drv", "val"]  # three passes, one read each
    cache.answer = "Error: still no driver\n"
    cache.pods = [replace(crashing, restarts=4), failed, fine]  # it restarted: a new failure
    assert _logs(io)["drv"] == "Error: still no driver\n"
    assert sorted(cache.reads) == ["drv", "drv", "val"]


def test_an_empty_tail_is_read_again_and_a_recovered_pod_is_forgotten() -> None:
    failed = PodInfo("val", "n2", "driver-validation", uid="u2", phase="Failed")
    cache = Pods([failed])
    cache.answer = ""  # not readable now (the node's kubelet away, the API server busy)
    io = _io(cache)
    _logs(io)
    cache.answer = "verdict: failed\n"
    assert _logs(io) == {"val": "verdict: failed\n"}
    cache.pods = [replace(failed, uid="u9", phase="Succeeded")]  # made again, and passed
    assert _logs(io) == {"val": ""}
    known: Any = io._tails["gpus"]
    assert known == {}
