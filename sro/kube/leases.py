"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it.

Why: kopf has no leader election of its own (its peering only pauses equal peers), and two operator
replicas reconciling the same SpecialResource would fight over labels and pods. A replica waits
until the Lease is free or expired, takes it (the write carries the resourceVersion it read, so two
candidates cannot both win), renews it every `renew` seconds, and stops leading as soon as a renewal
fails or someone else holds it. On a clean shutdown it releases the Lease so the standby takes over
at once instead of after `duration` seconds.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lightkube import ApiError, AsyncClient, codecs
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType

from sro.kube.errors import Errors, describe_error

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


@dataclass(frozen=True)
class LeaseView:
    holder: str
    renewed: datetime | None
    duration: int
    transitions: int
    resource_version: str

    def free_for(self, me: str, now: datetime) -> bool:
        if not self.holder or self.holder == me:
            return True
        return self.renewed is None or now > self.renewed + timedelta(seconds=self.duration)


class LeaderElection:
    def __init__(
        self,
        client: AsyncClient,
        namespace: str,
        name: str,
        identity: str,
        duration: int = 15,
        renew: float = 5.0,
    ) -> None:
        self.client, self.namespace, self.name, self.identity = client, namespace, name, identity
        self.duration, self.renew = duration, renew
        self.failure: str | None = None  # why the last attempt failed (None: it reached the API)

    async def _read(self) -> LeaseView | None:
        try:
            lease: Any = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as e:
            if e.status.code == 404:
                return None
            raise
        doc = lease.to_dict()
        spec = doc.get("spec") or {}
        return LeaseView(
            holder=spec.get("holderIdentity") or "",
            renewed=_parse(spec.get("renewTime")),
            duration=int(spec.get("leaseDurationSeconds") or self.duration),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=doc["metadata"].get("resourceVersion", ""),
        )

    def _spec(self, view: LeaseView | None, now: datetime) -> dict[str, Any]:
        taking = view is None or view.holder != self.identity
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "renewTime": _micro(now),
        }
        if taking:
            spec["acquireTime"] = _micro(now)
            spec["leaseTransitions"] = (view.transitions + 1) if view and view.holder else 0
        return spec

    async def try_acquire(self) -> bool:
        """One attempt to take or renew the Lease; True when we hold it afterwards."""
        now = _now()
        try:
            view = await self._read()
            self._failed(None)
            if view is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(None, now),
                }
                await self.client.create(codecs.from_dict(body))
                return True
            if not view.free_for(self.identity, now):
                return False
            await self.client.patch(
                Lease,
                self.name,
                {"metadata": {"resourceVersion": view.resource_version}, "spec": self._spec(view, now)},
                namespace=self.namespace,
                patch_type=PatchType.MERGE,
            )
            return True
        except Errors as e:
            self._failed(describe_error(e) or f"{type(e).__name__}: {e}")
            return False

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
            if not waited and self.failure is None:
                log.warning("standing by: another replica holds lease %s/%s", self.namespace, self.name)
                waited = True
            await asyncio.sleep(self.renew / 2)
        log.warning("leading: holding lease %s/%s as %s", self.namespace, self.name, self.identity)

    async def keep(self) -> None:
        """Renew until a renewal fails for longer than the lease lasts; then return (leadership lost)."""
        last_ok = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(self.renew)
            if await self.try_acquire():
                last_ok = asyncio.get_running_loop().time()
            elif asyncio.get_running_loop().time() - last_ok > self.duration - self.renew:
                log.error(
                    "lost lease %s/%s: stopping so that the other replica leads", self.namespace, self.name
                )
                return

    async def release(self) -> None:
        try:
            view = await self._read()
            if view is not None and view.holder == self.identity:
                await self.client.patch(
                    Lease,
                    self.name,
                    {
                        "metadata": {"resourceVersion": view.resource_version},
                        "spec": {"holderIdentity": None},
                    },
                    namespace=self.namespace,
                    patch_type=PatchType.MERGE,
                )
                log.warning("released lease %s/%s", self.namespace, self.name)
        except Errors as e:
            log.info("could not release the lease: %s", e)
