"""`sro report`: a PNG of GPU utilisation and framebuffer memory over time, from Prometheus.

Thin glue: options -> `promql` (what to ask), `prometheus` (asking), `shaping` (what came back),
`drawing` (the picture). Every failure prints one line saying what could not be reached or what
returned nothing (URL and query), and exits 1; bad options exit 2. Never a traceback.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from sro.report.prometheus import URL_ENV, Prometheus, PrometheusError, check_url, default_url
from sro.report.promql import (
    GROUPINGS,
    Filters,
    Grouping,
    PromQLError,
    auto_step,
    format_duration,
    parse_duration,
    report_queries,
)
from sro.report.shaping import ShapeError, panels, title


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float | None:
    if param.name == "step" and value == "auto":
        return None
    try:
        return parse_duration(value)
    except PromQLError as e:
        raise click.BadParameter(str(e)) from None


def _url(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    try:
        return check_url(value or default_url())
    except PrometheusError as e:
        raise click.BadParameter(str(e)) from None


def _writable(output: Path) -> None:
    """Refuse an output path that cannot be written before asking Prometheus anything."""
    parent = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise click.ClickException(f"cannot write {output}: it is a directory")
    if not parent.is_dir():
        raise click.ClickException(f"cannot write {output}: no directory {parent}")
    if not os.access(parent, os.W_OK) or (output.exists() and not os.access(output, os.W_OK)):
        raise click.ClickException(f"cannot write {output}: permission denied")


def _filters_text(filters: Filters) -> str:
    parts = [
        f"node {filters.node}" if filters.node else "",
        f"namespace {filters.namespace}" if filters.namespace else "",
    ]
    shown = ", ".join(p for p in parts if p)
    return f" ({shown})" if shown else ""


@click.command("report")
@click.option(
    "--prometheus",
    "url",
    callback=_url,
    metavar="URL",
    help=f"Prometheus's base URL (default: ${URL_ENV}, else http://127.0.0.1:9090).",
)
@click.option(
    "--by",
    "grouping",
    type=click.Choice(GROUPINGS),
    default="device",
    show_default=True,
    help="One line per device (gpu on a Hostname), per node, or per namespace (pods holding devices).",
)
@click.option(
    "--since",
    default="1h",
    show_default=True,
    callback=_duration,
    metavar="DURATION",
    help="How far back (30m, 6h, 2d).",
)
@click.option(
    "--step",
    default="auto",
    show_default=True,
    callback=_duration,
    metavar="DURATION|auto",
    help="Resolution (15s, 1m); auto: ~250 points.",
)
@click.option("--node", default="", help="Only this node (the Hostname label).")
@click.option("--namespace", default="", help="Only devices held by pods of this namespace.")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=Path("report.png"),
    show_default=True,
    help="The PNG to write.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds to wait for each answer.",
)
@click.option(
    "--token",
    envvar="PROMETHEUS_TOKEN",
    default="",
    help="Bearer token for a Prometheus behind an authenticating proxy (default: $PROMETHEUS_TOKEN).",
)
def report(
    url: str,
    grouping: Grouping,
    since: float,
    step: float | None,
    node: str,
    namespace: str,
    output: Path,
    timeout: float,
    token: str,
) -> None:
    """Draw GPU utilisation and framebuffer memory over time as one PNG, from Prometheus.

    Reads dcgm-exporter's metrics (as `sro exporter` serves them): DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED
    and DCGM_FI_DEV_FB_FREE. Needs the `report` extra: pip install 'sro[report]'.
    """
    from sro.report.drawing import DrawingUnavailable, draw, require

    try:
        require()
    except DrawingUnavailable as e:
        raise click.ClickException(str(e)) from None
    _writable(output)

    filters = Filters(node=node, namespace=namespace)
    queries = report_queries(grouping, filters)
    step = step or auto_step(since)
    if since / step > 11000:  # Prometheus refuses more points than this per series
        raise click.BadParameter(
            f"{format_duration(step)} over {format_duration(since)} is too many points", param_hint="--step"
        )
    end = time.time()
    start = end - since
    prom = Prometheus(url, timeout=timeout, token=token)
    answers = []
    try:
        for query in (queries.util, queries.used, queries.free):
            answers.append(prom.query_range(query, start, end, step))
        shaped = panels(grouping, *answers)
    except PrometheusError as e:
        raise click.ClickException(str(e)) from None
    except ShapeError as e:
        raise click.ClickException(f"{url}: an answer not in Prometheus's shape: {e}") from None

    if not shaped.util and not shaped.used_mib:
        narrowed = _filters_text(filters)
        raise click.ClickException(
            f"Prometheus at {url} returned no data over the last {format_duration(since)}{narrowed} for: "
            f"{queries.util} (is an exporter of DCGM_FI_DEV_* metrics scraped?)"
        )
    for query, series in ((queries.util, shaped.util), (queries.used, shaped.used_mib)):
        if not series:
            click.echo(f"note: no data for {query}", err=True)

    try:
        width, height = draw(shaped, title(shaped, since, step, _filters_text(filters)), output, (start, end))
    except OSError as e:
        raise click.ClickException(f"cannot write {output}: {e.strerror or e}") from None
    sim = {"all": ", SIMULATED devices", "some": ", some SIMULATED devices", "none": ""}[shaped.simulated]
    click.echo(
        f"{output}: {width}x{height}, {len(shaped.groups)} {grouping}{'s' if len(shaped.groups) != 1 else ''} "
        f"over the last {format_duration(since)} (step {format_duration(step)}){sim}"
    )
    for key in shaped.groups:
        name = next(s.name for s in (*shaped.util, *shaped.used_mib) if s.key == key)
        click.echo(f"  {name}")
