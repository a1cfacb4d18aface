"""`sro remediation status|pause|resume|retry`: see and steer the self-healing of GPU nodes.

Why these four, as for driver upgrades (`sro upgrade`): each node's remediation lives on the Node
(annotation `sro.dev/<sr>.remediation`, written by the operator with the cordon), so `status` reads
it there and is right while the operator restarts; `pause`/`resume` set the SpecialResource's
`spec.remediation.paused` (nothing new starts, a node under way finishes); `retry` is the person's
answer to a node sro left cordoned (past its limit, or a step that did not finish): it writes the
record `Record.retried` describes, which is all the operator needs to uncordon the node — or to
repair it afresh when its fault is still there.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from sro.api.timestamps import stamp
from sro.operator.commands import KUBECONFIG, pick
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.remediation.record import HELD, read, remediation_annotation
from sro.operator.remediation.table import COLUMNS, breaker_line, counts_line, held, remediation_rows

if TYPE_CHECKING:
    from sro.kube.objects import Objects

SR_ARGUMENT = click.argument("sr_name", metavar="[SR]", required=False)


def _read(kubeconfig: str | None) -> tuple[Objects, list[SpecialResourceInfo], list[NodeInfo]]:
    """Every SpecialResource and Node, and the requests to change them with."""
    from sro.kube.client import sync_client
    from sro.kube.objects import Objects
    from sro.operator.cluster.specialresources import read_for_status

    objects = Objects(sync_client(kubeconfig))
    srs, nodes = read_for_status(objects)
    return objects, srs, nodes


@click.group("remediation")
def remediation() -> None:
    """Self-healing GPU nodes: see each node's repair, pause or resume them, retry a held node.

    A device fault (an Xid the fault-class table calls a drain trigger, a lost GPU, an uncorrectable
    ECC error) sets the node's GpuHealthy condition False, and spec.remediation's action for its class
    repairs the node: restart-workload (evict the pods holding the device), reset-device (cordon,
    evict them, reset the device, revalidate, uncordon), drain-and-reset (every pod using the
    resource leaves), reboot. At most spec.remediation.maxUnavailable of the nodes are out of service
    at once (the circuit breaker); a node repaired maxAttempts times within the window is left
    cordoned (limit) for a person, as is one whose step did not finish in time (failed).
    """


@remediation.command("status")
@SR_ARGUMENT
@KUBECONFIG
def status(sr_name: str | None, kubeconfig: str | None) -> None:
    """Each node under remediation as a table (node, class, devices, action, step, since, attempts in
    the window, reason), then the circuit breaker, paused and dry run.

    SR: the SpecialResource (default: the only one). Exit 0, or 3 when a node is held cordoned for a
    person (limit or failed: `sro remediation retry NODE`).
    """
    _, srs, nodes = _read(kubeconfig)
    sr = pick(srs, sr_name)
    rows = remediation_rows(sr, nodes, datetime.now(UTC))
    click.echo(counts_line(sr))
    console = Console() if sys.stdout.isatty() else Console(width=160)
    if rows:
        table = Table(title=f"{sr.name}: remediation")
        for col in COLUMNS:
            table.add_column(col)
        for row in rows:
            table.add_row(*row)
        console.print(table)
    click.echo(breaker_line(sr))
    sys.exit(3 if held(rows) else 0)


def _set_paused(sr_name: str | None, kubeconfig: str | None, paused: bool) -> None:
    objects, srs, _ = _read(kubeconfig)
    sr = pick(srs, sr_name)
    if not isinstance(sr.spec.get("remediation"), dict):
        # a patch would create spec.remediation and so turn remediation on with the default actions
        raise click.ClickException(
            f"{sr.name} has no spec.remediation: remediation is off, there is nothing to "
            f"{'pause' if paused else 'resume'} (turn it on with `remediation: {{}}` in its spec)"
        )
    objects.merge_patch("SpecialResource", sr.name, {"spec": {"remediation": {"paused": paused}}})
    if paused:
        click.echo(f"{sr.name}: remediation paused; no node starts one (a node under way finishes)")
    else:
        click.echo(f"{sr.name}: remediation resumed; faulty nodes start as the breaker allows")


@remediation.command("pause")
@SR_ARGUMENT
@KUBECONFIG
def pause(sr_name: str | None, kubeconfig: str | None) -> None:
    """Start no remediation on SR's nodes (sets spec.remediation.paused: true).

    A node already under way finishes its steps; a faulty node waits, reported `waiting`, and
    its GpuHealthy condition still says what is wrong. SR: default, the only one.
    """
    _set_paused(sr_name, kubeconfig, True)


@remediation.command("resume")
@SR_ARGUMENT
@KUBECONFIG
def resume(sr_name: str | None, kubeconfig: str | None) -> None:
    """Repair faulty nodes again (sets spec.remediation.paused: false). SR: default, the only one."""
    _set_paused(sr_name, kubeconfig, False)


@remediation.command("retry")
@click.argument("node")
@click.option("--sr", "--specialresource", "sr_name", default=None,
              help="The SpecialResource (default: the only one).")  # fmt: skip
@KUBECONFIG
def retry(node: str, sr_name: str | None, kubeconfig: str | None) -> None:
    """Let sro take NODE back after it held it cordoned (limit or failed).

    The node's attempts in the window are forgotten and its record set done; the operator then
    uncordons it (if sro cordoned it; an admin's cordon stays) — or, if its fault is still there,
    starts a fresh remediation, breaker permitting. Fix or replace the device first when the fault
    keeps coming back.
    """
    objects, srs, nodes = _read(kubeconfig)
    sr = pick(srs, sr_name)
    found = next((n for n in nodes if n.name == node), None)
    if found is None:
        raise click.ClickException(f"no node {node!r}")
    rec = read(found, sr.name)
    if rec is None or rec.state not in HELD:
        state = rec.state if rec is not None else f"not under remediation by {sr.name}"
        raise click.ClickException(f"node {node} is {state}, not {' or '.join(HELD)}: nothing to retry")
    again = rec.retried(stamp(datetime.now(UTC)))
    objects.merge_patch(
        "Node", node, {"metadata": {"annotations": {remediation_annotation(sr.name): again.to_json()}}}
    )
    then = "uncordons it" if rec.cordoned else "takes it back"
    click.echo(
        f"node {node}: {rec.state} cleared; the operator {then} (and repairs it if the fault is still there)"
    )
