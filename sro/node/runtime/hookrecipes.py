"""The built-in recipes as plain records, for the OCI hook and the runc wrapper.

Why: `sro.api.recipes` builds `Recipe` with `dataclasses` and `typing`, and importing it costs the
hook ~12 ms of its 30 ms budget on every container start. This module builds lean frozen records
(see `records`) with the very same field names from the very same data (`sro.api.builtin_recipes`),
so the hook's activation and driver-file code reads them exactly as it reads a `Recipe`.
`tests/unit/test_runtime_records.py` checks every field of every built-in against
`sro.api.recipes.BUILTIN`.
"""

from __future__ import annotations

from sro.api import builtin_recipes as _builtin

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from dataclasses import dataclass, field
    from typing import TypeAlias

    from sro.api.recipes import Recipe

    AnyRecipe: TypeAlias = "Recipe | HookRecipe"
else:
    from sro.node.runtime.records import dataclass, field

SIMULATED_DRIVER_ROOT = _builtin.SIMULATED_DRIVER_ROOT
SIMULATED_DEVICE_LIST = _builtin.SIMULATED_DEVICE_LIST


@dataclass(frozen=True)
class HookRecipe:
    """The fields of `sro.api.recipes.Recipe`, same names, same meaning."""

    name: str
    resource: str
    backend: str
    pci_vendor: str
    pci_classes: tuple[str, ...]
    visible_devices_env: str
    capabilities_env: str
    default_capabilities: tuple[str, ...]
    cdi_kind: str
    driver_root: str
    device_node: str
    control_nodes: tuple[str, ...]
    libraries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    binaries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    simulated: bool = False
    directories: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    firmware: tuple[str, ...] = ()
    companion_nodes: tuple[str, ...] = ()
    pci_devices: tuple[str, ...] = ()
    validation_commands: tuple[tuple[str, ...], ...] = ()
    metrics: str = "telemetry"
    pools: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


NVIDIA_GPU = HookRecipe(**_builtin.NVIDIA_GPU)
SIMULATED_GPU = HookRecipe(**_builtin.SIMULATED_GPU)

BUILTIN: dict[str, HookRecipe] = {r.name: r for r in (NVIDIA_GPU, SIMULATED_GPU)}
