"""The hollow nodes' failure rules over HTTP: what an operand's probe on a hollow node gets.

Why a server: a hollow kubelet's fake runtime runs every container "successfully" and passes every
exec probe, so the only thing that can make a state fail on one hollow node and not another is an
`httpGet` probe. Each hollow node resolves `PROBE_HOST` to a loopback address of its own, so the
address a connection arrived on names the node; the answer comes from the config's failure rules
(`hollowconfig.answer`), re-read when the file changes, so rules can change while nodes run.
Only loopback peers are answered. Runs as a daemon of `sro local up --hollow-nodes`.
"""

from __future__ import annotations

import http.server
import ipaddress
import threading
from pathlib import Path

from sro.local.hollowconfig import HollowConfig, HollowConfigError, answer, node_index, parse_config


class Rules:
    """The config file, re-read when its modification time changes (a bad edit keeps the old rules)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime = -1.0
        self._config = HollowConfig()
        self.current()

    def current(self) -> HollowConfig:
        with self._lock:
            try:
                mtime = self.path.stat().st_mtime
                if mtime != self._mtime:
                    self._config = parse_config(self.path.read_text())
                    self._mtime = mtime
            except (OSError, HollowConfigError):
                pass
            return self._config


def make_server(rules: Rules, port: int, bind: str = "0.0.0.0") -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            peer = self.client_address[0]
            config = rules.current()
            if not ipaddress.ip_address(peer).is_loopback:
                code, body = 403, "loopback only\n"
            else:
                i = node_index(self.connection.getsockname()[0])
                code, body = answer(config, None if i is None else config.node_name(i), self.path)
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every second per pod: the answers are the log

    server = http.server.ThreadingHTTPServer((bind, port), Handler)
    server.daemon_threads = True
    return server


def serve(config: Path, port: int) -> None:
    server = make_server(Rules(config), port)
    try:
        server.serve_forever()
    finally:
        server.server_close()
