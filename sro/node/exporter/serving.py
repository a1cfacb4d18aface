"""The HTTP side: `/metrics` hands out the current snapshot's bytes, `/healthz` says if collection runs.

Why the standard library's threading server: a scrape costs one dictionary-free copy of bytes that
were rendered when the collection ended, so there is nothing for a framework to speed up, and the
node image stays small. Each request runs on its own thread, so a slow client never holds up
another; nothing here touches a device, the kubelet or the API server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sro.node.exporter.exposition import CONTENT_TYPE

log = logging.getLogger(__name__)

INDEX = b'<html><head><title>sro exporter</title></head><body><a href="/metrics">Metrics</a></body></html>\n'


def parse_address(address: str, default_port: int = 9400) -> tuple[str, int]:
    """':9400' -> ('', 9400) (every interface); 'host:port'; '[::1]:9400'. ValueError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep:
        host, port = address, str(default_port)
    host = host.strip("[]")
    if not port.isdigit() or not 0 <= int(port) < 65536:  # 0: any free port (tests)
        raise ValueError(f"--address {address!r}: expected [HOST]:PORT, e.g. :9400")
    return host, int(port)


class MetricsServer:
    """Serves `body()` at /metrics; `healthy()` decides /healthz."""

    def __init__(
        self, address: tuple[str, int], body: Callable[[], bytes], healthy: Callable[[], bool] = lambda: True
    ) -> None:
        def handler_factory(*args: object) -> BaseHTTPRequestHandler:
            return _Handler(body, healthy, *args)

        self.httpd = ThreadingHTTPServer(address, handler_factory)  # type: ignore[arg-type]
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics-http", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection
    server_version = "sro-exporter"

    def __init__(
        self, body: Callable[[], bytes], healthy: Callable[[], bool], *args: object, **kwargs: object
    ) -> None:
        self._body, self._healthy = body, healthy
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # handles the request

    def _send(self, code: int, content_type: str, payload: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, CONTENT_TYPE, self._body())
        elif path == "/healthz":
            ok = self._healthy()
            self._send(200 if ok else 503, "text/plain", b"ok\n" if ok else b"collection stalled\n")
        elif path == "/":
            self._send(200, "text/html", INDEX)
        else:
            self._send(404, "text/plain", b"not found\n")

    do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)
