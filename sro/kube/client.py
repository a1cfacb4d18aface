"""One way to get a Kubernetes client, in-cluster or from a kubeconfig.

Why lightkube: typed models for every core resource, an asyncio client and a sync one with the same
API, server-side apply built in (`client.apply(obj, field_manager=...)`), and a small dependency tree
that keeps the node agents' memory low. kopf (the operator) brings its own API access.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from lightkube import AsyncClient, Client
from lightkube.config.kubeconfig import KubeConfig

from sro.api.names import FIELD_MANAGER

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def kube_config(kubeconfig: str | os.PathLike[str] | None = None) -> KubeConfig:
    """The explicit kubeconfig, else $KUBECONFIG, else the pod's service account, else ~/.kube/config."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return KubeConfig.from_file(str(path))
    if IN_CLUSTER_TOKEN.exists():
        return KubeConfig.from_service_account()
    return KubeConfig.from_file(str(Path.home() / ".kube" / "config"))


def sync_client(kubeconfig: str | os.PathLike[str] | None = None, timeout: float = 30) -> Client:
    return Client(config=kube_config(kubeconfig), field_manager=FIELD_MANAGER, timeout=httpx.Timeout(timeout))


def async_client(kubeconfig: str | os.PathLike[str] | None = None, timeout: float = 30) -> AsyncClient:
    return AsyncClient(
        config=kube_config(kubeconfig), field_manager=FIELD_MANAGER, timeout=httpx.Timeout(timeout)
    )
