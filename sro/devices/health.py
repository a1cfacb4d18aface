"""Device health from backend events (pure): ignore list, fail-safe, and recovery.

Why a state machine of its own: NVIDIA's plugin marks a device unhealthy on a critical Xid and never
brings it back until the plugin restarts (k8s-device-plugin #234). Here a device is unhealthy while
a sticky fault is active (the simulated driver's fault state) and for a quiet period after its last
fault or its clearing; after that it is announced healthy again. `recover_after=None` keeps
NVIDIA's never-recover behaviour. Time is passed in (monotonic seconds), so tests need no sleeps,
and `next_change` tells the caller when to look again.

Why in `devices/`: the device plugin announces health from these rules and the exporter reports it
(`sro_device_healthy`); both import them from here, so the two can never disagree, and node agents
never import each other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sro.devices.model import DEFAULT_IGNORED_XIDS, DeviceUUID, HealthEvent

log = logging.getLogger(__name__)

ALL = DeviceUUID("*")  # key for faults that hit every device (event source lost)
DEFAULT_RECOVER_AFTER = 60.0
HEALTH_FIELDS = frozenset({"enabled", "ignoredXids", "recoverAfterSeconds"})


@dataclass(frozen=True)
class HealthPolicy:
    """The `health` section of the device plugin's config file, which the exporter reads too."""

    enabled: bool = True
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    recover_after: float | None = DEFAULT_RECOVER_AFTER


def parse_policy(health: Mapping[str, Any]) -> HealthPolicy:
    """The policy from a config file's `health` mapping; ValueError names the field."""
    unknown = sorted(set(health) - HEALTH_FIELDS)
    if unknown:
        raise ValueError(f"health: unknown field(s) {unknown}")
    enabled = health.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"health.enabled: expected true or false, got {enabled!r}")
    xids = health.get("ignoredXids", sorted(DEFAULT_IGNORED_XIDS))
    if not isinstance(xids, list) or any(
        isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in xids
    ):
        raise ValueError(f"health.ignoredXids: expected a list of non-negative integers, got {xids!r}")
    recover = health.get("recoverAfterSeconds", DEFAULT_RECOVER_AFTER)
    if recover is not None and (
        isinstance(recover, bool) or not isinstance(recover, int | float) or recover < 0
    ):
        raise ValueError(
            f"health.recoverAfterSeconds: expected seconds >= 0 or null (never), got {recover!r}"
        )
    return HealthPolicy(enabled, frozenset(xids), None if recover is None else float(recover))


@dataclass
class _State:
    active: bool = False
    last: float = float("-inf")  # time of the last fault or clearing
    reason: str = ""
    xids: tuple[int, ...] = ()  # the counted Xids seen since the key was last healthy


class HealthTracker:
    def __init__(
        self,
        ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS,
        recover_after: float | None = 60.0,
        enabled: bool = True,
    ) -> None:
        self.ignored_xids = ignored_xids
        self.recover_after = recover_after
        self.enabled = enabled
        self._states: dict[DeviceUUID, _State] = {}

    def apply(self, ev: HealthEvent) -> bool:
        """Take one event in; True when it may have changed some device's health."""
        if not self.enabled:
            return False
        key = ev.device if ev.device is not None else ALL
        if ev.kind == "cleared":
            state = self._states.get(key)
            if state is None or not state.active:
                return False
            state.active = False
            state.last = max(state.last, ev.at)
            log.info("device %s: fault cleared; healthy again after %ss quiet", key, self.recover_after)
            return True
        if ev.kind == "xid" and ev.xid in self.ignored_xids:
            log.info("device %s: ignoring Xid %s (application error, not a device fault)", key, ev.xid)
            return False
        if ev.kind == "ecc-single-bit":
            log.info("device %s: single-bit ECC error corrected; health unchanged", key)
            return False
        state = self._states.setdefault(key, _State())
        if not self._unhealthy(state, ev.at):
            state.xids = ()  # a new episode: the Xids of one that ended are history
        if ev.xid is not None and ev.xid not in state.xids:
            state.xids = (*state.xids, ev.xid)
        state.active = state.active or ev.sticky
        state.last = max(state.last, ev.at)
        state.reason = ev.message or (f"Xid {ev.xid}" if ev.xid is not None else ev.kind)
        log.warning("device %s: unhealthy (%s)", key, state.reason)
        return True

    def _unhealthy(self, state: _State, now: float) -> bool:
        if state.active:
            return True
        if self.recover_after is None:
            return state.last > float("-inf")
        return now < state.last + self.recover_after

    def unhealthy(self, now: float) -> dict[DeviceUUID, str]:
        """Unhealthy keys (device/MIG UUIDs, or ALL) with the reason, at time `now`."""
        return {k: s.reason for k, s in self._states.items() if self._unhealthy(s, now)}

    def faults(self, now: float) -> dict[DeviceUUID, tuple[tuple[int, ...], str]]:
        """Unhealthy keys with the counted Xids seen since each was last healthy and the reason
        (the health report's faults: ignored Xids never appear, a fault without one has none)."""
        return {k: (s.xids, s.reason) for k, s in self._states.items() if self._unhealthy(s, now)}

    def is_healthy(self, keys: Iterable[DeviceUUID], now: float) -> bool:
        bad = self.unhealthy(now)
        return ALL not in bad and not any(k in bad for k in keys)

    def next_change(self, now: float) -> float | None:
        """The earliest future time at which a device recovers (None: nothing pending)."""
        if self.recover_after is None:
            return None
        times = [
            s.last + self.recover_after
            for s in self._states.values()
            if not s.active and s.last + self.recover_after > now
        ]
        return min(times, default=None)
