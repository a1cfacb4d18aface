"""`sro driver simulate --recipe-file R --config C`: the simulated driver for a custom simulated
recipe's device class (an FPGA, a SmartNIC's VFs) instead of the simulated GPU.

Why apart from `commands`: the recipe file and the class config are one more pair of inputs with
their own one-line errors; the GPU path (`commands.simulate_driver`) calls in here when it is given
--recipe-file and keeps holding and removal, which work alike for every simulated driver.
"""

from __future__ import annotations

from pathlib import Path

import click

from sro.api.recipes import SIMULATED_GPU, Recipe, RecipeError, recipe_from_file
from sro.api.yamltext import load_yaml_file
from sro.devices import driverstate, simclass, simconfig, simulated_driver


def class_recipe(recipe_file: Path | None, personality: str | None) -> Recipe | None:
    """The custom simulated recipe --recipe-file names (None without one, or for simulated-gpu's
    own recipe, which the GPU path serves); one line on a bad file."""
    if recipe_file is None:
        return None
    if personality is not None:
        raise click.UsageError("--personality is for the simulated GPU; it does not go with --recipe-file")
    try:
        recipe = recipe_from_file(recipe_file)  # its errors name the file
    except RecipeError as e:
        raise click.ClickException(str(e)) from e
    if recipe.name == SIMULATED_GPU.name:
        return None
    try:
        simclass.check_recipe(recipe)
    except simconfig.SimConfigError as e:
        raise click.ClickException(f"--recipe-file {recipe_file}: {e}") from e
    return recipe


def install(
    recipe: Recipe,
    config_path: Path | None,
    driver_root: Path | None,
    dev_root: Path,
    proc_devices: Path,
    major: int | None,
    driver_version: str | None,
) -> simulated_driver.Installed:
    """Install a custom simulated recipe's device class (`simclass`) and say what it made."""
    if config_path is None:
        raise click.UsageError("--config FILE is required (or --remove)")
    doc = load_yaml_file(config_path, lambda doc: doc, click.ClickException)
    try:
        sim = simclass.parse(doc, recipe)
    except simconfig.SimConfigError as e:
        raise click.ClickException(f"{config_path}: {e}") from e
    if driver_version is not None:
        sim = simclass.with_version(sim, driver_version)
    root = driver_root or Path(recipe.driver_root)
    try:
        known = proc_devices.read_text()
    except OSError as e:
        raise click.ClickException(f"--proc-devices {proc_devices}: cannot read: {e.strerror}") from e
    try:
        done = simulated_driver.install(sim.inventory, root, dev_root, known, recipe, major=major, sim=sim)
    except simulated_driver.SimulatedDriverError as e:
        raise click.ClickException(str(e)) from e
    except (OSError, driverstate.DriverStateError) as e:
        where = f"{e.filename}: " if isinstance(e, OSError) and e.filename else ""
        detail = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise click.ClickException(f"cannot install the simulated driver: {where}{detail}") from e
    inv = done.inventory
    click.echo(
        f"simulated {sim.device_class} driver {inv.driver_version} ({recipe.name}): "
        f"{len(inv.devices)} SIMULATED devices, char major {done.major}"
    )
    for d in inv.devices:
        nodes = " ".join((d.device_node, *d.companion_nodes))
        attrs = ",".join(f"{k}={v}" for k, v in sorted(d.attributes.items()))
        click.echo(f"  {d.index}: {d.uuid} {nodes} {d.product}" + (f" [{attrs}]" if attrs else ""))
    click.echo(f"driver files in {root}")
    return done
