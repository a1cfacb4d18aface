"""The status the operator writes fits the CRD's status schema and carries no empty string.

Why no empty string: Kubernetes 1.20's OpenAPI validator (built with Go >= 1.16) takes "" for null
and refuses it where the schema says string (kubernetes#99804), so a status carrying one never
reaches such an API server; real ones accept it. The operator must not depend on either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from sro.api.crd import status_schema
from sro.operator.plan import Plan
from sro.operator.reconcile import reconcile
from sro.operator.status import NodeRow, build_status, without_empty
from tests import schema_fit
from tests.unit.operator.test_reconcile import NOW, NS, SR, node, observed, sr


def fits(schema: Mapping[str, Any], value: Any) -> list[str]:
    """What the local 1.20 API server would refuse in a status."""
    return schema_fit.fits(schema, value, "status", empty_is_null=True)


def empty_strings(value: Any, path: str = "status") -> list[str]:
    if value == "":
        return [path]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in empty_strings(v, f"{path}.{k}")]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in empty_strings(v, f"{path}[{i}]")]
    return []


def test_the_validator_refuses_what_the_local_api_server_refuses() -> None:
    assert fits(status_schema(), {"resource": ""}) == [
        "status.resource: empty string (read as null by Kubernetes 1.20)"
    ]
    assert fits(status_schema(), {"nodeCount": "1"}) == ["status.nodeCount: not an integer"]
    assert fits(status_schema(), {"resources": "x"}) == ["status.resources: not an array"]
    assert fits(status_schema(), {"resourcez": "x"}) == ["status.resourcez: not in the schema"]
    assert fits(status_schema(), {"conditions": [{"type": "Ready", "status": "Yes"}]}) != []


def test_without_empty_leaves_out_empty_strings_at_every_depth() -> None:
    value = {"a": "", "b": {"c": "", "d": 0, "e": False}, "f": ["", "g", {"h": ""}], "i": None}
    assert without_empty(value) == {"b": {"d": 0, "e": False}, "f": ["g", {}], "i": None}


def cond(plan: Plan, ctype: str) -> dict[str, Any]:
    return next(c for c in plan.status["conditions"] if c["type"] == ctype)


TIME_SLICED = (
    "sharing:\n  timeSlicing:\n    renameByDefault: true\n"
    "    resources: [{name: sro.dev/simulated-gpu, replicas: 2}]\n"
)
BAD_TEMPLATE = {"device-plugin.0600_extra.yaml": "kind: ConfigMap\nmetadata: {name: {{ nope }}}\n"}


def _older_sr_of_the_same_resource() -> dict[str, Any]:
    return {"others": (sr(name="first", created="2026-11-22T09:00:00Z"),)}


# Every reason the reconcile gives Degraded with nothing deployed, with the words its message holds.
DEGRADED: list[tuple[str, dict[str, Any], str, dict[str, Any], str]] = [
    ("unknown recipe", {"recipe": "tpu"}, SR, {}, "spec.recipe"),
    (
        "bad custom template",
        {"recipe": "simulated-gpu", "customManifests": "mine"},
        SR,
        {"custom_manifests": BAD_TEMPLATE},
        "0600_extra.yaml",
    ),
    (
        "missing custom manifests",
        {"recipe": "simulated-gpu", "customManifests": "mine"},
        SR,
        {},
        "customManifests",
    ),
    (
        "image template",
        {"recipe": "nvidia-gpu", "driver": {"imageTemplate": "r/d:{kernal}"}},
        SR,
        {},
        "spec.driver.imageTemplate",
    ),
    (
        "name too long",
        {"recipe": "simulated-gpu"},
        "a-very-long-special-resource-name-for-labels",
        {},
        "metadata.name",
    ),
    (
        "conflicting SpecialResources",
        {"recipe": "simulated-gpu"},
        SR,
        _older_sr_of_the_same_resource(),
        "first",
    ),
    (
        "several resource names under a taint",
        {"recipe": "simulated-gpu", "partitioning": {"taint": True}, "devicePlugin": {"config": TIME_SLICED}},
        SR,
        {},
        "spec.partitioning.taint",
    ),
    (
        "bad upgrade policy",
        {"recipe": "simulated-gpu", "driver": {"upgradePolicy": {"maxUnavailable": "150%"}}},
        SR,
        {},
        "spec.driver.upgradePolicy.maxUnavailable",
    ),
    (
        "quota on an unannounced resource",
        {
            "recipe": "simulated-gpu",
            "partitioning": {"quotas": [{"namespace": "a", "limit": 1, "resource": "nvidia.com/gpu"}]},
        },
        SR,
        {"namespaces": ("a",)},
        "is not announced by recipe",
    ),
]


@pytest.mark.parametrize(
    ("spec", "name", "kw", "words"), [d[1:] for d in DEGRADED], ids=[d[0] for d in DEGRADED]
)
def test_a_degraded_status_fits_the_schema_with_no_empty_string(
    spec: dict[str, Any], name: str, kw: dict[str, Any], words: str
) -> None:
    plan = reconcile(observed([node("a")], the_sr=sr(spec, name=name), **kw), NS, NOW)
    degraded = cond(plan, "Degraded")
    assert not plan.deployable and degraded["status"] == "True" and words in degraded["message"], degraded
    assert cond(plan, "Ready")["status"] != "True"
    assert empty_strings(plan.status) == []
    assert fits(status_schema(), plan.status) == []


def test_a_running_status_with_rows_quotas_and_upgrades_fits_the_schema() -> None:
    spec = {"recipe": "simulated-gpu", "partitioning": {"quotas": [{"namespace": "a", "limit": 1}]}}
    plan = reconcile(observed([node("a"), node("b")], the_sr=sr(spec), namespaces=("b",)), NS, NOW)
    assert plan.status["quotas"] and plan.status["nodes"]
    assert empty_strings(plan.status) == []
    assert fits(status_schema(), plan.status) == []


def test_an_absent_resource_reads_as_empty() -> None:
    from sro.operator.observed import SpecialResourceInfo
    from sro.operator.status_table import summary_rows

    status = build_status(sr(), [NodeRow("a")], {}, {}, "", NOW, problem=("SpecInvalid", "spec.recipe: x"))
    assert "resource" not in status and status["nodes"] == [{"name": "a"}]
    info = SpecialResourceInfo(name=SR, uid="u", spec={"recipe": "tpu"}, status=status)
    assert summary_rows([info])[0][2] == ""
