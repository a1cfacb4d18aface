"""A small HTTP/1.1 client on asyncio streams, for the node simulator's many small requests.

Why not httpx: playing 1,000 kubelets means ~100 Lease renewals a second plus a status patch per
pod, and httpx (httpcore 1.0's pool scans every connection and queued request on each request and
checks each connection's socket) spent most of the simulator's CPU there — on this 2-core machine
it then fell behind, the Leases lapsed, the node lifecycle controller tainted hundreds of nodes
unreachable and the benchmark measured that spiral instead of the control plane. Here a fixed set
of keep-alive connections each serve one request at a time from a shared queue: no per-request
bookkeeping beyond writing the request and reading its response (Content-Length or chunked).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Failure = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)  # TimeoutError too
TIMEOUT = 30.0  # seconds for connecting, and for a response once its request is written


@dataclass(frozen=True)
class Response:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


async def read_response(reader: asyncio.StreamReader) -> tuple[Response, bool]:
    """One response off the stream, and whether the connection may serve another."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("the server closed the connection")
    status = int(status_line.split(None, 2)[1])
    headers: dict[bytes, bytes] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        key, _, value = line.partition(b":")
        headers[key.strip().lower()] = value.strip()
    keep = headers.get(b"connection", b"").lower() != b"close"
    if b"content-length" in headers:
        body = await reader.readexactly(int(headers[b"content-length"]))
    elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        parts = []
        while size := int((await reader.readline()).split(b";", 1)[0], 16):
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)  # the CRLF after each chunk
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
            pass
        body = b"".join(parts)
    else:  # delimited by the connection's end
        body, keep = await reader.read(), False
    return Response(status, body), keep


class Pool:
    """`size` keep-alive connections to one server, each serving requests from a shared queue."""

    def __init__(self, url: str, tls: ssl.SSLContext, headers: dict[str, str], size: int) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "localhost", parts.port or 443
        self.tls = tls
        self.head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": parts.netloc, **headers}.items())
        self.queue: asyncio.Queue[tuple[bytes, asyncio.Future[Response]]] = asyncio.Queue()
        self.workers = [asyncio.ensure_future(self._serve()) for _ in range(size)]

    async def request(self, method: str, path: str, body: bytes = b"", ctype: str = "") -> Response:
        head = f"{method} {path} HTTP/1.1\r\n{self.head}"
        if body or method in ("POST", "PUT", "PATCH"):
            head += f"Content-Type: {ctype or 'application/json'}\r\nContent-Length: {len(body)}\r\n"
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        await self.queue.put(((head + "\r\n").encode() + body, future))
        return await future

    async def _serve(self) -> None:
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while True:
            raw, future = await self.queue.get()
            for attempt in (1, 2):  # a kept-alive connection the server closed meanwhile: once more
                try:
                    if conn is None:
                        conn = await asyncio.wait_for(
                            asyncio.open_connection(self.host, self.port, ssl=self.tls), TIMEOUT
                        )
                    conn[1].write(raw)
                    response, keep = await asyncio.wait_for(read_response(conn[0]), TIMEOUT)
                except Failure as e:
                    _close(conn)
                    conn = None
                    if attempt == 2 and not future.done():
                        future.set_exception(e)
                    continue
                if not keep:
                    _close(conn)
                    conn = None
                if not future.done():
                    future.set_result(response)
                break

    async def aclose(self) -> None:
        for w in self.workers:
            w.cancel()
        for w in self.workers:
            with contextlib.suppress(asyncio.CancelledError):
                await w


def _close(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None) -> None:
    if conn is not None:
        conn[1].close()
