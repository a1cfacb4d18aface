"""Device backends behind one small interface (`model.Backend`): `nvml` for real NVIDIA GPUs,
`simulated` for the simulated driver's devices and `devnodes` for other real hardware (its char
nodes in /dev). `open_backend` picks one from a recipe."""

from __future__ import annotations

from pathlib import Path

from sro.api.recipes import Recipe
from sro.devices.model import Backend


def open_backend(
    recipe: Recipe,
    driver_root: Path | None = None,
    sys_root: Path = Path("/sys"),
    dev_root: Path = Path("/dev"),
) -> Backend:
    """The backend a recipe names; `driver_root` is where this process sees the driver's files,
    `dev_root` where it sees the host's /dev (devnodes)."""
    if recipe.backend == "devnodes":
        from sro.devices.devnodes import DevnodesBackend

        return DevnodesBackend(recipe, dev_root=dev_root, sys_root=sys_root)
    if recipe.backend == "simulated":
        from sro.devices.simulated import SimulatedBackend

        return SimulatedBackend(driver_root or Path(recipe.driver_root))
    from sro.devices.nvml import NvmlBackend

    return NvmlBackend(sys_root=sys_root, driver_root=driver_root)
