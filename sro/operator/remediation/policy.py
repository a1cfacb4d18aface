"""What `spec.remediation` asks for one node: which action its faults get and the action's steps.

Why apart from the machine: the choice is the policy's, in words a person reads in
`spec.remediation` — the node's faults are sorted into classes (`sro.devices.faultclasses`), each
class names an action, and the node gets the strongest action among its faults (one remediation per
node at a time: a GPU lost and another's ECC error on one node are repaired together, by the
stronger of the two). The steps each action walks, and how long a step may take before the node is
left cordoned for a person, are here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sro.api.specialresource import REMEDIATION_ACTIONS, RemediationSpec
from sro.devices.faultclasses import SEVERITY, Fault
from sro.operator.remediation.record import (
    CORDONED,
    DONE,
    EVICTING,
    REBOOTING,
    RESETTING,
    VALIDATING,
    Record,
)

NONE: Final = "none"
RESTART_WORKLOAD: Final = "restart-workload"
RESET_DEVICE: Final = "reset-device"
DRAIN_AND_RESET: Final = "drain-and-reset"
REBOOT: Final = "reboot"
assert REMEDIATION_ACTIONS == (NONE, RESTART_WORKLOAD, RESET_DEVICE, DRAIN_AND_RESET, REBOOT)

# Each action's steps after the start, in order (REMEDIATION_ACTIONS is mildest first).
STEPS: Final = {
    RESTART_WORKLOAD: (EVICTING, DONE),  # the node stays in service; only the devices' users go
    RESET_DEVICE: (CORDONED, EVICTING, RESETTING, VALIDATING, DONE),
    DRAIN_AND_RESET: (CORDONED, EVICTING, RESETTING, VALIDATING, DONE),
    REBOOT: (CORDONED, EVICTING, REBOOTING, VALIDATING, DONE),
}
CORDONS: Final = frozenset({RESET_DEVICE, DRAIN_AND_RESET, REBOOT})

# How long a step may take before the node fails (left cordoned, a Warning event for a person).
TIMEOUT_SECONDS: Final = {
    EVICTING: 300,  # a PodDisruptionBudget that never allows it
    RESETTING: 300,  # the node's reset step (nvidia-smi --gpu-reset, the simulated driver's reset)
    REBOOTING: 900,  # from the reboot request to the node's new boot
    VALIDATING: 600,  # the node's validations, run again after the repair
}


@dataclass(frozen=True)
class Choice:
    """The remediation one node's faults call for."""

    fault_class: str  # the class whose action it is (the worst of them on a tie)
    action: str
    devices: tuple[str, ...]  # the faulty devices the action is about (those of a class with an action)
    xids: tuple[int, ...]


def choose(spec: RemediationSpec, faults: Sequence[Fault]) -> Choice | None:
    """The node's action: the strongest among its faults' classes; None when no fault asks for one."""
    acting = [f for f in faults if spec.action(f.fault_class) != NONE]
    if not acting:
        return None

    def strength(f: Fault) -> tuple[int, int]:
        severity = SEVERITY.index(f.fault_class) if f.fault_class in SEVERITY else len(SEVERITY)
        return REMEDIATION_ACTIONS.index(spec.action(f.fault_class)), -severity

    top = max(acting, key=strength)
    devices = sorted({f.device for f in acting}, key=lambda d: (not d.isdigit(), d.zfill(8)))
    xids = sorted({f.xid for f in acting if f.xid is not None})
    return Choice(top.fault_class, spec.action(top.fault_class), tuple(devices), tuple(xids))


def max_unavailable(spec: RemediationSpec, nodes: int) -> int:
    """The breaker's share of `nodes`: a count, or a percentage rounded up, never below one node (so
    one node can always be repaired)."""
    value = spec.max_unavailable
    if isinstance(value, str) and value.endswith("%"):
        return max(1, -(-nodes * int(value[:-1]) // 100))
    return max(1, int(value))


def next_step(action: str, state: str) -> str:
    """The step after `state` in `action`'s walk (DONE after the last)."""
    steps = STEPS.get(action, (DONE,))
    if state not in steps:
        return steps[0]
    i = steps.index(state)
    return steps[i + 1] if i + 1 < len(steps) else DONE


def would(action: str, devices: Sequence[str], pods: Sequence[str]) -> str:
    """What the action would do, in words (a dry run's event)."""
    words = ", ".join(pods[:5]) + (f" and {len(pods) - 5} more" if len(pods) > 5 else "")
    users = f"evict {words}" if pods else "evict no pod (none holds them)"
    devs = ", ".join(devices)
    if action == RESTART_WORKLOAD:
        return f"{users} (the pods holding device(s) {devs}); the node stays in service"
    if action == REBOOT:
        return f"cordon the node, {users}, reboot the node, revalidate, uncordon"
    return f"cordon the node, {users}, reset device(s) {devs}, revalidate, uncordon"


def event_reason(state: str) -> str:
    """The event reason of entering `state` (RemediationEvicting, ..., RemediationSucceeded)."""
    return {DONE: "RemediationSucceeded"}.get(state, "Remediation" + state.capitalize())


def step_words(rec: Record) -> str:
    """The event message of entering the record's step."""
    devs = ", ".join(rec.devices)
    return {
        CORDONED: "node cordoned",
        EVICTING: f"evicting the pods holding device(s) {devs}",
        RESETTING: f"resetting device(s) {devs}",
        REBOOTING: "rebooting the node",
        VALIDATING: "validating the node again",
        DONE: f"{rec.fault_class} on device(s) {devs} repaired ({rec.action})"
        + ("; node uncordoned" if rec.cordoned else ""),
    }.get(rec.state, rec.state)
