"""What the exporter publishes for a recipe (pure): telemetry or health only, and the series' resource.

Why a view of its own: the built-in recipes keep dcgm-exporter's exact label set (dashboards and
alerts query it), while a custom recipe's hardware (an FPGA, a SmartNIC's VFs) often has no readings
sro can take: with `metrics: health` the exporter publishes only what it knows for any device (is it
healthy, who holds it, how many the node announces and has given out) under the same metric names,
and no `DCGM_*` readings. Every device series of a custom recipe says which extended resource the
device is announced under (`resource="example.com/fpga"`, or its pool's resource), so a query can
tell two recipes' devices on one node apart; a simulated recipe's series also say `simulated="true"`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sro.api.recipes import BUILTIN, Recipe
from sro.devices.model import Device, DeviceUUID, Inventory
from sro.devices.telemetry import Readings


@dataclass(frozen=True)
class NoReadings:
    """The telemetry of a recipe published as health only: nothing is read from the devices."""

    def read(self, inv: Inventory, holders: Mapping[DeviceUUID, int]) -> Readings:
        return Readings()


@dataclass(frozen=True)
class RecipeView:
    """How a collection is rendered for one recipe; the default is the built-ins' (telemetry, no
    `resource` label on device series)."""

    telemetry: bool = True  # DCGM readings; False: health and allocation only
    resource: str = ""  # the device series' `resource` label ("" leaves it out)
    pools: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # resource -> selector

    def resource_of(self, device: Device) -> str:
        """The resource the device is announced under: the first pool (by name) whose selector its
        attributes match, else the recipe's own (as the device plugin announces it)."""
        for pool, selector in sorted(self.pools.items()):
            if all(device.attributes.get(k) == v for k, v in selector.items()):
                return pool
        return self.resource


def is_builtin(recipe: Recipe) -> bool:
    """By name: a built-in recipe on sro's simulated driver has another driver root, and no custom
    recipe may take a built-in's name."""
    return recipe.name in BUILTIN


def view_of(recipe: Recipe) -> RecipeView:
    """The view of a recipe: a built-in one keeps today's exposition exactly."""
    if is_builtin(recipe):
        return RecipeView()
    return RecipeView(
        telemetry=recipe.metrics == "telemetry", resource=recipe.resource, pools=dict(recipe.pools)
    )
