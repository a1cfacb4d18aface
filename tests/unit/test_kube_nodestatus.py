"""The exporter's read of its Node (sro/kube/nodestatus.py) against fake API servers: HTTPS with the
cluster's CA and a client certificate (as the local cluster's kubeconfig), a service account token,
refusals with the API server's message, an unreachable server, unsupported credentials."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.kube import nodestatus
from sro.kube.nodestatus import NodeReadError, api_access, from_service_account, read_node_status
from sro.local.pki import CertSpec, ensure_pki

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "labels": {"sro.dev/gpu.driver": "ready"}},
    "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "8"}, "capacity": {"nvidia.com/gpu": "4"}},
}


class FakeApi:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.seen: list[dict[str, str]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                if self.headers.get("Authorization") == "Bearer bad":
                    code, doc = 403, {"kind": "Status", "message": 'nodes "n1" is forbidden: no get'}
                elif self.path == "/api/v1/nodes/n1":
                    code, doc = 200, NODE
                else:
                    code, doc = 404, {"kind": "Status", "message": "not found"}
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    specs = (
        CertSpec("apiserver", "kube-apiserver", server=True, client=False, ips=("127.0.0.1",)),
        CertSpec("admin", "sro-admin", groups=("system:masters",)),
    )
    ensure_pki(tmp_path / "pki", specs)
    return tmp_path / "pki"


@pytest.fixture
def https_api(pki: Path) -> Iterator[FakeApi]:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(str(pki / "apiserver.crt"), str(pki / "apiserver.key"))
    tls.load_verify_locations(str(pki / "ca.crt"))
    tls.verify_mode = ssl.CERT_REQUIRED  # a client certificate or nothing
    api = FakeApi(tls)
    yield api
    api.close()


def kubeconfig(path: Path, server: str, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_client_certificate_files_as_the_local_cluster(tmp_path: Path, pki: Path, https_api: FakeApi) -> None:
    cfg = kubeconfig(
        tmp_path / "kubeconfig",
        f"https://127.0.0.1:{https_api.port}",
        {"client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")},
        {"certificate-authority": str(pki / "ca.crt")},
    )
    status = read_node_status(api_access(cfg), "n1")
    assert status.labels == {"sro.dev/gpu.driver": "ready"}
    assert status.allocatable == {"nvidia.com/gpu": "4", "cpu": "8"} and status.capacity == {
        "nvidia.com/gpu": "4"
    }
    assert https_api.seen[0]["path"] == "/api/v1/nodes/n1" and "authorization" not in https_api.seen[0]


def test_certificate_data_inline(tmp_path: Path, pki: Path, https_api: FakeApi) -> None:
    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    cfg = kubeconfig(
        tmp_path / "kubeconfig",
        f"https://127.0.0.1:{https_api.port}",
        {"client-certificate-data": b64("admin.crt"), "client-key-data": b64("admin.key")},
        {"certificate-authority-data": b64("ca.crt")},
    )
    assert read_node_status(api_access(cfg), "n1").allocatable["nvidia.com/gpu"] == "4"


def test_a_server_the_ca_does_not_vouch_for(tmp_path: Path, https_api: FakeApi) -> None:
    cfg = kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{https_api.port}", {"token": "t"})
    with pytest.raises(NodeReadError, match=r"unreachable.*(CERTIFICATE_VERIFY_FAILED|certificate)"):
        read_node_status(api_access(cfg), "n1")


def test_service_account_token_rotates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi()
    try:
        sa = tmp_path / "sa"
        sa.mkdir()
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
        with pytest.raises(NodeReadError, match="service account CA"):
            from_service_account(sa)
        (sa / "ca.crt").write_text("")  # not read for plain http below
        access = nodestatus.ApiAccess(f"http://127.0.0.1:{api.port}", token_file=sa / "token")
        (sa / "token").write_text("first\n")
        read_node_status(access, "n1")
        (sa / "token").write_text("second\n")
        read_node_status(access, "n1")
        assert [s["authorization"] for s in api.seen] == ["Bearer first", "Bearer second"]
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
        with pytest.raises(NodeReadError, match="KUBERNETES_SERVICE_HOST"):
            from_service_account(sa)
    finally:
        api.close()


def test_refusals_and_failures_say_why(tmp_path: Path) -> None:
    api = FakeApi()
    try:
        server = f"http://127.0.0.1:{api.port}"
        with pytest.raises(NodeReadError, match=r'403 Forbidden nodes "n1" is forbidden'):
            read_node_status(api_access(kubeconfig(tmp_path / "k1", server, {"token": "bad"})), "n1")
        with pytest.raises(NodeReadError, match="404 Not Found not found"):
            read_node_status(api_access(kubeconfig(tmp_path / "k2", server, {"token": "t"})), "other")
    finally:
        api.close()
    with pytest.raises(NodeReadError, match="unreachable"):
        read_node_status(nodestatus.ApiAccess(server), "n1", timeout=2)
    exec_user = {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1beta1"}}
    with pytest.raises(NodeReadError, match="exec and auth-provider"):
        api_access(kubeconfig(tmp_path / "k3", server, exec_user))
    (tmp_path / "k4").write_text("current-context: nowhere\ncontexts: []\n")
    with pytest.raises(NodeReadError, match="cannot use it"):
        api_access(tmp_path / "k4")
