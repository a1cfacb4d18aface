"""Keeping the node's live CDI specs current while `sro runtime install --wait` holds its claim.

Why a loop: containerd (>= 1.7) and CRI-O read the CDI specs at every container start that names a
CDI device, so a spec must follow the node's devices (a GPU gone, a MIG layout, a driver upgrade)
and must not stay broken when someone edits or removes it. The loop is cheap where nothing happens,
as the device plugin's is: one stat() per watched path every `poll` seconds (the driver's device
list, the directories of the device nodes, the live specs themselves); only a change, or every
`full_every` seconds in any case (a library replaced in place), makes a pass (`hostinstall.refresh`),
which rewrites only what differs.

A repair (a spec removed or changed since sro wrote it) is written to the report file, one line,
newest last; the runtime pod's `report` container turns it into its termination message, which the
operator shows in the SpecialResource's per-node row (`sro.operator.observed`): the runtime pod
has no API access to say it any other way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sro.node.runtime import hostinstall, installedrecipes
from sro.node.runtime.cdi import spec_file_name
from sro.node.runtime.driverfiles import dev_path
from sro.node.runtime.hookrecipes import SIMULATED_DEVICE_LIST
from sro.node.runtime.hostpaths import on_host
from sro.node.runtime.rootmanifest import File, InstallError, Log, Manifest
from sro.node.runtime.rootwrites import read_manifest, write_atomic

POLL = 1.0  # seconds between stat() rounds
FULL_EVERY = 60.0  # seconds between passes made whatever the stats say
REPORT_LIMIT = 3000  # bytes of the report: a termination message keeps at most 4096

Signature = tuple[tuple[int, int, int] | None, ...]


def watched_paths(manifest: Manifest, host_root: str, root: str = "") -> list[str]:
    """What a device change or a hand edit touches, as this process sees it (`root`: the runtime
    root, where the custom recipes the manifest lists are read from)."""
    paths: list[str] = []
    settings = manifest.settings
    try:
        custom = installedrecipes.load(root, manifest) if root else {}
    except InstallError:
        custom = {}  # the pass that reads them says why
    for name, driver_root in sorted(manifest.recipes.items()):
        recipe = installedrecipes.recipe_of(name, custom)
        if recipe is None:
            continue
        top = on_host(host_root, driver_root or recipe.driver_root)
        paths.append(os.path.join(top, SIMULATED_DEVICE_LIST))
        for node in (recipe.device_node, *recipe.companion_nodes, *recipe.control_nodes):
            paths.append(os.path.dirname(on_host(host_root, dev_path(settings.dev_root, node))))
        if settings.cdi_dir:
            paths.append(os.path.join(settings.cdi_dir, spec_file_name(recipe, "yaml")))
    return list(dict.fromkeys(paths))


def signature(paths: Sequence[str]) -> Signature:
    out: list[tuple[int, int, int] | None] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


def report_text(previous: str, repairs: Sequence[str], now: datetime) -> str:
    """The report file after this pass: the earlier lines and one for this pass, cut from the
    front to REPORT_LIMIT bytes (the newest line is what the row shows)."""
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    line = f"{stamp} repaired CDI spec " + "; ".join(repairs)
    text = (previous.rstrip("\n") + "\n" if previous.strip() else "") + line + "\n"
    while len(text.encode()) > REPORT_LIMIT and "\n" in text.rstrip("\n"):
        text = text.split("\n", 1)[1]
    return text[-REPORT_LIMIT:]


class Keeper:
    """One node's keeper: `tick()` every `poll` seconds; passes when something changed."""

    def __init__(
        self,
        root: str,
        host_root: str,
        log: Log,
        report: str | None = None,
        full_every: float = FULL_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root, self.host_root, self.log, self.report = root, host_root, log, report
        self.full_every, self.clock = full_every, clock
        self.paths: list[str] = []
        self.last: Signature | None = None
        self.last_pass = clock()
        self.failing = ""

    def start(self) -> None:
        """Take the watched paths and their stats as they are after the install."""
        manifest = read_manifest(self.root)
        self.paths = watched_paths(manifest, self.host_root, self.root) if manifest else []
        self.last = signature(self.paths)
        self.last_pass = self.clock()

    def tick(self) -> list[str]:
        """A stat() round, and a pass when due; the repairs it made."""
        now = signature(self.paths)
        if now == self.last and self.clock() - self.last_pass < self.full_every:
            return []
        return self.run_pass()

    def run_pass(self) -> list[str]:
        self.last_pass = self.clock()
        try:
            done = hostinstall.refresh(self.root, self.host_root, self.log)
        except (InstallError, OSError) as e:
            message = f"keeping the CDI specs failed (retrying): {e}"
            if message != self.failing:
                self.log(message)
                self.failing = message
            self.last = signature(self.paths)
            return []
        self.failing = ""
        if done is not None:
            self.paths = watched_paths(done, self.host_root, self.root)
        self.last = signature(self.paths)
        repairs = list(done.repaired) if done is not None else []
        if repairs:
            self.say(repairs)
        return repairs

    def say(self, repairs: Sequence[str]) -> None:
        if not self.report:
            return
        try:
            with open(self.report) as f:
                previous = f.read()
        except OSError:
            previous = ""
        text = report_text(previous, repairs, datetime.now(UTC))
        try:
            write_atomic(self.report, File(text.encode()))
        except OSError as e:
            self.log(f"cannot write the report {self.report}: {e.strerror}")
