"""Leader election's fencing rules (client-go's), on a fake clock and a fake Lease: no test sleeps.

A standby takes over only `duration` after it last saw the record change (never from the holder's
renewTime), the leader stops acting within the renew deadline when renewals fail or hang, `keep()`
stops at once when another replica holds the Lease, every attempt is bounded shorter than the
renew deadline, and a plan's writes stop once the lease is no longer held.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Coroutine
from typing import Any

import pytest

from sro.kube.leases import LeaderElection, LeaseRecord, Timing


class FakeClock:
    """Monotonic time that moves only when every task is waiting on one of its sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._order), fut))
        await fut

    async def run(self, task: asyncio.Future[Any], until: float) -> None:
        """Wake sleepers in time order until `task` is done or the clock reaches `until`."""
        await _settle()
        while not task.done():
            while self._sleepers and self._sleepers[0][2].done():  # cancelled timers
                heapq.heappop(self._sleepers)
            if not self._sleepers or self._sleepers[0][0] > until:
                self.now = until
                return
            when, _, fut = heapq.heappop(self._sleepers)
            self.now = when
            fut.set_result(None)
            await _settle()


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


class FakeLease:
    """A Lease in memory: resourceVersion checked on update; can fail or hang on demand."""

    where = "sro-system/sro-operator"

    def __init__(self, spec: dict[str, Any] | None = None) -> None:
        self.spec = spec
        self.version = 1
        self.fail = False
        self.hang = False
        self.calls = 0

    def record(self) -> LeaseRecord | None:
        if self.spec is None:
            return None
        return LeaseRecord(
            holder=self.spec.get("holderIdentity") or "",
            duration=int(self.spec.get("leaseDurationSeconds") or 0),
            acquired=str(self.spec.get("acquireTime") or ""),
            renewed=str(self.spec.get("renewTime") or ""),
            transitions=int(self.spec.get("leaseTransitions") or 0),
            resource_version=str(self.version),
        )

    def write(self, spec: dict[str, Any]) -> None:
        """Another replica's write (or ours, through the calls below)."""
        self.spec = {**(self.spec or {}), **spec}
        self.version += 1

    async def _call(self) -> None:
        self.calls += 1
        if self.hang:
            await asyncio.Event().wait()
        if self.fail:
            raise OSError("connection refused")

    async def read(self) -> LeaseRecord | None:
        await self._call()
        return self.record()

    async def create(self, spec: dict[str, Any]) -> None:
        await self._call()
        assert self.spec is None
        self.write(spec)

    async def update(self, spec: dict[str, Any], resource_version: str) -> None:
        await self._call()
        if resource_version != str(self.version):
            raise OSError("409 Conflict")
        self.write(spec)


OTHER_SPEC = {
    "holderIdentity": "other",
    "leaseDurationSeconds": 15,
    # the holder's clock is far behind ours: by its timestamp the lease expired long ago
    "renewTime": "2000-01-01T00:00:00.000000Z",
}


def _election(lease: FakeLease, clock: FakeClock, me: str = "me") -> LeaderElection:
    return LeaderElection(lease, me, Timing(), clock=clock, sleep=clock.sleep)


