"""What a pass reads for conflicts: the other SpecialResources' custom recipes (by ConfigMap name,
only names a ConfigMap can have), so the reconcile compares extended resources, not recipe names."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import yaml

from sro.operator.cluster.specialresources import SpecialResourceIO
from sro.operator.observed import SpecialResourceInfo
from sro.operator.reconcile import reconcile
from tests.unit.operator.test_conflicts import CUSTOM_GPU, MY_GPU_PRESENT, PCI_NVIDIA
from tests.unit.operator.test_reconcile import NOW, NS, node

OTHER = {"recipe": "my-gpu", "recipeConfigMap": "my-gpu-recipe", "driver": {"mode": "host"}}
HOSTILE = {"recipe": "x", "recipeConfigMap": "../../kube-system/configmaps/coredns"}


def doc(name: str, spec: Mapping[str, Any], created: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name, "creationTimestamp": created}, "spec": dict(spec)}


class FakeObjects:
    def __init__(self) -> None:
        self.got: list[str] = []

    async def exists(self, kind: str, name: str) -> bool:
        return False

    async def list(self, kind: str, **kw: Any) -> list[dict[str, Any]]:
        if kind == "SpecialResource":
            return [
                doc("older", OTHER, "2026-11-22T09:00:00Z"),
                doc("hostile", HOSTILE, "2026-11-22T09:30:00Z"),
                doc("mine", {"recipe": "nvidia-gpu"}, "2026-11-22T10:00:00Z"),
            ]
        return []

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        self.got.append(f"{kind}/{name}")
        if kind == "ConfigMap" and name == "my-gpu-recipe":
            return {"data": {"recipe.yaml": yaml.safe_dump(CUSTOM_GPU)}}
        return None


class FakeCache:
    def __init__(self) -> None:
        self.gpu = node("g", opt_in=False, **{PCI_NVIDIA: "true", MY_GPU_PRESENT: "true"})

    async def synced(self) -> None:
        return None

    def node_infos(self) -> tuple[Any, ...]:
        return (self.gpu,)

    def pods_of(self, sr: str) -> list[Any]:
        return []


def test_a_pass_reads_the_others_custom_recipes_and_sees_the_conflict() -> None:
    io = SpecialResourceIO.__new__(SpecialResourceIO)
    objects = FakeObjects()
    io.objects, io.cache, io.namespace, io.image = objects, FakeCache(), NS, "img"  # type: ignore[assignment]
    io.refused_patches, io._tails = {}, {}
    mine = SpecialResourceInfo(
        "mine", "mine", {"recipe": "nvidia-gpu", "driver": {"mode": "host"}}, created="2026-11-22T10:00:00Z"
    )
    obs = asyncio.run(io.observe(mine))
    assert obs.other_recipes == {"my-gpu-recipe": CUSTOM_GPU}
    assert "ConfigMap/../../kube-system/configmaps/coredns" not in objects.got
    plan = reconcile(obs, NS, NOW)
    degraded = next(c for c in plan.status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ResourceConflict" and "'older'" in degraded["message"], degraded
