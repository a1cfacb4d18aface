"""`sro validate driver|workload`: the checks of the operator's validation pods, runnable anywhere.

Thin: options in, `driver.validate` / `workload.validate` called, the report printed. Exit 0 when
every check passed, 1 otherwise with the reason as the first line of stderr; `--termination-log`
also writes the verdict where Kubernetes reads a container's termination message.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from sro.console.options import load_recipe, recipe_options
from sro.host.root import HostRoot
from sro.node.validation.report import Report

_dev_root_option = click.option(
    "--dev-root",
    type=click.Path(path_type=Path, exists=True, file_okay=False, readable=False),
    default=Path("/dev"),
    show_default=True,
    help="Where the device nodes are (the node's /dev, or where a pod mounts it).",
)
_termination_log_option = click.option(
    "--termination-log",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the verdict here (a pod's /dev/termination-log), with the skipped checks.",
)
_simulated_driver_option = click.option(
    "--simulated-driver",
    is_flag=True,
    help="sro's simulated driver stands in for the recipe's (spec.driver.mode: simulated): no CUDA. "
    "Also found by itself, from the simulated NVML's state file.",
)


def _finish(report: Report, termination_log: Path | None) -> None:
    for line in report.stdout_lines():
        click.echo(line)
    sys.stdout.flush()
    for line in report.stderr_lines():
        click.echo(line, err=True)
    if termination_log is not None:
        try:
            termination_log.write_text(report.termination_message()[:4000] + "\n")
        except OSError as e:
            click.echo(f"cannot write the termination log {termination_log}: {e}", err=True)
    sys.exit(report.exit_code)


@click.group("validate")
def validate() -> None:
    """Prove a state on this node: the driver works, a workload gets exactly its device."""


@validate.command("driver")
@recipe_options(default="nvidia-gpu")
@click.option(
    "--driver-root",
    type=click.Path(path_type=Path, file_okay=False, readable=False),
    help="Where the driver's files are seen from here (default: the recipe's driver root).",
)
@_dev_root_option
@_simulated_driver_option
@_termination_log_option
def driver_command(
    recipe_name: str,
    recipe_file: Path | None,
    driver_root: Path | None,
    dev_root: Path,
    simulated_driver: bool,
    termination_log: Path | None,
) -> None:
    """The backend's inventory and the recipe's tool list the same devices; their nodes exist."""
    from sro.node.validation import driver, tools

    recipe = load_recipe(recipe_name, recipe_file)
    root = driver_root if driver_root is not None else Path(recipe.driver_root)
    simulated = not recipe.simulated and (simulated_driver or tools.simulated_nvidia(root))
    if simulated:  # the simulated NVML this process loads lists the GPUs whose nodes are in --dev-root
        os.environ[tools.SIMNVML_DEV_ROOT_ENV] = str(dev_root)
    host = HostRoot.at("/").with_tree(dev=dev_root)
    if tools.builtin(recipe):
        report = driver.validate(recipe, root, host, simulated_driver=simulated)
    else:
        from sro.node.validation import recipevalidation

        report = recipevalidation.validate_driver(recipe, root, host)
    _finish(report, termination_log)


@validate.command("workload")
@recipe_options(default="nvidia-gpu")
@click.option(
    "--cuda-sample",
    metavar="CMD",
    help="nvidia-gpu: a CUDA program to run (default: vectorAdd when on PATH; `none` to skip).",
)
@_dev_root_option
@_simulated_driver_option
@_termination_log_option
def workload_command(
    recipe_name: str,
    recipe_file: Path | None,
    cuda_sample: str | None,
    dev_root: Path,
    simulated_driver: bool,
    termination_log: Path | None,
) -> None:
    """Inside a container granted one device: exactly that device, its libraries and tool work."""
    from sro.node.validation import tools, workload

    recipe = load_recipe(recipe_name, recipe_file)
    # the hook mounts the simulated NVML's state directory into the container (a utility directory)
    simulated = not recipe.simulated and (simulated_driver or tools.simulated_nvidia(Path("/")))
    host = HostRoot.at("/").with_tree(dev=dev_root)
    if tools.builtin(recipe):
        report = workload.validate(recipe, os.environ, host, cuda_sample, simulated_driver=simulated)
    else:
        from sro.node.validation import recipevalidation

        report = recipevalidation.validate_workload(recipe, os.environ, host)
    _finish(report, termination_log)
