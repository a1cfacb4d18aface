"""How long the kubelet waited to mount a pod's ConfigMaps and Secrets, read from its own log.

Why from the log: the wait is inside the kubelet (its volume manager retries a mount whose object
its watch has not yet listed), where nothing in the API shows it. A pod that is its node's first to
mount an object races the API server's node authorizer: the kubelet's first list of the object is
refused (`no relationship found between node ... and this object`: the authorizer's graph has not
yet linked the just-bound pod), its reflector backs off (0.8-1.6 s), and the mount waits. The
operator benchmark reads, per state's pod, the time from the kubelet's first `MountVolume started`
of each such volume to its `MountVolume.SetUp succeeded`: ~1 ms when the race is won.

Lines look like (klog, `--v=1`; the month and day, no year):
`I1202 00:31:43.815588   30283 reconciler.go:269] operationExecutor.MountVolume started for volume
"config" (UniqueName: "kubernetes.io/configmap/<pod uid>-config") pod ...`
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from pathlib import Path

_LINE = re.compile(
    r"^I\d{4} (\d\d):(\d\d):(\d\d\.\d+) .*?(MountVolume started|MountVolume\.SetUp succeeded) for volume "
    r'"[^"]*" \(UniqueName: "kubernetes\.io/(configmap|secret)/([0-9a-f-]{36})-([^"]+)"\)'
)
DAY = 86400.0


def mount_waits(lines: Iterable[str], pod_uids: Collection[str]) -> dict[str, dict[str, float]]:
    """Per pod, per ConfigMap or Secret volume (`configmap/<volume>`): seconds from its first mount
    started to its first set-up succeeded. A volume with no success in `lines` is left out."""
    started: dict[tuple[str, str], float] = {}
    waits: dict[str, dict[str, float]] = {uid: {} for uid in pod_uids}
    for line in lines:
        m = _LINE.match(line)
        if m is None or m[6] not in waits:
            continue
        when = int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3])
        key = (m[6], f"{m[5]}/{m[7]}")
        if m[4] == "MountVolume started":
            started.setdefault(key, when)
        elif key in started and key[1] not in waits[m[6]]:
            waits[m[6]][key[1]] = (when - started[key]) % DAY  # a wait across midnight
    return waits


def log_end(log: Path) -> int:
    """Where the log ends now: read from here what a run is about to write."""
    try:
        return log.stat().st_size
    except OSError:
        return 0


def pod_mount_waits(log: Path, since: int, pod_uids: Collection[str]) -> dict[str, float]:
    """Per pod, the longest wait of its ConfigMap and Secret mounts in the log from offset `since`
    (0 when it has none, or the log cannot be read: then nothing is counted as a floor)."""
    try:
        with log.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        text = ""
    found = mount_waits(text.splitlines(), pod_uids)
    return {uid: max(found[uid].values(), default=0.0) for uid in pod_uids}
