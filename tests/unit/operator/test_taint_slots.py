"""A node patch never holds two taints of one key and effect: the API server refuses such a list
(422), and with it the whole patch — the state labels too — on every pass. The 30-minute fault
campaign (seed 104) left a node stuck so: its startup taint's value edited by hand to `chaos`, the
operator added its own beside it each pass, and the runtime's `ready` label never landed."""

from __future__ import annotations

from dataclasses import replace

from sro.api.names import not_ready_taint
from sro.operator.plan import NodePatch
from sro.operator.reconcile import reconcile
from sro.operator.taints import taints_after
from tests.unit.operator.test_reconcile import NOW, NS, SR, node, observed, sr

OURS = {"key": not_ready_taint(SR), "value": "true", "effect": "NoSchedule"}
SPEC = {"recipe": "simulated-gpu", "startupTaint": True}
RES = "sro.dev/simulated-gpu"


def slots(taints: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(t["key"], t["effect"]) for t in taints]


def test_an_edited_startup_taint_is_replaced_by_ours() -> None:
    for edited in ({**OURS, "value": "chaos"}, {**OURS, "effect": "NoExecute"}, {**OURS, "value": ""}):
        a = replace(node("a"), taints=(edited,))
        patch = reconcile(observed([a], the_sr=sr(SPEC)), NS, NOW).node_patches["a"]
        assert patch.remove_taints == ((OURS["key"], None),) and patch.add_taints == (OURS,), edited
        assert taints_after(a.taints, patch) == [OURS]


def test_our_startup_taint_as_it_should_be_is_left_alone() -> None:
    a = replace(node("a"), taints=(OURS,))
    patch = reconcile(observed([a], the_sr=sr(SPEC)), NS, NOW).node_patches.get("a")
    assert patch is None or not patch.changes_taints


def test_a_partitioning_slot_held_by_another_value_is_not_doubled() -> None:
    admins = {"key": RES, "value": "admin", "effect": "NoSchedule"}
    a = replace(node("a"), taints=(admins,))
    spec = {"recipe": "simulated-gpu", "partitioning": {"taint": True}}
    patch = reconcile(observed([a], the_sr=sr(spec)), NS, NOW).node_patches.get("a")
    assert patch is None or not any(t["key"] == RES for t in patch.add_taints)
    assert taints_after(
        a.taints, NodePatch(add_taints=({"key": RES, "value": SR, "effect": "NoSchedule"},))
    ) == [admins]


def test_taints_after_never_makes_two_of_one_key_and_effect() -> None:
    other_effect = {"key": RES, "value": SR, "effect": "NoExecute"}
    got = taints_after(
        [other_effect], NodePatch(add_taints=({"key": RES, "value": SR, "effect": "NoSchedule"},))
    )
    assert sorted(slots(got)) == [(RES, "NoExecute"), (RES, "NoSchedule")]  # two effects: two slots
    got = taints_after([{**OURS, "value": "x"}], NodePatch(add_taints=(OURS,)))
    assert slots(got) == [(OURS["key"], "NoSchedule")]
