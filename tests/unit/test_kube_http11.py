"""sro.kube.http11: the response framings the API server uses, off a fed stream; the httpx transport
against a real HTTP/1.1 server on a local socket (headers and body through, keep-alive, a dropped
connection opened again, a dead server as an httpx error)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from sro.kube import http11


def _read(raw: bytes) -> tuple[http11.Response, bool]:
    async def go() -> tuple[http11.Response, bool]:
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        return await http11.read_response(reader)

    return asyncio.run(go())


def test_a_content_length_body_is_read_exactly_and_the_connection_kept() -> None:
    resp, keep = _read(b'HTTP/1.1 201 Created\r\nContent-Length: 7\r\n\r\n{"a":1}HTTP/1.1 200')
    assert (resp.status_code, resp.json(), keep) == (201, {"a": 1}, True)


def test_a_chunked_body_is_joined_and_its_trailers_skipped() -> None:
    raw = (
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"b"\r\n3;x=y\r\n:2}\r\n0\r\nT: 1\r\n\r\n'
    )
    resp, keep = _read(raw)
    assert (resp.json(), keep) == ({"b": 2}, True)


def test_connection_close_or_no_framing_ends_the_connection() -> None:
    assert _read(b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno")[1] is False
    resp, keep = _read(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
    assert (resp.text, keep) == ("until the end", False)


def test_a_closed_connection_or_a_cut_body_is_a_failure_the_pool_retries() -> None:
    with pytest.raises(http11.Failure):
        _read(b"")
    with pytest.raises(http11.Failure):
        _read(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")


class Server:
    """An HTTP/1.1 server on 127.0.0.1: answers each request with its method, path, headers and body
    as JSON; with `close_after`, a connection is closed unanswered after that many requests."""

    def __init__(self, close_after: int = 0) -> None:
        self.close_after = close_after
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()
        await asyncio.sleep(0.05)  # the handlers see their connections' end and close them

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        while line := await reader.readline():
            method, path, _ = line.decode().split(" ", 2)
            headers = {}
            while (h := await reader.readline()) not in (b"\r\n", b""):
                k, _, v = h.decode().partition(":")
                headers[k.strip().lower()] = v.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if self.close_after and served == self.close_after:
                break
            served += 1
            data = json.dumps(
                {"method": method, "path": path, "headers": headers, "body": body.decode()}
            ).encode()
            status = "404 Not Found" if path.startswith("/missing") else "200 OK"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            )
            writer.write(head.encode() + data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()


def _client(url: str, size: int = 2) -> httpx.AsyncClient:
    transport = http11.Http11Transport(url, None, size)
    return httpx.AsyncClient(base_url=url, transport=transport, headers={"Authorization": "Bearer t"})


def test_the_transport_sends_headers_and_body_and_keeps_its_connections() -> None:
    async def go() -> None:
        server = Server()
        client = _client(await server.start())
        ctype = {"Content-Type": "application/merge-patch+json"}
        answers = await asyncio.gather(
            *(client.patch(f"/api/v1/nodes/n{i}?x=1", content=b'{"a":1}', headers=ctype) for i in range(10))
        )
        for i, resp in enumerate(answers):
            got = resp.json()
            assert (resp.status_code, got["method"], got["body"]) == (200, "PATCH", '{"a":1}')
            assert got["path"] == f"/api/v1/nodes/n{i}?x=1"
            assert got["headers"]["authorization"] == "Bearer t"
            assert got["headers"]["content-type"] == "application/merge-patch+json"
            assert "accept-encoding" not in got["headers"]  # whole bodies, never compressed
        missing = await client.get("/missing")
        assert missing.status_code == 404
        with pytest.raises(httpx.HTTPStatusError):
            missing.raise_for_status()
        assert server.connections == 2  # the pool's two connections, kept alive for all eleven
        await client.aclose()
        await server.stop()

    asyncio.run(go())


def test_a_connection_the_server_closed_is_opened_again_and_a_dead_server_is_an_httpx_error() -> None:
    async def go() -> None:
        server = Server(close_after=1)
        client = _client(await server.start(), size=1)
        assert (await client.get("/a")).json()["path"] == "/a"
        assert (await client.get("/b")).json()["path"] == "/b"  # its connection was closed: a new one
        assert server.connections == 2
        await server.stop()
        with pytest.raises(httpx.TransportError):
            await client.get("/c")
        await client.aclose()

    asyncio.run(go())


def test_lightkube_takes_the_transport_as_it_is() -> None:
    """lightkube deep-copies its connection parameters (`asdict`): the transport, with its TLS
    context and connections, must come through as the same object."""
    import copy
    import ssl

    transport = http11.Http11Transport("https://127.0.0.1:6443", ssl.create_default_context(), 2)
    assert copy.deepcopy({"transport": transport})["transport"] is transport
