"""The built-in recipes as plain records, for the OCI hook and the runc wrapper.

Why: `sro.api.recipes` builds `Recipe` with `dataclasses` and `typing`, and importing it costs the
hook ~12 ms of its 30 ms budget on every container start. This module builds lean frozen records
(see `records`) with the very same field names from the very same data (`sro.api.builtin_recipes`),
so the hook's activation and driver-file code reads them exactly as it reads a `Recipe`.
`tests/unit/test_runtime_records.py` checks every field of every built-in against
`sro.api.recipes.BUILTIN`.
"""

from __future__ import annotations

import posix  # not `os` (~1.5 ms of a hook start); fstat is all this module needs
from stat import S_ISREG

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
MAX_RECIPE_BYTES = 1 << 20  # an installed recipe is a few KiB


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


def from_doc(doc: object) -> HookRecipe:
    """A recipe record from a recipe document, every rule of `sro.api.recipecheck` checked (the same
    function `sro.api.recipes.recipe_from_dict` checks with, so both refuse the same documents);
    ValueError("<field>: <what is wrong>")."""
    from sro.api import recipecheck

    try:
        return HookRecipe(**recipecheck.recipe_fields(doc))  # type: ignore[arg-type]
    except recipecheck.Refused as e:
        raise ValueError(str(e)) from None


def load_file(path: str) -> HookRecipe:
    """The recipe `sro runtime install` installed at `path` (its canonical JSON): read and checked
    again on every container start, since the hook must never mount what a changed file names
    without the rules holding; ValueError("<path>: <field>: <what is wrong>"), one line."""
    from sro.node.runtime.leanjson import loads

    try:
        with open(path, "rb") as f:
            # the size first: read(n) would allocate all n bytes up front, on every container start
            st = posix.fstat(f.fileno())
            if not S_ISREG(st.st_mode) or st.st_size > MAX_RECIPE_BYTES:
                raise ValueError(f"{path}: not a regular file of at most {MAX_RECIPE_BYTES} bytes")
            raw = f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot read the recipe: {e.strerror or e}") from None
    try:
        doc = loads(raw)
    except ValueError as e:  # json's own message (UnicodeDecodeError is a ValueError too)
        raise ValueError(f"{path}: not JSON: {e}") from None
    try:
        return from_doc(doc)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
