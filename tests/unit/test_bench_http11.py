"""benchmarks.http11.read_response: the response framings the API server uses, off a fed stream."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import http11


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
