"""`sro validate driver|workload` for a custom recipe: the GPU checks that read any recipe, and the
recipe's own (`recipechecks`) in place of the listing tool, NVML and CUDA, which only the built-in
GPU recipes have.

Why a module of its own: the driver and workload checks stay as the built-ins need them (golden
reports, the operator's messages); a custom recipe reuses their inventory, device node, control
node, device cgroup and library checks, and adds companion nodes, driver files and its commands.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from sro.api.recipes import Recipe
from sro.host.root import HostRoot
from sro.node.validation import driver, recipechecks, workload
from sro.node.validation.report import Report, Result


def _header(recipe: Recipe) -> str:
    return f"recipe {recipe.name}" + (", SIMULATED devices" if recipe.simulated else "")


def _driver_hint(recipe: Recipe, driver_root: Path) -> str:
    if recipe.simulated:
        return (
            "check that the simulated driver is installed on the node (the driver state, or `sro driver "
            f"simulate --recipe-file`) and that its driver root is the one this check reads ({driver_root})"
        )
    return f"check that the driver is installed and its user-space files are under the driver root ({driver_root})"


def driver_results(
    recipe: Recipe, driver_root: Path, host: HostRoot, facts: driver.DriverFacts
) -> tuple[Result, ...]:
    rc = recipechecks
    return (
        driver.check_inventory(facts),
        driver.check_nodes(facts),
        rc.check_driver_companions(
            recipe, facts.inventory, rc.observe_companions(host, facts.inventory), str(host.dev)
        ),
        rc.check_files(recipe, rc.observe_files(recipe, driver_root), str(driver_root)),
        rc.check_commands(
            recipe,
            rc.observe_driver_commands(recipe, driver_root, os.environ),
            _driver_hint(recipe, driver_root),
        ),
    )


def validate_driver(
    recipe: Recipe, driver_root: Path, host: HostRoot, opener: driver.BackendOpener | None = None
) -> Report:
    facts = (
        driver.observe(recipe, driver_root, host, opener)
        if opener
        else driver.observe(recipe, driver_root, host)
    )
    header = f"{_header(recipe)}, driver root {driver_root}, dev root {host.dev}"
    return Report("driver", header, driver_results(recipe, driver_root, host, facts))


def validate_workload(
    recipe: Recipe, env: Mapping[str, str], host: HostRoot, loader: workload.Loader = workload.load_by_soname
) -> Report:
    facts = workload.observe(recipe, env, host, "none", loader)
    usable = [r.node.path for r in facts.nodes if r.errno in workload.USABLE]
    rc = recipechecks
    results = (
        workload.check_visible(facts),
        workload.check_nodes(facts),
        rc.check_workload_companions(
            recipe, usable, rc.observe_workload_companions(recipe, host), workload.HOOK_HINT
        ),
        workload.check_cgroup(facts),
        workload.check_libraries(facts),
        rc.check_commands(recipe, rc.observe_workload_commands(recipe, env), workload.HOOK_HINT),
    )
    header = f"{_header(recipe)}, {recipe.visible_devices_env}={facts.visible or ''}"
    return Report("workload", header, results)
