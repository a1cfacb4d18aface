"""From Prometheus's JSON results to the series a report draws and the lines `sro status` prints (pure).

Why apart: what a series is called, whether it is simulated, how the used share is computed and how
series are ordered are decisions tests should hit without a Prometheus or a plotting library.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sro.report.promql import FB_FREE, FB_USED, GROUP_LABELS, SIMULATED, UTIL, Grouping, format_duration

Labels = Mapping[str, str]
# A series' identity: its group's label values and whether it is simulated.
Key = tuple[tuple[str, ...], bool]


class ShapeError(ValueError):
    """A Prometheus answer that is not the shape its API documents."""


@dataclass(frozen=True)
class Series:
    """One line of a panel: a group's values at the query's timestamps (seconds since the epoch)."""

    key: Key
    name: str
    simulated: bool
    times: tuple[float, ...]
    values: tuple[float, ...]

    def last(self) -> float:
        return next((v for v in reversed(self.values) if not math.isnan(v)), math.nan)


@dataclass(frozen=True)
class Panels:
    """What a report draws: utilisation (%) per group, framebuffer used share (%) and used MiB."""

    grouping: Grouping
    util: tuple[Series, ...]
    used_share: tuple[Series, ...]
    used_mib: tuple[Series, ...]
    total_mib: Mapping[Key, float]

    @property
    def groups(self) -> tuple[Key, ...]:
        seen: dict[Key, None] = {}
        for s in (*self.util, *self.used_mib):
            seen.setdefault(s.key, None)
        return tuple(seen)

    @property
    def simulated(self) -> str:
        """`all`, `some` or `none` of the series come from simulated devices."""
        flags = {k[1] for k in self.groups}
        return "all" if flags == {True} else "some" if True in flags else "none"


def is_simulated(labels: Labels) -> bool:
    return labels.get(SIMULATED, "").lower() == "true"


def group_key(labels: Labels, grouping: Grouping) -> Key:
    return tuple(labels.get(name, "") for name in GROUP_LABELS[grouping]), is_simulated(labels)


def group_name(labels: Labels, grouping: Grouping) -> str:
    """`node-a gpu0` (with `/mig3` for a MIG instance), `node-a`, or `team-a`."""
    if grouping == "device":
        name = f"{labels.get('Hostname') or '(no Hostname)'} gpu{labels.get('gpu', '?')}"
        return f"{name}/mig{labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else name
    label = GROUP_LABELS[grouping][0]
    return labels.get(label) or f"(no {label})"


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def _float(raw: Any) -> float:
    try:
        return float(raw)  # Prometheus sends values as strings: "12.5", "NaN", "+Inf"
    except (TypeError, ValueError):
        raise ShapeError(f"a sample value {raw!r} is not a number") from None


def _result(data: Any, want: str) -> list[Mapping[str, Any]]:
    if not isinstance(data, Mapping) or data.get("resultType") != want:
        got = data.get("resultType") if isinstance(data, Mapping) else type(data).__name__
        raise ShapeError(f"expected a {want} result, got {got!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise ShapeError("the result is not a list")
    return result


def matrix_series(data: Any, grouping: Grouping) -> tuple[Series, ...]:
    """The `data` of a query_range answer as named series, in natural order of their names."""
    out = []
    for item in _result(data, "matrix"):
        labels = item.get("metric") or {}
        try:
            points = [(float(t), _float(v)) for t, v in item.get("values") or ()]
        except (TypeError, ValueError) as e:
            raise ShapeError(f"malformed samples for {dict(labels)}: {e}") from None
        out.append(
            Series(
                key=group_key(labels, grouping),
                name=group_name(labels, grouping),
                simulated=is_simulated(labels),
                times=tuple(t for t, _ in points),
                values=tuple(v for _, v in points),
            )
        )
    return tuple(sorted(out, key=lambda s: (_natural(s.name), s.simulated)))


def used_share(used: Sequence[Series], free: Sequence[Series]) -> tuple[Series, ...]:
    """100 * used / (used + free) per group, at the timestamps where both were scraped."""
    free_at = {s.key: dict(zip(s.times, s.values, strict=True)) for s in free}
    out = []
    for u in used:
        f = free_at.get(u.key, {})
        points = [(t, v, f[t]) for t, v in zip(u.times, u.values, strict=True) if t in f]
        if not points:
            continue
        out.append(
            Series(
                key=u.key,
                name=u.name,
                simulated=u.simulated,
                times=tuple(t for t, _, _ in points),
                values=tuple(100 * v / (v + fr) if v + fr > 0 else math.nan for _, v, fr in points),
            )
        )
    return tuple(out)


def totals(used: Sequence[Series], free: Sequence[Series]) -> dict[Key, float]:
    """Each group's framebuffer size (MiB) at its latest sample: used + free."""
    last_free = {s.key: s.last() for s in free}
    return {u.key: u.last() + last_free[u.key] for u in used if u.key in last_free}


