"""`sro upgrade status|pause|resume|retry`: the driver rollout, seen and steered from the command line.

Why these read the nodes: each node's upgrade state and step times live on the Node (label
`sro.dev/<sr>.upgrade-state`, annotation `sro.dev/<sr>.upgrade`), written by the operator, so the
table is right even while the operator restarts. `pause`/`resume` set the SpecialResource's
`spec.driver.upgradePolicy.paused`; `retry` puts a failed node back to `upgrade-required`, which is
all the operator needs to try it again.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from sro.api.names import upgrade_annotation, upgrade_state_label
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.upgrade import FAILED, UPGRADE_REQUIRED, UPGRADE_STATES, Record, version_of

KUBECONFIG = click.option(
    "--kubeconfig", default=None, help="Default: $KUBECONFIG, in-cluster, ~/.kube/config."
)
SR_OPTION = click.option("--sr", "sr_name", default=None, help="The SpecialResource (default: the only one).")


def _time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def step_durations(rec: Record) -> str:
    """`cordoned +0s, waiting-for-jobs +1s, ...`: each step entered, seconds after the first."""
    times = [(s, _time(rec.steps[s])) for s in UPGRADE_STATES if s in rec.steps]
    known = [(s, t) for s, t in times if t is not None]
    if not known:
        return ""
    start = min(t for _, t in known)
    return ", ".join(
        f"{s} +{int((t - start).total_seconds())}s" for s, t in sorted(known, key=lambda x: x[1])
    )


def upgrade_rows(sr: SpecialResourceInfo, nodes: Sequence[NodeInfo]) -> list[tuple[str, ...]]:
    """One row per node with an upgrade record: node, state, from → to, the steps, the reason."""
    rows: list[tuple[str, ...]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        rec = Record.from_json(node.annotations.get(upgrade_annotation(sr.name), ""))
        if rec is None:
            continue
        rows.append(
            (
                node.name,
                rec.state,
                f"{version_of(rec.from_rev)} → {version_of(rec.to_rev)}",
                step_durations(rec),
                rec.reason,
            )
        )
    return rows


def pick(srs: Sequence[SpecialResourceInfo], name: str | None) -> SpecialResourceInfo:
    if name:
        found = [s for s in srs if s.name == name]
        if not found:
            raise click.ClickException(
                f"no SpecialResource {name!r}; there are: {', '.join(s.name for s in srs) or 'none'}"
            )
        return found[0]
    if len(srs) == 1:
        return srs[0]
    if not srs:
        raise click.ClickException("no SpecialResources; apply one first (see examples/)")
    raise click.ClickException(
        f"several SpecialResources: give --sr, one of {', '.join(s.name for s in srs)}"
    )


def _read(kubeconfig: str | None) -> tuple[Any, list[SpecialResourceInfo], list[NodeInfo]]:
    from sro.kube.client import sync_client
    from sro.operator.cluster.specialresources import read_for_status

    client = sync_client(kubeconfig)
    srs, nodes = read_for_status(client)
    return client, srs, nodes


@click.group("upgrade")
def upgrade() -> None:
    """Driver upgrades: see the rollout, pause or resume it, retry a failed node.

    A change of spec.driver (version, imageTemplate, devicesConfig, image, args) rolls over the
    nodes one at a time (spec.driver.upgradePolicy): upgrade-required → cordoned → waiting-for-jobs →
    pods-evicted → driver-replaced → validated → uncordoned → done, or failed with the reason. A
    failed node stops the rollout until it is retried.
    """


@upgrade.command("status")
@SR_OPTION
@KUBECONFIG
def status(sr_name: str | None, kubeconfig: str | None) -> None:
    """The rollout and every node's upgrade as a table. Exit 0 when no node is failed, 3 otherwise."""
    _, srs, nodes = _read(kubeconfig)
    sr = pick(srs, sr_name)
    summary = sr.status.get("driverUpgrade") or {}
    console = Console() if sys.stdout.isatty() else Console(width=160)
    counts = (
        ", ".join(f"{k} {v}" for k, v in sorted((summary.get("nodes") or {}).items())) or "no node upgrading"
    )
    click.echo(
        f"{sr.name}: driver {summary.get('target') or sr.spec.get('driver', {}).get('version') or 'default'}; {counts}"
    )
    if summary.get("blocked"):
        click.echo(f"blocked: {summary['blocked']}")
    rows = upgrade_rows(sr, nodes)
    table = Table(title=f"{sr.name}: driver upgrades")
    for col in ("node", "state", "driver", "steps", "reason"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    sys.exit(3 if any(r[1] == FAILED for r in rows) else 0)


def _set_paused(sr_name: str | None, kubeconfig: str | None, paused: bool) -> None:
    from sro.operator.cluster.specialresources import SpecialResource

    client, srs, _ = _read(kubeconfig)
    sr = pick(srs, sr_name)
    body = {"spec": {"driver": {"upgradePolicy": {"paused": paused}}}}
    from lightkube.types import PatchType

    client.patch(SpecialResource, sr.name, body, patch_type=PatchType.MERGE)
    if paused:
        click.echo(f"{sr.name}: driver upgrades paused; no node starts (one past its evictions finishes)")
    else:
        click.echo(f"{sr.name}: driver upgrades resumed")


@upgrade.command("pause")
@SR_OPTION
@KUBECONFIG
def pause(sr_name: str | None, kubeconfig: str | None) -> None:
    """Start no further node (sets spec.driver.upgradePolicy.paused: true)."""
    _set_paused(sr_name, kubeconfig, True)


@upgrade.command("resume")
@SR_OPTION
@KUBECONFIG
def resume(sr_name: str | None, kubeconfig: str | None) -> None:
    """Go on with the rollout (sets spec.driver.upgradePolicy.paused: false)."""
    _set_paused(sr_name, kubeconfig, False)


@upgrade.command("retry")
@click.argument("node")
@SR_OPTION
@KUBECONFIG
def retry(node: str, sr_name: str | None, kubeconfig: str | None) -> None:
    """Try a failed NODE again: it goes back to upgrade-required and the rollout goes on."""
    from lightkube.resources.core_v1 import Node
    from lightkube.types import PatchType

    client, srs, nodes = _read(kubeconfig)
    sr = pick(srs, sr_name)
    found = next((n for n in nodes if n.name == node), None)
    if found is None:
        raise click.ClickException(f"no node {node!r}")
    ann = upgrade_annotation(sr.name)
    rec = Record.from_json(found.annotations.get(ann, ""))
    if rec is None or rec.state != FAILED:
        state = rec.state if rec else "not upgrading"
        raise click.ClickException(f"node {node} is {state}, not failed: nothing to retry")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    reason = f"retried after: {rec.reason[:200]}"
    again = Record(UPGRADE_REQUIRED, rec.from_rev, rec.to_rev, {UPGRADE_REQUIRED: now}, rec.cordoned, reason)
    body = {
        "metadata": {
            "labels": {upgrade_state_label(sr.name): UPGRADE_REQUIRED},
            "annotations": {ann: again.to_json()},
        }
    }
    client.patch(Node, node, body, patch_type=PatchType.MERGE)
    click.echo(f"node {node}: back to {UPGRADE_REQUIRED}; the operator starts it when the limits allow")
