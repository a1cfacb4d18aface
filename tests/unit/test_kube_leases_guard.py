"""A plan's writes are sent only while the replica holds the leader lease (`SpecialResourceIO.held`,
which `sro operator` sets to `LeaderElection.held`): checked before each batch, so a replica past
its renew deadline sends nothing more, not even the status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sro.operator.cluster.specialresources import NOT_LEADING, SpecialResourceIO
from sro.operator.observed import SpecialResourceInfo
from sro.operator.plan import NodePatch, Plan


class FakeObjects:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def apply(self, obj: Mapping[str, Any]) -> None:
        self.sent.append(f"apply {obj['kind']}/{obj['metadata']['name']}")

    async def create(self, obj: Mapping[str, Any]) -> None:
        self.sent.append(f"create {obj['kind']}/{obj['metadata']['name']}")

    async def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        self.sent.append(f"delete {kind}/{name}")

    async def merge_patch(self, kind: str, name: str, body: Mapping[str, Any], status: bool = False) -> None:
        self.sent.append(f"patch {kind}/{name}")


class FakeCache:
    def __init__(self, objects: FakeObjects) -> None:
        self.objects = objects

    async def patch_node(self, name: str, body: Mapping[str, Any]) -> bool:
        self.objects.sent.append(f"patch Node/{name}")
        return True


def _io(held: list[bool]) -> tuple[SpecialResourceIO, FakeObjects]:
    objects = FakeObjects()
    io = SpecialResourceIO(object(), FakeCache(objects), "sro-system", "img")  # type: ignore[arg-type]
    io.objects = objects  # type: ignore[assignment]
    answers = iter(held)
    io.held = lambda: next(answers, False)
    return io, objects


PLAN = Plan(
    status={"ready": "True"},
    apply=({"kind": "DaemonSet", "metadata": {"name": "ds"}},),
    delete_pods=("old",),
    create_pods=({"kind": "Pod", "metadata": {"name": "new"}},),
    node_patches={"n1": NodePatch(labels={"sro.dev/x": "ready"})},
)
SR = SpecialResourceInfo("gpus", "uid-1", {})


async def test_nothing_is_written_when_the_lease_is_not_held() -> None:
    io, objects = _io([False])
    assert await io.carry_out(SR, PLAN, ()) == [NOT_LEADING]
    assert objects.sent == []


async def test_writes_stop_at_the_first_batch_after_the_lease_lapsed() -> None:
    io, objects = _io([True, True])  # the applies and the pod deletions; then the lease lapsed
    assert await io.carry_out(SR, PLAN, ()) == [NOT_LEADING]
    assert objects.sent == ["apply DaemonSet/ds", "delete Pod/old"]


async def test_everything_is_written_while_held() -> None:
    io, objects = _io([True] * 10)
    assert await io.carry_out(SR, PLAN, ()) == []
    assert objects.sent == [
        "apply DaemonSet/ds",
        "delete Pod/old",
        "create Pod/new",
        "patch Node/n1",
        "patch SpecialResource/gpus",
    ]
