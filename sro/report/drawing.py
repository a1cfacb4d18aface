"""The picture of `sro report`: two panels, utilisation and framebuffer memory, one line per group.

Why matplotlib, and why without pyplot: it is the plotting library everyone already has, and a bare
`Figure` drawn by the Agg canvas needs no display, keeps no global state and never opens a window.
It is an optional extra (`sro[report]`) so the node image stays small: `require()` says how to get it.
"""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING

from sro.report.shaping import Panels, Series, display_names, memory_legend

if TYPE_CHECKING:
    from matplotlib.axes import Axes

INSTALL_HINT = "pip install 'sro[report]'"
WIDTH_IN, HEIGHT_IN, DPI = 12.0, 8.0, 100  # 1200 x 800 pixels
MAX_LEGEND = 16  # more lines than this and a legend stops helping; the rest are counted


class DrawingUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to install it."""


def require() -> None:
    """Fail early (before any query) when the plotting library is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise DrawingUnavailable(
            f"sro report draws with matplotlib, which is not installed: {INSTALL_HINT}"
        ) from None


def _plot(ax: Axes, series: tuple[Series, ...], names: dict[tuple[tuple[str, ...], bool], str]) -> None:
    import numpy as np

    for s in series:
        times = (np.asarray(s.times, dtype=float) * 1000).astype("datetime64[ms]")  # UTC
        ax.plot(times, s.values, label=names.get(s.key, s.name), linewidth=1.4)


def _finish(ax: Axes, ylabel: str, empty_note: str, has_data: bool) -> None:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if not has_data:
        ax.text(0.5, 0.5, empty_note, ha="center", va="center", transform=ax.transAxes, color="grey")
        return
    locator = AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
    handles, labels = ax.get_legend_handles_labels()
    if len(handles) > MAX_LEGEND:
        more = len(handles) - MAX_LEGEND
        handles, labels = (
            handles[:MAX_LEGEND],
            [*labels[: MAX_LEGEND - 1], f"{labels[MAX_LEGEND - 1]}  (+{more} more)"],
        )
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)


def draw(p: Panels, title: str, output: Path, window: tuple[float, float] | None = None) -> tuple[int, int]:
    """Write the PNG to `output`; returns its size in pixels. OSError when it cannot be written.

    `window` (start, end in seconds since the epoch) is the time axis: the whole range asked for, so
    a device that appeared late starts late on the picture."""
    require()
    from matplotlib.figure import Figure

    names = display_names(p)
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    util_ax, mem_ax = fig.subplots(2, 1, sharex=True)
    fig.suptitle(title, fontsize="medium")

    _plot(util_ax, p.util, names)
    util_ax.set_title("GPU utilisation (DCGM_FI_DEV_GPU_UTIL)", fontsize="small", loc="left")
    util_ax.set_ylim(-2, 102)
    _finish(util_ax, "utilisation (%)", "no utilisation data", bool(p.util))

    if p.used_share:
        mem_names = {k: memory_legend(p, k, n) for k, n in names.items()}
        _plot(mem_ax, p.used_share, mem_names)
        mem_ax.set_title(
            "framebuffer used: FB_USED / (FB_USED + FB_FREE); legend: latest used / total",
            fontsize="small",
            loc="left",
        )
        mem_ax.set_ylim(-2, 102)
        _finish(mem_ax, "framebuffer used (%)", "", True)
    else:
        # Without FB_FREE there is no total: show what is used, in GiB.
        gib = tuple(
            Series(s.key, s.name, s.simulated, s.times, tuple(v / 1024 for v in s.values)) for s in p.used_mib
        )
        _plot(mem_ax, gib, names)
        mem_ax.set_title("framebuffer used (DCGM_FI_DEV_FB_USED)", fontsize="small", loc="left")
        _finish(mem_ax, "framebuffer used (GiB)", "no framebuffer data", bool(gib))
    mem_ax.set_xlabel("time (UTC)")
    if window is not None:
        import numpy as np

        mem_ax.set_xlim(*(np.asarray(window, dtype=float) * 1000).astype("datetime64[ms]"))

    fig.savefig(output, format="png")
    width, height = fig.canvas.get_width_height()
    return int(width), int(height)
