"""The `sro` command line: one entry point, every agent and tool a subcommand.

Why lazy: one image runs every agent (discovery, device plugin, hook, ...) as a subcommand, and the
OCI hook in particular sits on the container start path, so `sro hook` must not pay for importing the
Kubernetes client, kopf or grpc. Each subcommand lives in the module named below and is imported only
when it runs (or when its own `--help` is asked for).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click

from sro import __version__

# name -> (module:attribute, one-line help shown by `sro --help` without importing the module).
# Order is the order users see. Add new agents here; keep the help line short.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "sro.demo.commands:demo",
        "The whole story on the local cluster: agents, simulated GPUs, a GPU workload.",
    ),
    "local": (
        "sro.local.commands:local",
        "A real single-node Kubernetes on this machine (up/down/status/env/image).",
    ),
    "install": (
        "sro.install.commands:install",
        "Install the operator, its CRD and RBAC, and discovery on a cluster.",
    ),
    "uninstall": (
        "sro.install.commands:uninstall",
        "Remove every SpecialResource (finalizers run), then all that install put there.",
    ),
    "operator": (
        "sro.operator.commands:operator",
        "Run the special resource operator (what `sro install` deploys).",
    ),
    "status": (
        "sro.operator.commands:status",
        "SpecialResources and where each node stands, as tables.",
    ),
    "upgrade": (
        "sro.operator.commands:upgrade",
        "Driver upgrades: status, pause, resume, retry a failed node.",
    ),
    "remediation": (
        "sro.operator.remediation.commands:remediation",
        "Self-healing GPU nodes: status, pause, resume, retry a node held cordoned.",
    ),
    "report": (
        "sro.report.commands:report",
        "A PNG of GPU utilisation and memory over time per device, node or namespace (Prometheus).",
    ),
    "nodepool": (
        "sro.nodepools.commands:nodepool",
        "GPU node pools: a GPU MachineSet/MachineDeployment with its autoscaler wiring.",
    ),
    "discover": (
        "sro.node.discovery.commands:discover_command",
        "Node features as NFD labels; --publish labels the Node.",
    ),
    "driver": (
        "sro.node.commands:driver",
        "Drivers: `driver simulate` installs the SIMULATED GPU driver.",
    ),
    "simulate": (
        "sro.devices.commands:simulate",
        "Faults and loads on SIMULATED devices (`simulate fault`, `simulate load`).",
    ),
    "device-plugin": (
        "sro.node.deviceplugin.commands:device_plugin",
        "Kubelet device plugin (v1beta1) for a recipe's devices.",
    ),
    "exporter": (
        "sro.node.exporter.commands:exporter",
        "Prometheus metrics of a recipe's devices (dcgm-exporter names), per pod.",
    ),
    "cdi": ("sro.node.runtime.commands:cdi", "CDI specs for the recipes' devices (generate)."),
    "hook": (
        "sro.node.runtime.commands:hook",
        "OCI hook injecting devices, libraries, binaries; install-hooksd.",
    ),
    "runtime": (
        "sro.node.runtime.commands:runtime",
        "runc wrapper for a containerd runtime handler; install/uninstall the node's runtime files.",
    ),
    "validate": (
        "sro.node.validation.commands:validate",
        "Validation pods' checks: `validate driver`, `validate workload`.",
    ),
    "manifests": (
        "sro.manifests.commands:manifests",
        "Print a component's manifests for kubectl apply -f - on any cluster.",
    ),
    "bundle": ("sro.openshift.commands:bundle", "OLM bundle of the operator (`bundle generate`)."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an error of the environment that it let through ends in one line."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as e:
            message = environment_error(e)
            if message is None:  # a bug: its traceback is what to report
                raise
            logging.getLogger("sro").debug("%s", message, exc_info=True)
            raise click.ClickException(message) from e

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, short) for name, (_, short) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def environment_error(e: BaseException) -> str | None:
    """One line for an error of the environment, or None for any other error (a bug).

    The environment: the Kubernetes API (kubeconfig, connection, refusal: `sro.kube.client`) and the
    file system and network (a file missing, no permission). Commands say more where they know
    more; this is the net under them, so that no command ends in a traceback for want of a file,
    a permission or a cluster. The traceback is still logged with -vv.
    """
    if "httpx" in sys.modules or "lightkube" in sys.modules:  # only commands that use them load them
        from sro.kube.errors import describe_error

        message = describe_error(e)
        if message is not None:
            return message
    if isinstance(e, OSError):
        what = e.strerror or " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, PermissionError):
            what += f" (running as uid {os.geteuid()})"
        if e.filename is None:
            return what
        other = f" -> {e.filename2}" if e.filename2 is not None else ""
        return f"{e.filename}{other}: {what}"
    return None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sro")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """sro: make GPUs and other special hardware usable by Kubernetes workloads.

    Run `sro demo` for the whole story on a local cluster, or `sro COMMAND --help` for one part.
    Commands that talk to a cluster use $KUBECONFIG (for the local one: `eval "$(sro local env)"`).
    """
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(
        level=max(level, logging.DEBUG), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def main(argv: list[str] | None = None) -> Any:
    return cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="sro")
