"""A node patch the API server refuses for good (an admission webhook, RBAC, validation) shows in the
SpecialResource's status as Degraded (`NodePatchRefused`, the API server's words) from the next pass
on, until a patch of that node goes through. Before, it was one WARNING line in the operator's log
on every pass while the status said nothing: the seed-104 campaign's stuck node looked merely slow."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import httpx

from sro.api.specialresource import STATE_FIELDS
from sro.kube.errors import refusal, refused_for_good
from sro.operator.cluster.specialresources import SpecialResourceIO
from sro.operator.plan import NodePatch
from sro.operator.reconcile import reconcile
from tests.unit.operator.test_reconcile import NOW, NS, node, observed, sr

SPEC = {"recipe": "simulated-gpu"}
NOTHING = {f: {"enabled": False} for f in STATE_FIELDS.values()}  # validated once selected
DENIED = 'admission webhook "labels.example.com" denied the request: node labels are frozen'


def http_error(code: int, message: str = "") -> httpx.HTTPStatusError:
    request = httpx.Request("PATCH", "https://api:6443/api/v1/nodes/a")
    body = {"kind": "Status", "status": "Failure", "message": message, "code": code} if message else None
    response = (
        httpx.Response(code, json=body, request=request) if body else httpx.Response(code, request=request)
    )
    return httpx.HTTPStatusError("refused", request=request, response=response)


def degraded(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Degraded")


def test_only_refusals_no_retry_mends_count() -> None:
    assert all(refused_for_good(http_error(c)) for c in (400, 403, 422))
    assert not any(refused_for_good(http_error(c)) for c in (404, 408, 409, 429, 500, 503))
    assert not refused_for_good(httpx.ConnectError("refused"))
    assert refusal(http_error(400, DENIED)) == f"400 Bad Request: {DENIED}"
    assert refusal(http_error(403)) == "403 Forbidden"


def test_a_refused_patch_is_degraded_naming_the_node_and_the_api_servers_words() -> None:
    obs = replace(
        observed([node("a"), node("b")], the_sr=sr(SPEC)), refused_patches={"b": f"400 Bad Request: {DENIED}"}
    )
    status = reconcile(obs, NS, NOW).status
    cond = degraded(status)
    assert (cond["status"], cond["reason"]) == ("True", "NodePatchRefused")
    assert "b at node patch" in cond["message"] and "labels are frozen" in cond["message"]
    assert "a at" not in cond["message"]
    [row] = [r for r in status["nodes"] if r["name"] == "b"]  # not validated: its labels are not set
    assert (row.get("state") != "validated", row["reason"]) == (True, "NodePatchRefused")
    assert "labels are frozen" in row["message"]


def test_a_validated_node_whose_patch_is_refused_does_not_make_it_ready() -> None:
    validated = replace(
        observed([node("a")], the_sr=sr({**SPEC, **NOTHING})), refused_patches={"a": "403 Forbidden"}
    )
    status = reconcile(validated, NS, NOW).status
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and status["validatedCount"] == 0
    assert reconcile(replace(validated, refused_patches={}), NS, NOW).status["validatedCount"] == 1


def test_a_refusal_of_a_node_no_longer_selected_is_forgotten_and_none_is_as_expected() -> None:
    obs = replace(observed([node("a")], the_sr=sr(SPEC)), refused_patches={"gone": "403 Forbidden"})
    assert degraded(reconcile(obs, NS, NOW).status)["status"] == "False"
    assert (
        degraded(reconcile(observed([node("a")], the_sr=sr(SPEC)), NS, NOW).status)["reason"] == "AsExpected"
    )


class Cache:
    """The node cache: each patch raises the next error of `errors` (None: it goes through)."""

    def __init__(self, *errors: Exception | None) -> None:
        self.errors = list(errors)

    async def patch_node(self, name: str, body: Any) -> bool:
        error = self.errors.pop(0)
        if error is not None:
            raise error
        return True


def io_with(cache: Cache) -> SpecialResourceIO:
    io = SpecialResourceIO.__new__(SpecialResourceIO)
    io.cache, io.refused_patches = cache, {}  # type: ignore[assignment]
    return io


def test_the_io_remembers_a_refusal_until_a_patch_of_that_node_goes_through() -> None:
    io = io_with(Cache(http_error(400, DENIED), http_error(409, "changed"), None))
    patch = NodePatch(labels={"x": "1"})
    assert not asyncio.run(io.patch_node("gpus", "a", patch))
    assert io.refused_patches == {"gpus": {"a": f"400 Bad Request: {DENIED}"}}
    assert not asyncio.run(io.patch_node("gpus", "a", patch))  # a conflict: re-planned, not a refusal
    assert io.refused_patches == {"gpus": {"a": f"400 Bad Request: {DENIED}"}}
    assert asyncio.run(io.patch_node("gpus", "a", patch))
    assert io.refused_patches == {"gpus": {}}


def test_a_status_that_says_what_an_unpatched_node_does_not_show_waits() -> None:
    """A node validated by this pass whose patch (its validated label, its startup taint gone) did
    not go through — a 409 on a stale resourceVersion, a 5xx — keeps the status from saying Ready
    until a pass's patch of it does (CI saw Ready with the label missing); a node whose refusal
    the status already reports does not."""
    plan = reconcile(observed([node("a"), node("b")], the_sr=sr({**SPEC, **NOTHING})), NS, NOW)
    assert plan.status["validatedCount"] == 2 and set(plan.node_patches) == {"a", "b"}
    assert plan.status_waits_for([]) == []
    assert plan.status_waits_for(["b", "a"]) == ["a", "b"]
    refused = replace(
        observed([node("a"), node("b")], the_sr=sr({**SPEC, **NOTHING})),
        refused_patches={"b": "403 Forbidden"},
    )
    assert reconcile(refused, NS, NOW).status_waits_for(["a", "b"]) == ["a"]
    assert reconcile(refused, NS, NOW).status_waits_for(["b"]) == []


def test_carry_out_writes_no_status_while_a_patch_it_depends_on_failed() -> None:
    plan = reconcile(observed([node("a")], the_sr=sr({**SPEC, **NOTHING})), NS, NOW)
    written: list[object] = []

    def carry_out(*errors: Exception | None) -> list[str]:
        io = io_with(Cache(*errors))
        io.held, io._applied = (lambda: True), {}  # type: ignore[method-assign]

        async def patch_status(_sr: object, status: object) -> bool:
            written.append(status)
            return True

        io.patch_status = patch_status  # type: ignore[method-assign]
        return asyncio.run(io.carry_out(sr({**SPEC, **NOTHING}), replace(plan, create_pods=()), ()))

    problems = carry_out(http_error(409, "the object has been modified"))
    assert written == [] and "status not updated: the patch of node(s) a did not go through" in problems
    assert carry_out(None) == [] and written == [plan.status]
