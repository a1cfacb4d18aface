"""The device plugins' health reports, carried into this node's NodeFeature at once.

Why discovery carries them: the device plugin, which sees device faults, holds no API token (least
privilege); discovery already owns this node's NodeFeature, which the operator reads. Each plugin
writes `/var/lib/sro/health/<recipe>.json` (`sro.devices.healthreport`); every pass reads them all
and merges them into the NodeFeature's features (`to_features`: strings only, NFD's schema).

Why a 1 s poll besides the pass: a pass comes every `core.sleepInterval` (60 s by default), but a
fault should reach the operator in a second or two, so between passes the daemon stats the reports
every `POLL` seconds (a few stat() calls) and, when one changed, republishes the NodeFeature with the
new reports and the features of the last pass (no rescan). A report of a recipe that had none (its
device plugin just started), one that went, or one written again saying what it said (a plugin that
restarted, over the report the one before left) makes a whole pass at once instead: that recipe's
devices have just come up or gone, and their labels (the device count the operator's
feature-discovery state waits for) would otherwise wait for the next pass. A missing directory is no
reports.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sro.devices.healthreport import (
    HealthReport,
    merge_features,
    read_reports,
    report_path,
    snapshot,
    to_features,
)
from sro.host.root import HostRoot

POLL = 1.0
SUBDIR = Path("sro") / "health"  # under the host's /var/lib


def health_dir(host: HostRoot) -> Path:
    return host.var_lib / SUBDIR


def with_health(doc: Mapping[str, Any], reports: Sequence[HealthReport]) -> dict[str, Any]:
    """`doc` (a NodeFeature) with the reports merged into its features (pure; `doc` unchanged)."""
    spec = dict(doc.get("spec") or {})
    spec["features"] = merge_features(spec.get("features") or {}, to_features(reports))
    return {**doc, "spec": spec}


class HealthWatch:
    """The reports in one directory, and whether they changed since they were last read."""

    def __init__(self, directory: Path, poll: float = POLL) -> None:
        self.directory = directory
        self.poll = poll
        self._seen: tuple[tuple[str, int, int], ...] | None = None
        self._last: dict[str, tuple[HealthReport, int]] = {}  # recipe -> (report, its file's mtime)
        self.recipes: frozenset[str] = frozenset()  # whose plugins reported, as last read
        self.restarted: frozenset[str] = frozenset()  # whose plugins (re)started since the read before

    def reports(self) -> list[HealthReport]:
        """Every valid report now (and remember what was read, for `changed`)."""
        self._seen = snapshot(self.directory)
        mtimes = {name: mtime for name, mtime, _ in self._seen}
        found = read_reports(self.directory)
        last = {r.recipe: (r, mtimes.get(report_path(self.directory, r.recipe).name, 0)) for r in found}
        # A running plugin writes its report only when what it says changes; one that starts writes
        # it at once. So a report written again saying the same is a plugin that (re)started — also
        # over the report its predecessor left behind when it stopped (a SpecialResource deleted and
        # made again), which `recipes` cannot tell from a report that stayed.
        self.restarted = frozenset(
            recipe
            for recipe, (report, mtime) in last.items()
            if recipe in self._last
            and self._last[recipe][1] != mtime
            and self._last[recipe][0].same_content(report)
        )
        self._last = last
        self.recipes = frozenset(last)
        return found

    def changed(self) -> bool:
        return snapshot(self.directory) != self._seen

    def wait(
        self, stop: threading.Event, seconds: float | None, also: Callable[[], object] | None = None
    ) -> str:
        """Sleep up to `seconds` (None: no end) looking every `poll`: "stop", "changed" (the
        reports), "also" (`also()` returned something true: the daemon's other watch) or "timeout"."""
        deadline = None if seconds is None else time.monotonic() + max(0.0, seconds)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return "timeout"
            if stop.wait(self.poll if left is None else min(self.poll, left)):
                return "stop"
            if self.changed():
                return "changed"
            if also is not None and also():
                return "also"
