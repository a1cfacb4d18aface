"""The node's `GpuHealthy` condition from its devices' fault reports (pure).

Why a Node condition, as Node Problem Detector reports kernel deadlocks and GKE GPU faults: it is
where people and tools already look (`kubectl describe node`, alerting on kube-state-metrics'
`kube_node_status_condition`), and it names the class and the devices without reading sro's own
objects. The node agents hold no right to write Nodes (least privilege): the device plugin reports
its node's device health through a narrow channel and the operator, which already patches Nodes,
sets the condition from it. The condition is a fact, not an action: it is set in a dry run and while
remediation is paused too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sro.api.timestamps import stamp
from sro.devices.faultclasses import CONDITION, Fault, node_condition

MESSAGE_MAX = 1024  # a condition's message is for a person; the devices' list is cut past it


def gpu_condition(
    faults: Sequence[Fault], previous: Mapping[str, Any] | None, now: datetime
) -> dict[str, Any] | None:
    """The `GpuHealthy` condition to write, or None when the node's current one already says it.

    `previous` is the node's current condition of that type (None: it has none). A node that never
    had a fault and has none gets no condition (nodes without a report stay as they are); once set,
    it turns True when the last fault clears. The transition time moves only with the status."""
    status, reason, message = node_condition(faults)
    if len(message) > MESSAGE_MAX:
        message = message[: MESSAGE_MAX - 4] + " ..."
    if previous is None and status == "True":
        return None
    if (
        previous is not None
        and previous.get("status") == status
        and previous.get("reason") == reason
        and previous.get("message") == message
    ):
        return None
    when = stamp(now)
    kept = "" if previous is None or previous.get("status") != status else previous.get("lastTransitionTime")
    return {
        "type": CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": when,
        "lastTransitionTime": str(kept or when),
    }
