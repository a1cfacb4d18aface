"""The PromQL behind `sro report` and the status summary, and the time range it asks for (pure).

Why these queries: dcgm-exporter (and `sro exporter`, a drop-in for it) emits one series per device,
or one per pod when pods share a time-sliced device, each with the same reading. So every query first
takes one value per device (`max by` the device's labels), then aggregates per node or namespace;
summing the raw series would count a shared device once per pod. `simulated` is kept in every `by`
so each result says whether it came from simulated devices.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, get_args

Grouping = Literal["device", "node", "namespace"]
GROUPINGS: tuple[Grouping, ...] = get_args(Grouping)

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
SIMULATED = "simulated"

# One device: its node, its index there, and the MIG instance where there is one.
DEVICE_LABELS = ("Hostname", "gpu", "GPU_I_ID")
GROUP_LABELS: dict[Grouping, tuple[str, ...]] = {
    "device": DEVICE_LABELS,
    "node": ("Hostname",),
    "namespace": ("namespace",),
}

# Prometheus answers at most 11,000 points per series; a picture needs a few hundred.
TARGET_POINTS = 250
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class PromQLError(ValueError):
    """Input that cannot make a query (a malformed duration); the message names it."""


@dataclass(frozen=True)
class Filters:
    """What the user narrowed the report to (`--node`, `--namespace`); empty means everything."""

    node: str = ""
    namespace: str = ""


@dataclass(frozen=True)
class Queries:
    """The three range queries of a report: utilisation, framebuffer used and free."""

    util: str
    used: str
    free: str


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus-style duration (`90s`, `15m`, `1h30m`, `2d`); a bare number is seconds."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise PromQLError(f"{text!r} is not a duration (e.g. 30s, 15m, 1h, 1h30m, 2d)") from None
        seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise PromQLError(f"{text!r} is not a positive duration")
    return seconds


def auto_step(span: float) -> int:
    """A round step (seconds) giving about TARGET_POINTS points over `span` seconds."""
    want = span / TARGET_POINTS
    return next((s for s in NICE_STEPS if s >= want), NICE_STEPS[-1])


def format_duration(seconds: float) -> str:
    """`3600` -> `1h`, `90` -> `1m30s`: how titles and messages show a span or step."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    out, rest = [], round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out) or "0s"


def quote(value: str) -> str:
    """A PromQL string literal (label values may hold quotes and backslashes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def selector(metric: str, filters: Filters, grouping: Grouping) -> str:
    matchers = []
    if filters.node:
        matchers.append(f"Hostname={quote(filters.node)}")
    if filters.namespace:
        matchers.append(f"namespace={quote(filters.namespace)}")
    elif grouping == "namespace":
        matchers.append('namespace!=""')  # devices no pod holds belong to no namespace
    return f"{metric}{{{','.join(matchers)}}}" if matchers else metric


def _by(labels: tuple[str, ...]) -> str:
    return ", ".join((*labels, SIMULATED))


def per_device(metric: str, filters: Filters, grouping: Grouping) -> str:
    """One series per device (per device and namespace when grouping by namespace)."""
    labels = ("namespace", *DEVICE_LABELS) if grouping == "namespace" else DEVICE_LABELS
    return f"max by ({_by(labels)}) ({selector(metric, filters, grouping)})"


def grouped(metric: str, how: Literal["avg", "sum"], filters: Filters, grouping: Grouping) -> str:
    inner = per_device(metric, filters, grouping)
    if grouping == "device":
        return inner
    return f"{how} by ({_by(GROUP_LABELS[grouping])}) ({inner})"


def report_queries(grouping: Grouping, filters: Filters) -> Queries:
    """Utilisation is averaged over a group's devices; framebuffer MiB are summed."""
    return Queries(
        util=grouped(UTIL, "avg", filters, grouping),
        used=grouped(FB_USED, "sum", filters, grouping),
        free=grouped(FB_FREE, "sum", filters, grouping),
    )


def summary_query() -> str:
    """The status line's one instant query: the latest of the three readings of every device."""
    return (
        f"max by (__name__, {_by(DEVICE_LABELS)}) ({{__name__=~{quote('|'.join((UTIL, FB_USED, FB_FREE)))}}})"
    )