def _start(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    return asyncio.ensure_future(work)


def test_request_timeout_is_shorter_than_the_renew_deadline_shorter_than_the_lease() -> None:
    t = Timing()
    assert t.request_timeout < t.renew_deadline < t.duration
    assert t.retry < t.renew_deadline
    with pytest.raises(ValueError):
        Timing(request_timeout=10, renew_deadline=10)
    with pytest.raises(ValueError):
        Timing(duration=10, renew_deadline=10)


async def test_standby_waits_a_lease_duration_from_its_own_sight_not_the_holders_renew_time() -> None:
    clock, lease = FakeClock(), FakeLease(dict(OTHER_SPEC))
    standby = _election(lease, clock)
    assert not await standby.try_acquire()  # renewTime is 26 years old, but the record is new to us
    assert standby.other == "other"
    clock.now = 14.9
    lease.write({"renewTime": "2000-01-01T00:00:10.000000Z"})  # the holder renews at 14.9 (our clock)
    assert not await standby.try_acquire()
    clock.now = 29.8
    assert not await standby.try_acquire()  # 14.9 s since the change was seen
    clock.now = 30.0
    assert await standby.try_acquire()
    assert lease.spec is not None and lease.spec["holderIdentity"] == "me"
    assert lease.spec["leaseTransitions"] == 1
    assert standby.held()


async def test_acquire_stands_by_until_the_lease_expires_by_its_own_clock() -> None:
    clock, lease = FakeClock(), FakeLease(dict(OTHER_SPEC))
    standby = _election(lease, clock)
    acquiring = _start(standby.acquire())
    await clock.run(acquiring, until=60)
    assert acquiring.done()
    assert 15 <= clock.now <= 15 + Timing().retry


async def test_a_released_or_missing_lease_is_taken_at_once() -> None:
    clock = FakeClock()
    missing = FakeLease()
    assert await _election(missing, clock).try_acquire()
    released = FakeLease({**OTHER_SPEC, "holderIdentity": None})
    assert await _election(released, clock).try_acquire()


async def _leading(lease: FakeLease, clock: FakeClock) -> LeaderElection:
    leader = _election(lease, clock)
    assert await leader.try_acquire()
    return leader


async def test_leader_steps_down_within_the_renew_deadline_when_renewals_fail() -> None:
    clock, lease = FakeClock(), FakeLease()
    leader = await _leading(lease, clock)
    keeping = _start(leader.keep())
    await clock.run(keeping, until=7)
    assert not keeping.done() and leader.held()  # renewals succeed meanwhile
    renewed = leader.renewed_at
    assert renewed is not None and renewed > 0
    lease.fail = True
    await clock.run(keeping, until=renewed + 9.99)
    assert not keeping.done() and leader.held()
    await clock.run(keeping, until=100)
    assert keeping.done()
    assert clock.now <= renewed + Timing().renew_deadline
    assert not leader.held()


async def test_leader_steps_down_within_the_renew_deadline_when_a_renewal_hangs() -> None:
    clock, lease = FakeClock(), FakeLease()
    leader = await _leading(lease, clock)
    lease.hang = True
    keeping = _start(leader.keep())
    await clock.run(keeping, until=100)
    assert keeping.done()
    assert clock.now <= Timing().renew_deadline < Timing().duration
    assert not leader.held()
    assert lease.calls >= 2  # the hanging attempt was abandoned after the request timeout, retried


async def test_held_turns_false_at_the_deadline_even_before_keep_notices() -> None:
    clock, lease = FakeClock(), FakeLease()
    leader = await _leading(lease, clock)
    clock.now = Timing().renew_deadline - 0.01
    assert leader.held()
    clock.now = Timing().renew_deadline
    assert not leader.held()


async def test_a_hanging_attempt_is_abandoned_after_the_request_timeout() -> None:
    clock, lease = FakeClock(), FakeLease()
    lease.hang = True
    standby = _election(lease, clock)
    attempt = _start(standby.try_acquire())
    await clock.run(attempt, until=100)
    assert attempt.done() and attempt.result() is False
    assert clock.now == Timing().request_timeout


async def test_keep_stops_at_once_when_another_replica_holds_the_lease() -> None:
    clock, lease = FakeClock(), FakeLease()
    leader = await _leading(lease, clock)
    lease.write({"holderIdentity": "other", "renewTime": "2026-01-01T00:00:00.000000Z"})
    keeping = _start(leader.keep())
    await clock.run(keeping, until=100)
    assert keeping.done()
    assert clock.now == Timing().retry  # the first renewal attempt saw it
    assert not leader.held()
    assert lease.spec is not None and lease.spec["holderIdentity"] == "other"


async def test_release_hands_the_lease_back_only_when_ours() -> None:
    clock, lease = FakeClock(), FakeLease()
    leader = await _leading(lease, clock)
    await leader.release()
    assert lease.spec is not None and lease.spec["holderIdentity"] is None
    assert not leader.held()
    lease.write({"holderIdentity": "other"})
    await leader.release()
    assert lease.spec["holderIdentity"] == "other"
