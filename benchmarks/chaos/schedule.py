"""The campaign's fault schedule: which fault, when, with what parameters — from a seed alone.

Pure (no clock, no cluster): the same seed, minutes and kinds give the same schedule, so a failing
run is replayed exactly with `--seed`. Faults come at exponential gaps (a Poisson process, as faults
meet a real cluster) but never closer than MIN_GAP_S, so that each has time to act before the next
one lands on top of it; every parameter (which component, which device, which Xid, how long a stop
lasts) is drawn from the same seeded RNG.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

# Every fault kind of issue 25, in the order the issue lists them.
KINDS: Final = (
    "leader-killed",
    "leader-stopped",
    "operand-pod-killed",
    "daemonset-deleted",
    "validation-pod-deleted",
    "component-restarted",
    "device-fault",
    "sro-upgraded",
    "node-label-edited",
    "spec-changed",
    "upgrade-paused",
    "sr-reapplied",
)
COMPONENTS: Final = (
    "kubelet",
    "containerd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
)
# 79: fallen off the bus (a reset is needed); 48: double-bit ECC; 13: an application's fault.
XIDS: Final = (79, 48, 13)
DEVICES: Final = 8  # the simulated-gpu recipe's devices per node
# the states that run a DaemonSet of the SpecialResource's (feature-discovery is a label state: it
# has no DaemonSet or pod to delete; it is faulted by being disabled and by its labels edited)
OPERAND_STATES: Final = ("driver", "runtime", "device-plugin", "monitoring")
VALIDATIONS: Final = ("driver-validation", "device-plugin-validation")
DISABLEABLE: Final = ("monitoring", "feature-discovery")
SPEC_CHANGES: Final = ("device-plugin-config", "state-toggled", "driver-version")
OWNED_LABELS: Final = ("validated", "state", "not-ready-taint")
MIN_GAP_S: Final = 5.0
MEAN_GAP_S: Final = 15.0  # the mean gap beyond MIN_GAP_S
LEASE_S: Final = 15.0  # the operator's lease (sro/kube/leases.py Timing.duration): a stop lasts longer


@dataclass(frozen=True)
class Planned:
    """One fault: `at_s` seconds after the campaign starts."""

    at_s: float
    kind: str
    params: dict[str, str | int | float] = field(default_factory=dict)

    def describe(self) -> str:
        args = " ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.kind} {args}".strip()


def parse_kinds(text: str) -> tuple[str, ...]:
    """`--faults k1,k2` → the kinds, in KINDS order; ValueError naming an unknown one. Empty: all."""
    asked = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in asked if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    return tuple(k for k in KINDS if k in asked) if asked else KINDS


def _params(kind: str, rng: random.Random) -> dict[str, str | int | float]:
    if kind == "leader-stopped":
        return {"stop_s": round(LEASE_S + rng.uniform(5, 15), 1)}
    if kind == "operand-pod-killed":
        return {"state": rng.choice(OPERAND_STATES)}
    if kind == "daemonset-deleted":
        return {"state": rng.choice(OPERAND_STATES)}
    if kind == "validation-pod-deleted":
        return {"state": rng.choice(VALIDATIONS)}
    if kind == "component-restarted":
        return {"component": rng.choice(COMPONENTS)}
    if kind == "device-fault":
        return {
            "device": rng.randrange(DEVICES),
            "xid": rng.choice(XIDS),
            "hold_s": round(rng.uniform(3, 20), 1),
        }
    if kind == "sro-upgraded":
        return {"hold_s": round(rng.uniform(10, 40), 1)}
    if kind == "node-label-edited":
        return {"what": rng.choice(OWNED_LABELS), "action": rng.choice(("edited", "removed"))}
    if kind == "spec-changed":
        change = rng.choice(SPEC_CHANGES)
        if change == "state-toggled":
            return {
                "change": change,
                "state": rng.choice(DISABLEABLE),
                "hold_s": round(rng.uniform(5, 20), 1),
            }
        return {"change": change, "hold_s": round(rng.uniform(5, 20), 1)}
    if kind == "upgrade-paused":
        return {"hold_s": round(rng.uniform(5, 20), 1)}
    return {}  # leader-killed, sr-reapplied: nothing to choose


def schedule(seed: int, minutes: float, kinds: tuple[str, ...] = KINDS) -> list[Planned]:
    """The faults of a campaign of `minutes`; the same arguments give the same list.

    Kinds are drawn round-robin over a seeded shuffle, so every asked kind comes before any comes
    twice (a short run still meets each one), then uniformly."""
    if not kinds:
        raise ValueError("no fault kind to schedule")
    rng = random.Random(seed)
    horizon = minutes * 60.0
    order = list(kinds)
    rng.shuffle(order)
    out: list[Planned] = []
    at = MIN_GAP_S
    while at < horizon:
        kind = order[len(out)] if len(out) < len(order) else rng.choice(kinds)
        out.append(Planned(round(at, 1), kind, _params(kind, rng)))
        at += MIN_GAP_S + rng.expovariate(1.0 / MEAN_GAP_S)
    return out
