"""Device backends behind one small interface (`model.Backend`): `nvml` for real NVIDIA GPUs and
`simulated` for the simulated driver's devices. `open_backend` picks one from a recipe."""

from __future__ import annotations

from pathlib import Path

from sro.api.recipes import Recipe
from sro.devices.model import Backend


def open_backend(recipe: Recipe, driver_root: Path | None = None, sys_root: Path = Path("/sys")) -> Backend:
    """The backend a recipe names; `driver_root` is where this process sees the driver's files."""
    if recipe.backend == "simulated":
        from sro.devices.simulated import SimulatedBackend

        return SimulatedBackend(driver_root or Path(recipe.driver_root))
    from sro.devices.nvml import NvmlBackend

    return NvmlBackend(sys_root=sys_root, driver_root=driver_root)