def panels(grouping: Grouping, util: Any, used: Any, free: Any) -> Panels:
    """The three query_range `data` objects of a report, shaped for drawing."""
    used_s, free_s = matrix_series(used, grouping), matrix_series(free, grouping)
    return Panels(
        grouping=grouping,
        util=matrix_series(util, grouping),
        used_share=used_share(used_s, free_s),
        used_mib=used_s,
        total_mib=totals(used_s, free_s),
    )


def display_names(p: Panels) -> dict[Key, str]:
    """Each group's legend name; `(simulated)` is added only when real and simulated series mix."""
    names = {s.key: s.name for s in (*p.util, *p.used_mib)}
    if p.simulated != "some":
        return names
    return {k: f"{n} (simulated)" if k[1] else n for k, n in names.items()}


def title(p: Panels, span: float, step: float, filters_text: str) -> str:
    what = f"GPU utilisation and framebuffer memory by {p.grouping}{filters_text}"
    when = f"last {format_duration(span)}, step {format_duration(step)}, times in UTC"
    sim = {"all": " — SIMULATED devices", "some": " — some series from SIMULATED devices", "none": ""}
    return f"{what}{sim[p.simulated]}\n{when}"


def memory_legend(p: Panels, key: Key, name: str) -> str:
    """`node-a  12.0 / 80.0 GiB`: the latest used and total framebuffer next to a group's name."""
    used = next((s.last() for s in p.used_mib if s.key == key), math.nan)
    total = p.total_mib.get(key, math.nan)
    if math.isnan(used):
        return name
    if math.isnan(total):
        return f"{name}  {used / 1024:.1f} GiB"
    return f"{name}  {used / 1024:.1f} / {total / 1024:.1f} GiB"


# --- the status summary -------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeSummary:
    node: str
    devices: int
    util_avg: float
    util_max: float
    used_mib: float
    total_mib: float
    simulated: bool


def vector_samples(data: Any) -> list[tuple[Labels, float]]:
    """The `data` of an instant query as (labels, value) pairs."""
    out = []
    for item in _result(data, "vector"):
        value = item.get("value")
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise ShapeError(f"malformed sample {value!r}")
        out.append((item.get("metric") or {}, _float(value[1])))
    return out


def node_summaries(samples: Iterable[tuple[Labels, float]]) -> list[NodeSummary]:
    """Per node: device count, mean and highest utilisation, framebuffer used and total."""
    readings: dict[str, dict[tuple[str, ...], dict[str, float]]] = {}
    simulated: dict[str, bool] = {}
    for labels, value in samples:
        node = labels.get("Hostname", "")
        device = (labels.get("gpu", ""), labels.get("GPU_I_ID", ""))
        metric = labels.get("__name__", "")
        if not node or metric not in (UTIL, FB_USED, FB_FREE) or math.isnan(value):
            continue
        readings.setdefault(node, {}).setdefault(device, {})[metric] = value
        simulated[node] = simulated.get(node, False) or is_simulated(labels)
    out = []
    for node in sorted(readings, key=_natural):
        devices = readings[node]
        utils = [d[UTIL] for d in devices.values() if UTIL in d]
        with_fb = [d for d in devices.values() if FB_USED in d and FB_FREE in d]
        out.append(
            NodeSummary(
                node=node,
                devices=len(devices),
                util_avg=sum(utils) / len(utils) if utils else math.nan,
                util_max=max(utils) if utils else math.nan,
                used_mib=sum(d[FB_USED] for d in with_fb) if with_fb else math.nan,
                total_mib=sum(d[FB_USED] + d[FB_FREE] for d in with_fb) if with_fb else math.nan,
                simulated=simulated[node],
            )
        )
    return out


def summary_line(s: NodeSummary) -> str:
    """`node-a: 4 GPUs, utilisation 63% (max 91%), framebuffer 120.0/320.0 GiB (38%), simulated`."""
    parts = [f"{s.node}: {s.devices} GPU{'s' if s.devices != 1 else ''}"]
    if not math.isnan(s.util_avg):
        parts.append(f"utilisation {s.util_avg:.0f}% (max {s.util_max:.0f}%)")
    if not math.isnan(s.used_mib) and s.total_mib > 0:
        share = 100 * s.used_mib / s.total_mib
        parts.append(f"framebuffer {s.used_mib / 1024:.1f}/{s.total_mib / 1024:.1f} GiB ({share:.0f}%)")
    if s.simulated:
        parts.append("SIMULATED")
    return ", ".join(parts)
