"""An edited recipe (or custom manifests) ConfigMap wakes the SpecialResources that name it at once.

Why: a SpecialResource refused for a bad recipe is looked at again only every minute; the fix of its
ConfigMap must not wait for that. The operator learns, on each pass, which ConfigMaps a spec names,
and kopf's ConfigMap events (our namespace only) poke exactly those passes.
"""

from __future__ import annotations

import asyncio

from sro.operator.handlers import Operator, build_registry
from sro.operator.observed import SpecialResourceInfo
from tests.unit.operator.fakes import FakeIO


def test_a_configmap_event_wakes_only_the_special_resources_naming_it() -> None:
    spec = {"recipe": "example-fpga", "recipeConfigMap": "fpga-recipe", "customManifests": "fpga-extra"}
    io = FakeIO(SpecialResourceInfo(name="fpga", uid="u", spec=spec))
    op = Operator(io)  # type: ignore[arg-type]

    async def run() -> tuple[bool, bool, bool, bool]:
        mine, other = op.event_for("fpga"), op.event_for("gpus")
        await op.run_pass("fpga")  # refused (no ConfigMap observed): still, what it names is known
        op.config_map_changed("unrelated")
        quiet = not mine.is_set() and not other.is_set()
        op.config_map_changed("fpga-recipe")
        woke = mine.is_set() and not other.is_set()
        mine.clear()
        op.config_map_changed("fpga-extra")
        return quiet, woke, mine.is_set(), io.plans[-1].deployable

    quiet, woke, manifests_woke, deployable = asyncio.run(run())
    assert quiet and woke and manifests_woke and not deployable
    assert op.config_maps == {"fpga": frozenset({"fpga-recipe", "fpga-extra"})}


def test_the_registry_watches_configmaps() -> None:
    op = Operator(FakeIO(SpecialResourceInfo(name="x", uid="u", spec={"recipe": "simulated-gpu"})))  # type: ignore[arg-type]
    registry = build_registry(op)
    selectors = [h.selector for h in registry._watching.get_all_handlers() if h.selector is not None]
    assert any(s.plural == "configmaps" or s.any_name == "configmaps" for s in selectors), selectors
