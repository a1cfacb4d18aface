"""Which Eviction version the API server serves (policy/v1 from 1.22, policy/v1beta1 before), read
from discovery once; a discovery failure fails that eviction (retried) and is asked again."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from sro.kube.eviction import DEFAULT_VERSION, Evictor, version_from_discovery


def _core(eviction: dict[str, Any] | None) -> dict[str, Any]:
    resources: list[dict[str, Any]] = [{"name": "pods", "namespaced": True, "kind": "Pod"}]
    if eviction is not None:
        resources.append({"name": "pods/eviction", "namespaced": True, "kind": "Eviction", **eviction})
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": resources}


V1 = _core({"group": "policy", "version": "v1"})  # Kubernetes 1.22 and later
V1BETA1 = _core({"group": "policy", "version": "v1beta1"})  # 1.20 and 1.21


def test_version_from_discovery_gives_both_answers() -> None:
    assert version_from_discovery(V1) == "policy/v1"
    assert version_from_discovery(V1BETA1) == "policy/v1beta1"
    assert version_from_discovery(_core({})) == "policy/v1beta1"  # no group/version named
    assert version_from_discovery(_core(None)) == DEFAULT_VERSION == "policy/v1beta1"
    assert version_from_discovery({"resources": ["pods/eviction", None]}) == DEFAULT_VERSION


class FakeApi:
    """The API server's discovery and eviction endpoints, behind lightkube's httpx client."""

    def __init__(self, *discovery: httpx.Response) -> None:
        self.discovery = list(discovery)
        self.evictions: list[str] = []
        self.asked = 0
        http = httpx.AsyncClient(transport=httpx.MockTransport(self.handle), base_url="https://api")
        self.client: Any = SimpleNamespace(_client=SimpleNamespace(_client=http))

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/api/v1":
            self.asked += 1
            return self.discovery.pop(0)
        assert request.method == "POST" and request.url.path.endswith("/eviction"), request.url
        self.evictions.append(json.loads(request.content)["apiVersion"])
        return httpx.Response(201, json={})


@pytest.mark.parametrize("doc, version", [(V1, "policy/v1"), (V1BETA1, "policy/v1beta1")])
async def test_evictions_use_the_served_version_asked_once(doc: dict[str, Any], version: str) -> None:
    api = FakeApi(httpx.Response(200, json=doc))
    evictor = Evictor(api.client)
    assert (await evictor.evict("apps", "a")).done
    assert (await evictor.evict("apps", "b")).done
    assert api.evictions == [version, version]
    assert api.asked == 1


@pytest.mark.parametrize(
    "failure",
    [
        httpx.Response(503, text="the server is currently unable to handle the request"),
        httpx.Response(200, text="<html>a proxy's error page</html>"),
        httpx.Response(200, json=["not", "a", "resource", "list"]),
    ],
    ids=["refused", "not-json", "not-a-list"],
)
async def test_a_discovery_failure_fails_the_eviction_and_is_asked_again(failure: httpx.Response) -> None:
    api = FakeApi(failure, httpx.Response(200, json=V1))
    evictor = Evictor(api.client)
    result = await evictor.evict("apps", "a")
    assert not result.done and "eviction of apps/a failed" in result.message
    assert api.evictions == []  # nothing sent with a guessed version
    assert (await evictor.evict("apps", "a")).done
    assert api.evictions == ["policy/v1"]
    assert api.asked == 2
