"""Each operator replica names itself in every request it sends (lightkube's client, the bare httpx
one, kopf's session), with the name it holds the Lease under; the field manager stays `sro`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import kopf
import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Node

from sro import __version__
from sro.api.names import FIELD_MANAGER
from sro.kube.client import async_client, async_http, sync_client
from sro.local.audit import replica_of
from sro.operator.identity import IdentifiedConnection, identified, replica_name, user_agent

REPLICA = "sro-operator-6b7f9c-x2x9z"


def test_the_replica_is_the_pods_name_else_host_and_pid() -> None:
    assert replica_name({"POD_NAME": REPLICA}) == REPLICA
    import os
    import socket

    assert replica_name({}) == f"{socket.gethostname()}-{os.getpid()}"


def test_the_user_agent_names_version_and_replica_as_the_audit_reader_parses_it() -> None:
    agent = user_agent(REPLICA)
    assert agent == f"sro-operator/{__version__} ({REPLICA})"
    assert replica_of(agent) == REPLICA


class _Seen:
    agents: ClassVar[list[str]] = []


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        _Seen.agents.append(self.headers.get("User-Agent", ""))
        body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{httpd.server_address[1]}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
"""
    )
    _Seen.agents = []
    try:
        yield path
    finally:
        httpd.shutdown()
        httpd.server_close()


async def test_every_client_sends_the_replicas_user_agent(kubeconfig: Path) -> None:
    agent = user_agent(REPLICA)
    client = async_client(kubeconfig, user_agent=agent)
    with pytest.raises(ApiError):
        await client.get(Node, "vm")
    http = async_http(kubeconfig, user_agent=agent)
    async with http:
        await http.get("/api/v1/nodes/vm")
    sync = sync_client(kubeconfig, user_agent=agent)
    with pytest.raises(ApiError):
        sync.get(Node, "vm")
    assert _Seen.agents == [agent, agent, agent]
    # one field manager for all replicas: a take-over carries on the fields its predecessor applied
    assert client._client._field_manager == FIELD_MANAGER == sync._client._field_manager


async def test_without_a_user_agent_the_librarys_own_is_sent(kubeconfig: Path) -> None:
    http = async_http(kubeconfig)
    async with http:
        await http.get("/api/v1/nodes/vm")
    assert _Seen.agents and not _Seen.agents[0].startswith("sro-operator/")


async def test_kopfs_session_sends_it_too() -> None:
    from kopf._cogs.clients.auth import APIContext  # where kopf builds its session from a login

    info = kopf.ConnectionInfo(
        server="https://127.0.0.1:1", scheme="Bearer", token="t", default_namespace="ns"
    )
    wrapped = identified(info, user_agent(REPLICA))
    assert isinstance(wrapped, IdentifiedConnection)
    assert wrapped.token == "t" and wrapped.default_namespace == "ns"
    assert wrapped.as_http_headers() == {"Authorization": "Bearer t", "User-Agent": user_agent(REPLICA)}
    context = APIContext(wrapped)
    try:
        assert context.session.headers["User-Agent"] == user_agent(REPLICA)
    finally:
        await context.session.close()
    assert identified(None) is None
