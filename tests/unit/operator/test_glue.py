"""The small pure pieces around the reconcile: `sro status` rows, the log lines of a plan and the
metrics a pass records (the lease's rules: tests/unit/test_kube_leases.py)."""

from __future__ import annotations

from sro.api.names import DRIVER, DRIVER_VALIDATION, state_label, validated_label
from sro.operator import metrics
from sro.operator.handlers import describe
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.plan import NodePatch, Plan
from sro.operator.status import NodeRow
from sro.operator.status_table import node_rows, summary_rows

SR = "gpus"
STATUS = {
    "ready": "False",
    "resource": "sro.dev/simulated-gpu",
    "nodeCount": 2,
    "validatedCount": 1,
    "states": {"driver": "enabled", "runtime": "disabled", "monitoring": "disabled"},
    "conditions": [
        {"type": "Ready", "status": "False"},
        {
            "type": "Degraded",
            "status": "True",
            "message": "1 node(s) failing: b at driver (CrashLoopBackOff)",
        },
    ],
    "nodes": [
        {
            "name": "b",
            "failing": "driver",
            "reason": "CrashLoopBackOff",
            "message": "back-off",
            "since": "t1",
        },
        {"name": "a", "state": "validated", "since": "t0"},
    ],
}


def test_status_rows_come_from_node_labels_and_the_status_table() -> None:
    sr = SpecialResourceInfo(SR, "u", {"recipe": "simulated-gpu"}, status=STATUS)
    nodes = [
        NodeInfo("a", labels={state_label(SR, DRIVER): "ready", validated_label(SR): "true"}),
        NodeInfo("b", labels={}),
    ]
    [summary] = summary_rows([sr])
    assert summary[:6] == (SR, "simulated-gpu", "sro.dev/simulated-gpu", "False", "2", "1")
    assert "b at driver" in summary[6]
    rows = {r[0]: r for r in node_rows(sr, nodes)}
    assert rows["a"][1] == "ready" and rows["a"][-1] == "validated since t0"
    assert rows["b"][1] == "" and rows["b"][-1] == "driver: CrashLoopBackOff back-off"
    # columns in state order: driver, driver-validation, runtime (disabled), ..., monitoring (disabled)
    assert rows["a"][3] == "-" and rows["a"][6] == "-"


def test_plan_is_described_in_words() -> None:
    plan = Plan(
        status={},
        node_patches={
            "a": NodePatch(labels={state_label(SR, DRIVER): "ready"}),
            "b": NodePatch(
                labels={state_label(SR, DRIVER_VALIDATION): None},
                add_taints=({"key": "sro.dev/gpus.not-ready", "value": "true", "effect": "NoSchedule"},),
            ),
        },
        rows=(NodeRow("b", failing=DRIVER_VALIDATION, reason="Validating", message="pod recreated"),),
    )
    assert describe(SR, plan) == [
        "node a: ready: driver",
        "node b: no longer ready: driver-validation (driver-validation: Validating pod recreated)",
        "node b: taint sro.dev/gpus.not-ready=true:NoSchedule added",
    ]


def test_metrics_count_nodes_per_state_and_time_to_validate_once() -> None:
    rows = [
        NodeRow("a", ready_states=("driver",), reached={"selected": "2026-01-01T00:00:00Z"}),
        NodeRow(
            "b",
            ready_states=("driver", "runtime"),
            validated=True,
            reached={"selected": "2026-01-01T00:00:00Z", "validated": "2026-01-01T00:00:42Z"},
        ),
    ]

    def sample(name: str, **labels: str) -> float | None:
        return metrics.REGISTRY.get_sample_value(name, labels)

    metrics.record("m", rows, ["driver", "runtime"])
    metrics.record("m", rows, ["driver", "runtime"])  # a second pass observes nothing new
    assert sample("sro_operator_nodes", specialresource="m", state="driver") == 2
    assert sample("sro_operator_nodes", specialresource="m", state="validated") == 1
    assert sample("sro_operator_node_validation_seconds_count", specialresource="m") == 1
    assert sample("sro_operator_node_validation_seconds_sum", specialresource="m") == 42
    metrics.PASS_SECONDS.labels("m").observe(0.1)
    metrics.forget("m")
    assert sample("sro_operator_nodes", specialresource="m", state="driver") is None
    assert sample("sro_operator_node_validation_seconds_count", specialresource="m") is None
    assert sample("sro_operator_pass_seconds_count", specialresource="m") is None
    metrics.forget("m")  # nothing left to forget: no error
    metrics.record("m", rows, ["driver", "runtime"])  # applied again: its node counted again, once
    assert sample("sro_operator_node_validation_seconds_count", specialresource="m") == 1
    metrics.forget("m")


def test_quota_rows_show_used_over_hard() -> None:
    from sro.operator.status_table import quota_rows

    rows = quota_rows(
        [
            {"namespace": "a", "resource": "r", "used": "1", "hard": "2"},
            {"namespace": "b", "resource": "r", "hard": "1", "problem": "namespace not found"},
        ]
    )
    assert rows == [("a", "r", "1 / 2", ""), ("b", "r", "- / 1", "namespace not found")]
