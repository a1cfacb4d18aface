"""benchmarks.gatedlabeller: which pod events open a node's next gate."""

from __future__ import annotations

from typing import Any

from benchmarks.gatedlabeller import gate_label, ready_gate


def pod(app: str, node: str | None, ready: str | None) -> dict[str, Any]:
    status = {"conditions": [{"type": "Ready", "status": ready}]} if ready else {}
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


def test_a_gated_pod_ready_on_its_node_opens_that_nodes_next_gate() -> None:
    assert ready_gate(pod("gated-3", "sim-7", "True")) == ("sim-7", 3)
    assert gate_label(3) == "sro.dev/bench-gate-3"


def test_pods_not_ready_unscheduled_or_of_other_daemonsets_open_nothing() -> None:
    assert ready_gate(pod("gated-0", "sim-7", "False")) is None
    assert ready_gate(pod("gated-0", "sim-7", None)) is None
    assert ready_gate(pod("gated-0", None, "True")) is None
    assert ready_gate(pod("plain-0", "sim-7", "True")) is None
    assert ready_gate({"metadata": {}, "spec": {"nodeName": "sim-7"}}) is None
