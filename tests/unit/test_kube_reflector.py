"""The reflector (sro/kube/reflector.py) over a scripted API server (httpx.MockTransport): pages are
joined, the watch starts at the list's resourceVersion, bookmarks move it on, a 410 lists again and
says RESYNC, a refusal is kept as the reason a pass shows. The real API server: tests/e2e (every
operator test runs on it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from sro.kube.reflector import RESYNC, ListWatchError, Reflector
from sro.operator.cluster.cache import ClusterCache

pytestmark = pytest.mark.timeout(30)


def node(name: str, rv: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": labels}}


class Server:
    """Answers lists from `pages` and each watch with the next script of events (then ends it)."""

    def __init__(self, pages: list[dict[str, Any]], watches: list[list[dict[str, Any]] | int]) -> None:
        self.pages = pages
        self.watches = watches
        self.requests: list[dict[str, str]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        self.requests.append(params)
        if params.get("watch"):
            if not self.watches:
                await asyncio.sleep(3600)  # a watch with nothing to say is held open
            script = self.watches.pop(0)
            if isinstance(script, int):
                return httpx.Response(script, json={"message": f"status {script}"})
            return httpx.Response(200, content="\n".join(json.dumps(e) for e in script).encode())
        page = self.pages[int(params.get("continue") or 0)]
        return httpx.Response(200, json=page)


async def reflect(server: Server, until: Any, **kwargs: Any) -> tuple[Reflector[str], list[str]]:
    events: list[str] = []

    def seen(kind: str, obj: Mapping[str, Any] | None) -> None:
        events.append(kind if obj is None else f"{kind} {obj['metadata']['name']}")

    http = httpx.AsyncClient(transport=httpx.MockTransport(server), base_url="https://api")
    r: Reflector[str] = Reflector(
        http,
        "/api/v1/nodes",
        key=lambda o: o["metadata"]["name"],
        parse=lambda o: ",".join(sorted(o["metadata"].get("labels", {}))),
        **kwargs,
    )
    r.listeners.append(seen)
    task = asyncio.create_task(r.run())
    for _ in range(300):
        await asyncio.sleep(0.01)
        if until(r, events):
            break
    task.cancel()
    return r, events


def test_pages_are_joined_and_the_watch_starts_where_the_list_ended() -> None:
    server = Server(
        [
            {"metadata": {"continue": "1"}, "items": [node("a", "5", x="1")]},
            {"metadata": {"resourceVersion": "9"}, "items": [node("b", "7")]},
        ],
        [
            [
                {"type": "MODIFIED", "object": node("a", "10", x="1", y="2")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
                {"type": "ADDED", "object": node("c", "13")},
                {"type": "DELETED", "object": node("b", "14")},
            ]
        ],
    )
    r, events = asyncio.run(reflect(server, lambda r, ev: "DELETED b" in ev, params={"labelSelector": "k"}))
    assert r.items == {"a": "x,y", "c": ""}
    assert events == [RESYNC, "MODIFIED a", "ADDED c", "DELETED b"]
    assert server.requests[0] == {"labelSelector": "k", "limit": "500"}
    assert server.requests[1]["continue"] == "1"
    watch = server.requests[2]
    assert watch["resourceVersion"] == "9" and watch["allowWatchBookmarks"] == "true"
    assert watch["labelSelector"] == "k"
    assert r.resource_version == "14" and r.synced.is_set() and r.lists == 1


def test_a_gone_resource_version_lists_again_and_says_resync() -> None:
    server = Server(
        [{"metadata": {"resourceVersion": "3"}, "items": [node("a", "3")]}],
        [[{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}]],
    )
    r, events = asyncio.run(reflect(server, lambda r, ev: r.lists == 2))
    assert r.lists == 2 and events[:2] == [RESYNC, RESYNC]
    assert [q.get("watch") for q in server.requests[:3]] == [None, "1", None]


def test_a_refused_list_is_the_reason_a_pass_shows_and_is_tried_again() -> None:
    class Refusing(Server):
        async def __call__(self, request: httpx.Request) -> httpx.Response:
            self.requests.append(dict(request.url.params))
            return httpx.Response(403, json={"message": 'nodes is forbidden: User "x" cannot list'})

    server = Refusing([], [])

    async def go() -> str:
        r, _ = await reflect(server, lambda r, ev: bool(r.error))
        with pytest.raises(ListWatchError) as e:
            await r.wait_synced(0.05)
        return str(e.value)

    message = asyncio.run(go())
    assert "403" in message and "cannot list" in message


def test_the_cache_groups_pods_by_special_resource_and_wakes_listeners() -> None:
    def pod(sr: str, name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "resourceVersion": "1", "labels": {"sro.dev/specialresource": sr}},
            "spec": {"nodeName": "n"},
        }

    cache = ClusterCache(httpx.AsyncClient(), "sro-system")
    heard: list[str] = []
    cache.pods.listeners.append(lambda kind, obj: heard.append(kind))
    for event in ({"type": "ADDED", "object": pod("a", "p1")}, {"type": "ADDED", "object": pod("ab", "p2")}):
        assert cache.pods.apply(event)
    assert [p.name for p in cache.pods_of("a")] == ["p1"]
    assert [p.name for p in cache.pods_of("ab")] == ["p2"]
    assert heard == ["ADDED", "ADDED"]
    cache.nodes.apply({"type": "ADDED", "object": {"metadata": {"name": "n", "labels": {"l": "v"}}}})
    assert [n.labels for n in cache.node_infos()] == [{"l": "v"}]
    assert [s.name for s in cache.node_infos()] == ["n"]


def test_requests_are_counted_by_verb_and_resource_as_the_api_server_names_them() -> None:
    from sro.kube.client import count_requests, request_kind

    assert request_kind("GET", "/api/v1/nodes", watch=False) == ("LIST", "nodes")
    assert request_kind("GET", "/api/v1/namespaces/ns/pods", watch=True) == ("WATCH", "pods")
    assert request_kind("GET", "/api/v1/namespaces/ns", watch=False) == ("GET", "namespaces")
    assert request_kind("PATCH", "/api/v1/nodes/a/status", watch=False) == ("PATCH", "nodes/status")
    assert request_kind("POST", "/api/v1/namespaces/ns/pods/p/eviction", watch=False) == (
        "POST",
        "pods/eviction",
    )
    assert request_kind("PATCH", "/apis/sro.dev/v1alpha1/specialresources/x/status", watch=False) == (
        "PATCH",
        "specialresources/status",
    )
    assert request_kind("DELETE", "/apis/apps/v1/namespaces/ns/daemonsets/d", watch=False) == (
        "DELETE",
        "daemonsets",
    )

    async def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"items": []})

    seen: list[tuple[str, str]] = []
    http = httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="https://api")
    count_requests(http, lambda verb, resource: seen.append((verb, resource)))

    async def go() -> None:
        await http.get("/api/v1/nodes", params={"watch": "1"})
        await http.get("/api/v1/nodes")

    asyncio.run(go())
    assert seen == [("WATCH", "nodes"), ("LIST", "nodes")]


def test_the_operators_own_write_is_read_back_and_an_older_event_does_not_undo_it() -> None:
    async def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/gone"):
            return httpx.Response(404, json={"message": "not found"})
        patched = json.loads(request.content)["metadata"]["labels"]
        return httpx.Response(200, json=node("n", "20", **patched))

    cache = ClusterCache(
        httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="https://api"), "ns"
    )
    cache.nodes.apply({"type": "ADDED", "object": node("n", "10")})
    assert asyncio.run(cache.patch_node("n", {"metadata": {"labels": {"sro.dev/x.driver": "ready"}}}))
    assert [n.labels for n in cache.node_infos()] == [{"sro.dev/x.driver": "ready"}]
    cache.nodes.apply({"type": "MODIFIED", "object": node("n", "15")})  # the watch, behind the write
    assert [n.labels for n in cache.node_infos()] == [{"sro.dev/x.driver": "ready"}]
    cache.nodes.apply({"type": "MODIFIED", "object": node("n", "21", other="1")})
    assert [n.labels for n in cache.node_infos()] == [{"other": "1"}]
    assert not asyncio.run(cache.patch_node("gone", {"metadata": {}}))
