"""The `sro driver` group: `driver simulate` (the simulated driver, `sro.devices.commands`),
`driver holders`, the payload of the holder-scan pod of a driver upgrade (`sro.node.holderscan`), and
`driver reset` / `driver reboot`, the payloads of a remediation's action pods (`sro.node.remediate`).

Why here: the holder scan reads the node with the runtime's driver-file finder, so it belongs to
the node side, while devices/ never imports node/; this module sees both and puts the two
subcommands under one group. The scan itself is imported only when `holders` runs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sro.console.options import load_recipe, recipe_file_option, recipe_option
from sro.devices.commands import simulate_driver
from sro.node import remediate

F = TypeVar("F", bound=Callable[..., Any])


def _directory_option(name: str, default: Path | None = None, help: str | None = None) -> Callable[[F], F]:
    """An existing directory, its default shown in the help."""
    return click.option(
        name,
        type=click.Path(path_type=Path, exists=True, file_okay=False),
        default=default,
        show_default=default is not None,
        help=help,
    )


@click.group("driver")
def driver() -> None:
    """Drivers for special hardware (the simulated GPU driver)."""


driver.add_command(simulate_driver)
driver.add_command(remediate.reset_command)
driver.add_command(remediate.reboot_command)


@driver.command("holders")
@recipe_option()
@recipe_file_option
@_directory_option("--proc-root", default=Path("/proc"))
@_directory_option("--driver-root", help="The driver's files (default: the recipe's driver root).")
@_directory_option("--dev-root", default=Path("/dev"))
@click.option(
    "--termination-log",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write a one-line JSON summary here (at most 4 KiB: a pod's termination message).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def holders(
    recipe_name: str | None,
    recipe_file: Path | None,
    proc_root: Path,
    driver_root: Path | None,
    dev_root: Path,
    termination_log: Path | None,
    as_json: bool,
) -> None:
    """List the processes that hold a driver: its device nodes open (O_PATH descriptors too) or its
    libraries mapped. Reads other processes' /proc entries: run as root with CAP_SYS_PTRACE in the
    host's PID namespace (the holder-scan pod of a driver upgrade).

    \b
    Exit codes:
      0  nothing holds the driver
      1  the scan could not run (the message says why)
      3  something holds it (listed)
      4  nothing found, but some processes could not be inspected
    The summary for --termination-log: {"holders":[{"pid":N,"exe":"..","holds":"/dev/x, libx.so.1",
    "podUID":".."}],"more":N,"unreadable":[pids]} (podUID, more, unreadable only when there are any).
    """
    from sro.api import holders as contract
    from sro.node import holderscan as scanning

    if recipe_name is None and recipe_file is None:
        raise click.UsageError("give --recipe NAME or --recipe-file PATH (a custom recipe)")
    recipe = load_recipe(recipe_name or "", recipe_file)
    root = str(driver_root if driver_root is not None else recipe.driver_root)
    targets = scanning.targets_for(recipe, root, str(dev_root), str(proc_root))
    try:
        found = scanning.scan(str(proc_root), targets, skip={os.getpid()})
    except OSError as e:
        raise click.ClickException(f"--proc-root {proc_root}: cannot list processes: {e}") from e
    summary = contract.Summary(found.holders, unreadable=found.unreadable)
    if termination_log is not None:
        message = contract.to_message(found.holders, found.unreadable)
        try:
            termination_log.write_text(message + "\n")
        except OSError as e:
            raise click.ClickException(f"--termination-log {termination_log}: {e}") from e
    if as_json:
        doc = {
            "recipe": recipe.name,
            "holders": [
                {"pid": h.pid, "exe": h.executable, "holds": list(h.holds), "podUID": h.pod_uid or None}
                for h in found.holders
            ],
            "unreadable": list(found.unreadable),
        }
        click.echo(json.dumps(doc, indent=2))
    elif found.holders:
        rows = [("PID", "POD", "HOLDS", "EXECUTABLE")]
        rows += [(str(h.pid), h.pod_uid or "-", ", ".join(h.holds), h.executable) for h in found.holders]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            click.echo("  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3])
    else:
        click.echo(f"nothing holds the {recipe.name} driver's devices or libraries")
    if not targets.found_on_node:
        click.echo(
            f"note: found no {recipe.name} device nodes or libraries under {root} and {dev_root}", err=True
        )
    if found.unreadable:
        click.echo(f"{len(found.unreadable)} processes could not be inspected:", err=True)
        for pid in found.unreadable[:10]:
            click.echo(f"  {pid}  {scanning.executable_of(str(proc_root), pid)[:100]}", err=True)
        click.echo("(run as root with CAP_SYS_PTRACE, in the host's PID namespace)", err=True)
    sys.exit(summary.exit_code)
