"""Reading one Node's labels and resources (read-only): what the exporter reports about its node.

Why a `get` of the Node: kubelet 1.20's pod-resources API has only `List` (`GetAllocatableResources`
arrived in 1.21), so allocatable devices come from the Node's status, and the stack's state from the
`sro.dev/<sr>.<state>=ready` labels the operator writes there. One `get` per collection needs only
`get` on `nodes` (the exporter's ClusterRole), never list or watch.

Why not the lightkube client (`sro.kube.client`) here: the exporter is a node agent with a 64 MiB
budget on every GPU node, and lightkube with httpx, h2 and its models costs about 15 MiB of resident
memory for what is one read-only HTTPS GET every 30 seconds. So this module does that GET with the
standard library (already loaded), finding the API server and credentials the way
`sro.kube.client.kube_config` does: an explicit kubeconfig, else $KUBECONFIG, else the pod's service
account (its token re-read on every call: bound tokens rotate), else ~/.kube/config. Kubeconfigs with
a token, a token file or a client certificate work; exec and auth-provider plugins are refused with
a message saying so.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class NodeStatus:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)  # resource -> quantity, as the API has it
    capacity: Mapping[str, str] = field(default_factory=dict)


class NodeReadError(RuntimeError):
    """The Node could not be read; the message says why (status code, unreachable, no credentials)."""


@dataclass(frozen=True)
class ApiAccess:
    """Where the API server is and how to authenticate to it."""

    server: str  # https://host:port (or http:// for a test server)
    context: ssl.SSLContext | None = None
    token: str | None = None
    token_file: Path | None = None

    def bearer(self) -> str | None:
        if self.token_file is not None:
            try:
                return self.token_file.read_text().strip()
            except OSError as e:
                raise NodeReadError(f"cannot read the token {self.token_file}: {e.strerror}") from e
        return self.token


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl loads client certificates only from files: write them for the call, then remove them."""
    with tempfile.TemporaryDirectory(prefix="sro-kube-") as tmp:
        cert_path, key_path = Path(tmp) / "client.crt", Path(tmp) / "client.key"
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(str(cert_path), str(key_path))


def _data_or_file(entry: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return (base / str(entry[key])).read_bytes()
    return None


def from_kubeconfig(path: Path) -> ApiAccess:
    try:
        doc = yaml.safe_load(path.read_text())
        name = doc["current-context"]
        context = next(c["context"] for c in doc["contexts"] if c["name"] == name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
        user = next(
            (u.get("user") or {} for u in doc.get("users") or [] if u["name"] == context.get("user")), {}
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration) as e:
        raise NodeReadError(f"kubeconfig {path}: cannot use it ({type(e).__name__}: {e})") from e
    if "exec" in user or "auth-provider" in user:
        raise NodeReadError(f"kubeconfig {path}: exec and auth-provider credentials are not supported here")
    base = path.parent
    server = str(cluster.get("server", ""))
    ctx = None
    try:
        if server.startswith("https://"):
            ca = _data_or_file(cluster, "certificate-authority", base)
            if cluster.get("insecure-skip-tls-verify"):
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            elif ca is not None:
                ctx = ssl.create_default_context(cadata=ca.decode())
            else:
                ctx = ssl.create_default_context()  # the system's CAs
            cert = _data_or_file(user, "client-certificate", base)
            key = _data_or_file(user, "client-key", base)
            if cert is not None and key is not None:
                _load_cert_chain(ctx, cert, key)
    except (OSError, ssl.SSLError, ValueError) as e:
        raise NodeReadError(f"kubeconfig {path}: cannot load its certificates: {e}") from e
    token_file = user.get("tokenFile")
    return ApiAccess(
        server=server,
        context=ctx,
        token=user.get("token"),
        token_file=(base / str(token_file)) if token_file else None,
    )


def from_service_account(root: Path = SERVICE_ACCOUNT) -> ApiAccess:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise NodeReadError("in a pod without KUBERNETES_SERVICE_HOST: cannot find the API server")
    try:
        ctx = ssl.create_default_context(cafile=str(root / "ca.crt"))
    except (OSError, ssl.SSLError) as e:
        raise NodeReadError(f"service account CA {root / 'ca.crt'}: {e}") from e
    if ":" in host:
        host = f"[{host}]"
    return ApiAccess(server=f"https://{host}:{port}", context=ctx, token_file=root / "token")


def api_access(kubeconfig: str | os.PathLike[str] | None = None) -> ApiAccess:
    """The explicit kubeconfig, else $KUBECONFIG, else the pod's service account, else ~/.kube/config."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return from_kubeconfig(Path(path))
    if (SERVICE_ACCOUNT / "token").exists():
        return from_service_account()
    return from_kubeconfig(Path.home() / ".kube" / "config")


def status_from_doc(name: str, doc: Mapping[str, Any]) -> NodeStatus:
    metadata, status = doc.get("metadata") or {}, doc.get("status") or {}
    return NodeStatus(
        name=name,
        labels=dict(metadata.get("labels") or {}),
        allocatable=dict(status.get("allocatable") or {}),
        capacity=dict(status.get("capacity") or {}),
    )


def read_node_status(access: ApiAccess, name: str, timeout: float = 10.0) -> NodeStatus:
    """`GET /api/v1/nodes/<name>`: NodeReadError with the status and the API server's message."""
    url = urllib.parse.urlsplit(access.server)
    conn: http.client.HTTPConnection
    if url.scheme == "https":
        conn = http.client.HTTPSConnection(
            url.hostname or "", url.port or 443, timeout=timeout, context=access.context
        )
    else:
        conn = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=timeout)
    headers = {"Accept": "application/json", "User-Agent": "sro-exporter"}
    token = access.bearer()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    path = f"{url.path.rstrip('/')}/api/v1/nodes/{urllib.parse.quote(name, safe='')}"
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as e:
        raise NodeReadError(
            f"get node {name}: API server {access.server} unreachable ({type(e).__name__}: {e})"
        ) from e
    finally:
        conn.close()
    try:
        doc = json.loads(body)
    except ValueError:
        doc = {}
    if response.status != 200:
        message = doc.get("message", "") if isinstance(doc, dict) else ""
        raise NodeReadError(f"get node {name}: {response.status} {response.reason} {message}".strip())
    if not isinstance(doc, dict):
        raise NodeReadError(f"get node {name}: the API server answered something that is not a Node")
    return status_from_doc(name, doc)
