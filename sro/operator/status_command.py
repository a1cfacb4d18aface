"""`sro status [NAME]`: every SpecialResource, then where each node stands, as tables.

The node table is read from the node labels (`sro.dev/<sr>.<state>=ready`), the same source the
DaemonSets gate on, so it shows what the scheduler sees; the failing state's reason and log come
from the SpecialResource's status rows.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from sro.api.names import READY, STATE_NAMES, state_label, validated_label
from sro.operator.observed import NodeInfo, SpecialResourceInfo

SHORT = {
    "driver": "driver",
    "driver-validation": "drv-valid",
    "runtime": "runtime",
    "device-plugin": "plugin",
    "device-plugin-validation": "plugin-valid",
    "monitoring": "monitoring",
    "feature-discovery": "discovery",
}


def _condition(sr: SpecialResourceInfo, ctype: str) -> Mapping[str, Any]:
    return next((c for c in sr.status.get("conditions") or () if c.get("type") == ctype), {})


def summary_rows(srs: Sequence[SpecialResourceInfo]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for sr in srs:
        degraded = _condition(sr, "Degraded")
        problem = degraded.get("message", "") if degraded.get("status") == "True" else ""
        rows.append(
            (
                sr.name,
                str(sr.spec.get("recipe", "")),
                str(sr.status.get("resource", "")),
                str(sr.status.get("ready", "Unknown")),
                str(sr.status.get("nodeCount", 0)),
                str(sr.status.get("validatedCount", 0)),
                problem or str(_condition(sr, "Progressing").get("message", "")),
            )
        )
    return rows


def node_rows(sr: SpecialResourceInfo, nodes: Sequence[NodeInfo]) -> list[tuple[str, ...]]:
    """One row per node the SpecialResource's status lists: a cell per state, then the detail."""
    modes: Mapping[str, str] = sr.status.get("states") or {}
    details = {r.get("name"): r for r in sr.status.get("nodes") or ()}
    by_name = {n.name: n for n in nodes}
    rows: list[tuple[str, ...]] = []
    for name in sorted(details):
        node = by_name.get(name)
        labels = node.labels if node else {}
        cells = []
        for state in STATE_NAMES:
            if modes.get(state, "enabled") != "enabled":
                cells.append("-")
            else:
                cells.append("ready" if labels.get(state_label(sr.name, state)) == READY else "")
        row = details[name]
        if labels.get(validated_label(sr.name)) == "true":
            detail = f"validated since {row.get('since', '')}"
        else:
            detail = f"{row.get('failing', '')}: {row.get('reason', '')} {row.get('message', '')}".strip(": ")
        upgrade = row.get("upgrade") or {}
        if upgrade:
            detail += f"; driver upgrade {upgrade.get('from')} -> {upgrade.get('to')}: {upgrade.get('state')}"
            detail += f" ({upgrade['reason']})" if upgrade.get("reason") else ""
        rows.append((name, *cells, detail))
    return rows


def quota_rows(quotas: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    return [
        (
            str(r.get("namespace", "")),
            str(r.get("resource", "")),
            f"{r.get('used', '-')} / {r.get('hard', '?')}",
            str(r.get("problem", "")),
        )
        for r in quotas
    ]


@click.command("status")
@click.argument("name", required=False)
@click.option("--kubeconfig", default=None, help="Default: $KUBECONFIG, in-cluster, ~/.kube/config.")
@click.option("--logs/--no-logs", default=True, show_default=True, help="Show failing pods' log tails.")
@click.option(
    "--prometheus",
    default=None,
    help="Prometheus with the exporter's metrics, for a utilisation line per node "
    "(default: $PROMETHEUS_URL, else http://127.0.0.1:9090; nothing is shown when unreachable).",
)
def status(name: str | None, kubeconfig: str | None, logs: bool, prometheus: str | None) -> None:
    """SpecialResources and, for each, every matching node's state as a table.

    States in order: driver, driver-validation, runtime, device-plugin, device-plugin-validation,
    monitoring, feature-discovery. "ready" means the node carries sro.dev/<sr>.<state>=ready;
    "-" a disabled state. Exit status 0 when every
    SpecialResource shown is Ready, 3 otherwise.
    """
    from lightkube import ApiError

    from sro.kube.client import sync_client
    from sro.operator.cluster.specialresources import read_for_status

    try:
        srs, nodes = read_for_status(sync_client(kubeconfig), name)
    except ApiError as e:
        raise click.ClickException(f"{e.status.message} (is sro installed? `sro install`)") from e
    console = Console() if sys.stdout.isatty() else Console(width=160)  # logs and pipes: no wrapping
    if not srs:
        click.echo("No SpecialResources. Apply one (see examples/) after `sro install`.")
        sys.exit(3)
    table = Table(title="SpecialResources")
    for col in ("name", "recipe", "resource", "ready", "nodes", "validated", "detail"):
        table.add_column(col)
    for row in summary_rows(srs):
        table.add_row(*row)
    console.print(table)
    for sr in srs:
        t = Table(title=f"{sr.name}: nodes")
        for col in ("node", *(SHORT[s] for s in STATE_NAMES), "detail"):
            t.add_column(col)
        for row in node_rows(sr, nodes):
            t.add_row(*row)
        console.print(t)
        quotas = sr.status.get("quotas") or []
        if quotas:
            q = Table(title=f"{sr.name}: quotas (spec.partitioning.quotas)")
            for col in ("namespace", "resource", "used / hard", "note"):
                q.add_column(col)
            for row in quota_rows(quotas):
                q.add_row(*row)
            console.print(q)
        if logs:
            for row in sr.status.get("nodes") or ():
                if row.get("log"):
                    console.print(f"[bold]{row['name']}[/bold] {row.get('failing')} log tail:")
                    console.print(row["log"].rstrip(), markup=False, highlight=False)
    from sro.report.summary import utilisation_lines

    for line in utilisation_lines(prometheus):
        console.print(line, markup=False, highlight=False)
    sys.exit(0 if all(sr.status.get("ready") == "True" for sr in srs) else 3)
