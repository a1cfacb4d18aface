"""A plan's objects are applied at once within a tier, tier after tier: namespaces, then what pods
read (accounts, ConfigMaps, Services), then what starts pods. Why: one after another, a first pass's
objects held up the node patch that lets the driver start (issue 26); no pod may start before the
account and ConfigMaps it mounts exist."""

from __future__ import annotations

import asyncio
from typing import Any

from sro.operator.cluster.specialresources import SpecialResourceIO
from sro.operator.observed import SpecialResourceInfo
from sro.operator.plan import Plan


class SlowObjects:
    """Each apply takes 50 ms; records when each started and ended."""

    def __init__(self, fail: str = "") -> None:
        self.fail = fail
        self.spans: dict[str, tuple[float, float]] = {}

    async def apply(self, obj: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(0.05)
        if obj["metadata"]["name"] == self.fail:
            raise OSError("refused")  # one of sro.kube.errors.Errors
        self.spans[f"{obj['kind']}/{obj['metadata']['name']}"] = (start, loop.time())


def _obj(kind: str, name: str) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name}}


PLAN_OBJECTS = [
    _obj("ServiceAccount", "sa"),
    _obj("ConfigMap", "cm"),
    _obj("DaemonSet", "ds1"),
    _obj("Namespace", "ns"),
    _obj("DaemonSet", "ds2"),
    _obj("Service", "svc"),
]


def _carry_out(objects: SlowObjects) -> tuple[list[str], float]:
    io = SpecialResourceIO.__new__(SpecialResourceIO)
    io.objects, io._applied, io.held = objects, {}, lambda: True  # type: ignore[assignment]
    plan = Plan(apply=tuple(PLAN_OBJECTS), status={})
    sr = SpecialResourceInfo("gpus", "u", {}, status={})

    async def go() -> tuple[list[str], float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        problems = await io.carry_out(sr, plan, ())
        return problems, loop.time() - t0

    return asyncio.run(go())


def test_each_tier_at_once_and_pods_last() -> None:
    objects = SlowObjects()
    problems, took = _carry_out(objects)
    assert problems == []
    spans = objects.spans
    assert set(spans) == {f"{o['kind']}/{o['metadata']['name']}" for o in PLAN_OBJECTS}
    assert took < 0.25, "three tiers of 50 ms, not six applies one after another"
    ns_end = spans["Namespace/ns"][1]
    readers = [spans[k] for k in ("ServiceAccount/sa", "ConfigMap/cm", "Service/svc")]
    pods = [spans[k] for k in ("DaemonSet/ds1", "DaemonSet/ds2")]
    assert all(start >= ns_end for start, _ in readers + pods)
    assert all(start >= max(end for _, end in readers) for start, _ in pods)


def test_a_refused_object_is_a_problem_and_the_rest_go_on() -> None:
    objects = SlowObjects(fail="cm")
    problems, _ = _carry_out(objects)
    assert problems == ["ConfigMap/cm not applied"]
    assert "DaemonSet/ds1" in objects.spans and "Service/svc" in objects.spans
