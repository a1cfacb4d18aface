"""The only code of `sro report` that talks to Prometheus: its HTTP API, `query` and `query_range`.

Why urllib: two GET requests need no client library, and `sro status` imports this on every run.
Every failure becomes a PrometheusError whose message says what was asked of whom and what came back
(unreachable, an HTTP status, Prometheus's own error, an answer that is not Prometheus's), so the
command can print it as it is, with no traceback.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_URL = "http://127.0.0.1:9090"
URL_ENV = "PROMETHEUS_URL"


class PrometheusError(RuntimeError):
    """Prometheus could not be asked, or did not answer the query; the message says which."""


def default_url() -> str:
    """`$PROMETHEUS_URL`, or Prometheus's own default on this machine."""
    return os.environ.get(URL_ENV) or DEFAULT_URL


def check_url(url: str) -> str:
    """The base URL without a trailing slash; refuses what is not http(s)://host[:port][/path]."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PrometheusError(f"{url!r} is not a Prometheus URL (e.g. http://prometheus.example:9090)")
    return url.rstrip("/")


@dataclass(frozen=True)
class Prometheus:
    """A Prometheus (or anything with its HTTP API: Thanos, Mimir, VictoriaMetrics) at `url`."""

    url: str
    timeout: float = 30.0
    token: str = ""  # a bearer token, for a Prometheus behind an authenticating proxy

    def query(self, promql: str, at: float | None = None) -> Any:
        params = {"query": promql} if at is None else {"query": promql, "time": f"{at:.3f}"}
        return self._get("query", params, promql)

    def query_range(self, promql: str, start: float, end: float, step: float) -> Any:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return self._get("query_range", params, promql)

    def alerts(self) -> Any:
        """The active alerts (pending and firing: labels, annotations, state, activeAt), as Prometheus's
        alerts page shows them: the demo prints one as it fires."""
        return self._get("alerts", {}, "the active alerts")

    def _get(self, endpoint: str, params: Mapping[str, str], promql: str) -> Any:
        url = f"{check_url(self.url)}/api/v1/{endpoint}"
        request = urllib.request.Request(f"{url}?{urllib.parse.urlencode(params)}")
        request.add_header("Accept", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        asked = f"{url} (query: {promql})"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as e:
            # Prometheus answers a bad query with 400/422 and its JSON error; a proxy with its own page.
            detail = _api_error(e.read()) or e.reason
            raise PrometheusError(f"{asked} answered HTTP {e.code}: {detail}") from None
        except urllib.error.URLError as e:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {e.reason}") from None
        except (TimeoutError, OSError) as e:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {e}") from None
        try:
            answer = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{asked} answered something that is not JSON: is it Prometheus?") from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            detail = _api_error(body) or "no status"
            raise PrometheusError(f"{asked} failed: {detail}")
        return answer.get("data")


def _api_error(body: bytes) -> str:
    try:
        answer = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(answer, dict) or "error" not in answer:
        return ""
    return f"{answer.get('errorType', 'error')}: {answer['error']}"
