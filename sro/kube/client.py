"""One way to get a Kubernetes client, in-cluster or from a kubeconfig (what went wrong with the API
is said by `sro.kube.errors`).

Why lightkube: typed models for every core resource, an asyncio client and a sync one with the same
API, server-side apply built in (`client.apply(obj, field_manager=...)`), and a small dependency tree
that keeps the node agents' memory low. kopf (the operator) brings its own API access.

Why `KubeConfigError` is a click error: every caller is a command, and a missing or malformed
kubeconfig is the user's input to fix, so a command that lets it through still ends in one line
(`Error: kubeconfig ...: no such file; give --kubeconfig ...`, exit 1), never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import httpx
import yaml
from lightkube import AsyncClient, Client
from lightkube.config import client_adapter as adapter
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ConfigError

from sro.api.names import FIELD_MANAGER
from sro.api.yamltext import yaml_error
from sro.kube.errors import HINT, one_line
from sro.kube.http11 import Http11Transport

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
HttpClient = httpx.AsyncClient  # what the reflectors (`async_http`) and node patches take
AsyncApi = AsyncClient  # the operator's API client (`async_client`), for code that only passes it on


class KubeConfigError(click.ClickException):
    """No usable kubeconfig; the message names the file, what is wrong with it and what to do."""


def kube_config(kubeconfig: str | os.PathLike[str] | None = None) -> KubeConfig:
    """The explicit kubeconfig, else $KUBECONFIG, else the pod's service account, else ~/.kube/config."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and IN_CLUSTER_TOKEN.exists():
        try:
            return KubeConfig.from_service_account()
        except Exception as e:
            raise KubeConfigError(f"the pod's service account: {one_line(e)}") from e
    where = Path(path) if path else Path.home() / ".kube" / "config"
    if not where.exists():
        if path:
            raise KubeConfigError(f"kubeconfig {where}: no such file; {HINT}")
        raise KubeConfigError(f"no kubeconfig: $KUBECONFIG is not set, not in a pod, no {where}; {HINT}")
    try:
        return KubeConfig.from_file(str(where))
    except OSError as e:
        raise KubeConfigError(f"kubeconfig {where}: cannot read: {e.strerror}; {HINT}") from e
    except yaml.YAMLError as e:
        raise KubeConfigError(f"kubeconfig {where}: not YAML ({yaml_error(e)}); {HINT}") from e
    except ConfigError as e:
        raise KubeConfigError(f"kubeconfig {where}: {e}; {HINT}") from e
    except Exception as e:  # lightkube reads the document without checking its shape
        raise KubeConfigError(
            f"kubeconfig {where}: not a kubeconfig (a mapping of clusters, users and contexts "
            f"expected; {type(e).__name__}: {e}); {HINT}"
        ) from e


def _identify(http: httpx.Client | httpx.AsyncClient, user_agent: str | None) -> None:
    """Send `user_agent` with every request (the API server's audit log names the writer by it);
    None keeps the library's own. The field manager is not touched: see `sro.operator.identity`."""
    if user_agent:
        http.headers["User-Agent"] = user_agent


def sync_client(
    kubeconfig: str | os.PathLike[str] | None = None, timeout: float = 30, user_agent: str | None = None
) -> Client:
    config = kube_config(kubeconfig)
    try:
        client = Client(config=config, field_manager=FIELD_MANAGER, timeout=httpx.Timeout(timeout))
    except (ConfigError, OSError, ValueError) as e:  # no such context, a certificate file missing
        raise KubeConfigError(f"kubeconfig {config.fname or 'in-cluster'}: {one_line(e)}; {HINT}") from e
    _identify(client._client._client, user_agent)
    return client


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def lean_transport(
    kubeconfig: str | os.PathLike[str] | None = None, connections: int = 32
) -> Http11Transport | None:
    """A `sro.kube.http11` transport to the same API server, with the same TLS trust and client
    certificate, for clients that send many small requests (the operator's); None where a proxy is
    configured (that transport speaks to the server directly) or there is no current context. The
    client over it still authenticates (tokens, exec plugins) as lightkube's would."""
    if any(os.environ.get(v) for v in PROXY_VARIABLES):
        return None
    single = kube_config(kubeconfig).get()
    if single is None or single.user is None:
        return None
    server = single.cluster.server
    tls = (
        adapter.verify_cluster(single.cluster, single.user, single.abs_file)
        if server.startswith("https:")
        else None
    )
    return Http11Transport(server, tls, connections)


def async_client(
    kubeconfig: str | os.PathLike[str] | None = None,
    timeout: float = 30,
    user_agent: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> AsyncClient:
    config = kube_config(kubeconfig)
    try:
        client = AsyncClient(
            config=config, field_manager=FIELD_MANAGER, timeout=httpx.Timeout(timeout), transport=transport
        )
    except (ConfigError, OSError, ValueError) as e:
        raise KubeConfigError(f"kubeconfig {config.fname or 'in-cluster'}: {one_line(e)}; {HINT}") from e
    _identify(lightkube_http(client), user_agent)
    return client


def async_http(
    kubeconfig: str | os.PathLike[str] | None = None, timeout: float = 30, user_agent: str | None = None
) -> httpx.AsyncClient:
    """A bare HTTP client for the same API server and credentials as `async_client`: for the watches
    that keep the operator's cache (`sro.kube.reflector`), which read JSON without lightkube's models."""
    config = kube_config(kubeconfig)
    try:
        single = config.get()
        if single is None:
            raise ConfigError("no current context")
        http = adapter.AsyncClient(single, adapter.ConnectionParams(timeout=httpx.Timeout(timeout)))
    except (ConfigError, OSError, ValueError) as e:
        raise KubeConfigError(f"kubeconfig {config.fname or 'in-cluster'}: {one_line(e)}; {HINT}") from e
    _identify(http, user_agent)
    return http


def request_kind(method: str, path: str, watch: bool) -> tuple[str, str]:
    """(verb, resource) of an API request, as the API server's own metrics name them: LIST and WATCH
    for collections, the plural with its subresource (`pods/eviction`, `nodes/status`)."""
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # /api/v1/... or /apis/GROUP/VERSION/...
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    resource = "/".join([parts[0], *parts[2:3]]) if parts else ""
    verb = method.upper()
    if verb == "GET":
        verb = "WATCH" if watch else ("LIST" if len(parts) == 1 else "GET")
    return verb, resource


def count_requests(http: httpx.AsyncClient, record: Callable[[str, str], None]) -> None:
    """Call `record(verb, resource)` for every request `http` sends (the operator's API request metric)."""

    async def hook(request: httpx.Request) -> None:
        record(
            *request_kind(request.method, request.url.path, request.url.params.get("watch") in ("1", "true"))
        )

    http.event_hooks = {**http.event_hooks, "request": [*http.event_hooks.get("request", []), hook]}


def lightkube_http(client: AsyncClient) -> httpx.AsyncClient:
    """The httpx client under a lightkube client (lightkube has no public way to add a request hook)."""
    http = client._client._client
    assert isinstance(http, httpx.AsyncClient)
    return http


def as_dict(obj: Any) -> dict[str, Any]:
    """A lightkube model (or a dict already) as the plain JSON dict of the object."""
    return dict(obj.to_dict() if hasattr(obj, "to_dict") else obj)
