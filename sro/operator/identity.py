"""Which operator replica wrote: one name per process, for its Lease and in every request it sends.

Why: with two replicas, "only the leader acts" must be checkable from outside. The API server's audit
log records each write's user agent, so every client the operator makes (lightkube's, the bare httpx
one of the cache and node patches, kopf's aiohttp session) says `sro-operator/<version> (<replica>)`,
and the replica holds the Lease `sro-operator` under the same name (holderIdentity): a lease term
maps to the user agent of the replica that wrote in it (`sro.local.audit.writers_per_term`).

The field manager stays `sro` for every replica: server-side apply gives each field manager its own
fields, so replicas with their own managers would conflict on (or, forcing, steal) the fields the
previous leader applied, and a take-over would fight its predecessor's ownership instead of simply
carrying on.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping

import kopf

from sro import __version__


def replica_name(env: Mapping[str, str] = os.environ) -> str:
    """The pod's name (POD_NAME, from the downward API); outside a pod the host name and pid, so
    that two replicas started from one shell are two holders, not one."""
    return env.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def user_agent(replica: str | None = None) -> str:
    """`sro-operator/<version> (<replica>)`: what the audit log shows as the writer."""
    return f"sro-operator/{__version__} ({replica or replica_name()})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class IdentifiedConnection(kopf.ConnectionInfo):
    """kopf's connection with our User-Agent: kopf keeps a header its session was given and only
    adds its own (`kopf/<version>`) where there is none."""

    user_agent: str = ""

    def as_http_headers(self) -> dict[str, str]:
        headers = super().as_http_headers()
        if self.user_agent:
            headers["User-Agent"] = self.user_agent
        return headers


def identified(info: kopf.ConnectionInfo | None, agent: str | None = None) -> kopf.ConnectionInfo | None:
    """`info` (what a kopf login handler found) sending this replica's user agent."""
    if info is None:
        return None
    fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(info) if f.init}
    fields["user_agent"] = agent or user_agent()
    return IdentifiedConnection(**fields)
