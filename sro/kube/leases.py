"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's leaderelection rules.

Why: kopf has no leader election of its own (its peering only pauses equal peers), and two operator
replicas reconciling the same SpecialResource would fight over labels and pods. A replica waits
until the Lease is free or expired, takes it (the write carries the resourceVersion it read, so two
candidates cannot both win), renews it every `retry` seconds, and stops leading as soon as it sees
another holder or has not renewed for `renew_deadline`. On a clean shutdown it releases the Lease
so the standby takes over at once instead of after `duration` seconds.

Why these rules (client-go's), so that two replicas never act at once:
- a standby judges expiry on its own monotonic clock, `duration` after it last saw the lease record
  change, never from the holder's `renewTime`: two machines' clocks disagree, an interval on one
  monotonic clock does not;
- the leader counts from when it *sent* its last successful renewal (which is before any standby
  can see it) and stops acting once `renew_deadline` passes without another, `duration -
  renew_deadline` seconds before any standby may take over;
- every attempt is bounded by `request_timeout` (< `renew_deadline`, and never past the deadline),
  so a hanging request cannot keep a leader past it;
- `held()` answers from the clock alone, so the operator checks it before each batch of writes and
  a pass that began while leading writes nothing once the lease may have lapsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from lightkube import ApiError, AsyncClient, codecs
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType

from sro.kube.errors import Errors, describe_error

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Timing:
    """client-go's defaults for a controller: 15 s lease, 10 s renew deadline, 2 s retry period."""

    duration: float = 15.0  # a standby takes over this long after it last saw the record change
    renew_deadline: float = 10.0  # the leader stops acting when it has not renewed for this long
    retry: float = 2.0  # between two attempts, acquiring or renewing
    request_timeout: float = 5.0  # one attempt (a read and a write) at most

    def __post_init__(self) -> None:
        if not (self.duration > self.renew_deadline > self.request_timeout > 0):
            raise ValueError("leader election: need duration > renew deadline > request timeout > 0")
        if not 0 < self.retry < self.renew_deadline:
            raise ValueError("leader election: need 0 < retry period < renew deadline")


@dataclass(frozen=True)
class LeaseRecord:
    """A Lease's spec as read. The times are compared as text only (a change is a sign of life) and
    never taken as times: they come from the holder's clock."""

    holder: str
    duration: int
    acquired: str = ""
    renewed: str = ""
    transitions: int = 0
    resource_version: str = ""

    @property
    def content(self) -> tuple[str, int, str, str, int]:
        return (self.holder, self.duration, self.acquired, self.renewed, self.transitions)


class LeaseApi(Protocol):
    """The three calls election makes; failures raise one of `sro.kube.errors.Errors`."""

    where: str

    async def read(self) -> LeaseRecord | None: ...
    async def create(self, spec: dict[str, Any]) -> None: ...
    async def update(self, spec: dict[str, Any], resource_version: str) -> None:
        """Merge `spec`, refused (409) unless the Lease still has `resource_version`."""


class KubeLease:
    """The Lease `namespace/name` through lightkube."""

    def __init__(self, client: AsyncClient, namespace: str, name: str) -> None:
        self.client, self.namespace, self.name = client, namespace, name
        self.where = f"{namespace}/{name}"

    async def read(self) -> LeaseRecord | None:
        try:
            lease: Any = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as e:
            if e.status.code == 404:
                return None
            raise
        doc = lease.to_dict()
        spec = doc.get("spec") or {}
        return LeaseRecord(
            holder=spec.get("holderIdentity") or "",
            duration=int(spec.get("leaseDurationSeconds") or 0),
            acquired=str(spec.get("acquireTime") or ""),
            renewed=str(spec.get("renewTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=doc["metadata"].get("resourceVersion", ""),
        )

    async def create(self, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        await self.client.create(codecs.from_dict(body))

    async def update(self, spec: dict[str, Any], resource_version: str) -> None:
        await self.client.patch(
            Lease,
            self.name,
            {"metadata": {"resourceVersion": resource_version}, "spec": spec},
            namespace=self.namespace,
            patch_type=PatchType.MERGE,
        )


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def run_until(work: Awaitable[T], rival: Awaitable[object]) -> asyncio.Future[T]:
    """Run `work` until it or `rival` finishes first; `work`'s future, done (its result or error to
    read) or cancelled when `rival` came first. `rival` is cancelled either way."""
    task = asyncio.ensure_future(work)
    other = asyncio.ensure_future(rival)
    try:
        await asyncio.wait({task, other}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        other.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return task


class LeaderElection:
    def __init__(
        self,
        lease: LeaseApi,
        identity: str,
        timing: Timing = Timing(),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.lease, self.identity, self.timing = lease, identity, timing
        self.clock, self.sleep = clock, sleep
        self.failure: str | None = None  # why the last attempt failed (None: it reached the API)
        self.other = ""  # who held the lease at the last attempt, when not us and not expired
        self.renewed_at: float | None = None  # our clock when our last successful write was sent
        self._seen: tuple[str, int, str, str, int] | None = None  # the record as last seen
        self._seen_at = 0.0  # our clock when we saw it change

    def held(self) -> bool:
        """True while this replica may act: its last renewal was sent less than the deadline ago."""
        return self.renewed_at is not None and self.clock() - self.renewed_at < self.timing.renew_deadline

    async def _bounded(self, work: Awaitable[T], timeout: float) -> T:
        """`work`'s result, or TimeoutError after `timeout` seconds of `self.sleep` (cancelling it)."""
        task = await run_until(work, self.sleep(timeout))
        if task.cancelled():
            raise TimeoutError(f"no answer within {timeout:g} s")
        return task.result()

    def _spec(self, record: LeaseRecord | None) -> dict[str, Any]:
        now = _micro(datetime.now(UTC))  # for people reading the Lease; no replica trusts it
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.timing.duration),
            "renewTime": now,
        }
        if record is None or record.holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = (record.transitions + 1) if record and record.holder else 0
        return spec

    async def _attempt(self, started: float) -> bool:
        record = await self.lease.read()
        now = self.clock()
        if record is None:
            await self.lease.create(self._spec(None))
            self.renewed_at = started
            return True
        if record.content != self._seen:
            self._seen, self._seen_at = record.content, now
        duration = record.duration or self.timing.duration
        if record.holder and record.holder != self.identity and now < self._seen_at + duration:
            self.other = record.holder
            return False
        await self.lease.update(self._spec(record), record.resource_version)
        self.renewed_at = started
        return True

    async def try_acquire(self) -> bool:
        """One attempt to take or renew the Lease; True when we hold it afterwards."""
        started = self.clock()
        budget = self.timing.request_timeout
        if self.renewed_at is not None:  # leading: never wait past the renew deadline
            budget = min(budget, self.renewed_at + self.timing.renew_deadline - started)
        self.other = ""
        try:
            if budget <= 0:
                raise TimeoutError("the renew deadline has passed")
            ok = await self._bounded(self._attempt(started), budget)
        except (*Errors, TimeoutError) as e:
            self._failed(describe_error(e) or f"{type(e).__name__}: {e}")
            return False
        self._failed(None)
        return ok

    def _failed(self, why: str | None) -> None:
        """Say once why attempts fail (and again when the reason changes), not every few seconds."""
        if why is not None and why != self.failure:
            log.warning("leader election: cannot reach the lease (retrying): %s", why)
        elif why is not None:
            log.debug("leader election: attempt failed: %s", why)
        self.failure = why

    async def acquire(self) -> None:
        """Wait until this replica leads."""
        waited = False
        while not await self.try_acquire():
            if not waited and self.other:
                log.warning("standing by: %s holds lease %s", self.other, self.lease.where)
                waited = True
            await self.sleep(self.timing.retry)
        log.warning("leading: holding lease %s as %s", self.lease.where, self.identity)

    async def keep(self) -> None:
        """Renew every `retry` seconds; return (leadership lost: stop acting) as soon as another
        replica holds the lease or no renewal has succeeded for `renew_deadline`."""
        while True:
            left = (self.renewed_at or 0.0) + self.timing.renew_deadline - self.clock()
            await self.sleep(max(0.0, min(self.timing.retry, left)))
            if await self.try_acquire():
                continue
            if self.other:
                self.renewed_at = None
                log.error("lost lease %s: %s holds it; stopping", self.lease.where, self.other)
                return
            if not self.held():
                self.renewed_at = None
                log.error(
                    "lost lease %s: not renewed for %g s; stopping so that the other replica leads",
                    self.lease.where,
                    self.timing.renew_deadline,
                )
                return

    async def release(self) -> None:
        """Hand the lease back (after this replica stopped acting) so a standby takes it at once."""
        try:
            record = await self._bounded(self.lease.read(), self.timing.request_timeout)
            if record is not None and record.holder == self.identity:
                await self._bounded(
                    self.lease.update({"holderIdentity": None}, record.resource_version),
                    self.timing.request_timeout,
                )
                log.warning("released lease %s", self.lease.where)
        except (*Errors, TimeoutError) as e:
            log.info("could not release the lease: %s", e)
        self.renewed_at = None
