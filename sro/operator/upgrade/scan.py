"""The holder scan: one pod per node (host PID, ptrace) that finds processes holding the device.

Why before the driver is replaced: once Kubernetes' own pods are evicted, a process started outside
Kubernetes may still hold the device; replacing the driver under it would hang the unload or kill
the work. The scan runs `sro driver holders`; its termination message is the verdict read here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sro.api import holders
from sro.api.images import pull_policy_for
from sro.operator.rendering import Context, decorate, render_state
from sro.operator.states import INPUTS_ANNOTATION

SCAN_STATE = "upgrade-scan"  # the state label of the holder-scan pods
SCAN_RETRY = timedelta(seconds=5)  # a scan that found a holder runs again after this pause


def scan_pod_name(ctx: Context, node: str) -> str:
    return ctx.node_object_name(SCAN_STATE, node)


def scan_pod(ctx: Context, node: str, inputs: str) -> dict[str, Any]:
    """The holder scan (`sro driver holders`) for one node: the one pod with host PID and ptrace."""
    values = {
        "name": scan_pod_name(ctx, node),
        "node": node,
        "image": ctx.image,
        "pull_policy": pull_policy_for(ctx.image),
    }
    docs = [d for d in render_state(ctx, SCAN_STATE, "upgrade", **values) if d["kind"] == "Pod"]
    if len(docs) != 1:
        raise ValueError("the upgrade templates must render exactly one Pod (the holder scan)")
    obj = decorate(docs[0], ctx, SCAN_STATE)
    obj["metadata"].setdefault("annotations", {})[INPUTS_ANNOTATION] = inputs
    return obj


def read_scan(message: str, ours: frozenset[str] = frozenset()) -> tuple[bool, str]:
    """(free, words) from the scan's termination message: `process 123 (python3 x.py) holds /dev/x`.

    Processes the scan could not inspect (on some VMs not even root may read pid 1's descriptors)
    do not block: nothing was found, and the words say what could not be looked at. Processes of
    `ours` (pod uids: sro's own agents on the node) do not block either: on the `nvml` backend the
    device plugin, the exporter and discovery map the driver's libnvidia-ml, and they only go once
    the driver's revision moves (the chain walks again), so waiting for them would never end."""
    try:
        summary = holders.from_message(message)
    except Exception:  # from_message says ValueError; anything else is garbage all the same
        first = (message.strip().splitlines() or ["no output"])[0]
        return False, f"the holder scan failed: {first[:200]}"
    others = [h for h in summary.holders if not (h.pod_uid and h.pod_uid in ours)]
    found = [
        f"process {h.pid} ({h.executable[:60]}) holds {', '.join(h.holds) or 'the device'}"
        + (f" in pod {h.pod_uid}" if h.pod_uid else "")
        for h in others[:3]
    ]
    more = len(others) - len(found) + summary.more
    if found or more:
        return False, "; ".join(found) + (f" and {more} more" if more else "")
    if summary.unreadable:
        pids = ", ".join(str(p) for p in summary.unreadable[:5])
        return (
            True,
            f"no holder found; {len(summary.unreadable)} process(es) could not be inspected (pid {pids})",
        )
    return True, ""
