"""Each state's container probes and a validation pod's deadline are options of the spec: rendered
onto the operands as given (hollow nodes steer their operands through them), and checked first."""

from __future__ import annotations

from typing import Any

import pytest

from sro.api.specialresource import SpecError
from sro.api.specparsing import parse_spec
from sro.operator.observed import NodeInfo, Observed, SpecialResourceInfo
from sro.operator.reconcile import reconcile
from sro.operator.states import KERNEL_LABEL

HTTP = {"httpGet": {"host": "sro-hollow-rules", "port": 10390, "path": "/healthy/driver"}, "periodSeconds": 2}
LIVE = {"httpGet": {"host": "sro-hollow-rules", "port": 10390, "path": "/running/driver-validation"}}


def _plan(spec: dict[str, Any]) -> Any:
    sr = SpecialResourceInfo(name="gpus", uid="u", spec={"recipe": "simulated-gpu", **spec})
    node = NodeInfo(
        "n1",
        labels={
            "sro.dev/simulated-gpu.enabled": "true",
            KERNEL_LABEL: "6.1.0",
            "kubernetes.io/hostname": "n1",
        },
    )
    return reconcile(Observed(sr=sr, nodes=(node,), image="localhost/sro:t"), "sro-system")


def test_probes_replace_the_containers_own() -> None:
    plan = _plan({"driver": {"readinessProbe": HTTP, "livenessProbe": HTTP}})
    ds = next(o for o in plan.apply if o["kind"] == "DaemonSet" and "driver" in o["metadata"]["name"])
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"] == HTTP and container["livenessProbe"] == HTTP
    untouched = next(o for o in plan.apply if o["kind"] == "DaemonSet" and "runtime" in o["metadata"]["name"])
    assert "livenessProbe" not in untouched["spec"]["template"]["spec"]["containers"][0]


def test_a_validation_pod_gets_its_liveness_probe_and_deadline() -> None:
    plan = _plan(
        {"driverValidation": {"livenessProbe": LIVE, "timeoutSeconds": 20}, "driver": {"enabled": False}}
    )
    pod = next(p for p in plan.create_pods if "driver-validation" in p["metadata"]["name"])
    assert pod["spec"]["activeDeadlineSeconds"] == 20
    assert pod["spec"]["containers"][0]["livenessProbe"] == LIVE
    default = _plan({"driver": {"enabled": False}})
    pod = next(p for p in default.create_pods if "driver-validation" in p["metadata"]["name"])
    assert pod["spec"]["activeDeadlineSeconds"] == 300


@pytest.mark.parametrize(
    ("probe", "error"),
    [
        (
            {"periodSeconds": 2},
            r"spec\.driver\.readinessProbe: needs exactly one of httpGet, tcpSocket, exec",
        ),
        ({"httpGet": {"path": "/"}}, r"readinessProbe\.httpGet\.port: required"),
        ({**HTTP, "exec": {"command": ["true"]}}, r"needs exactly one"),
        ({**HTTP, "periodSeconds": 0}, r"readinessProbe\.periodSeconds: expected a whole number from 1"),
        ({**HTTP, "grpc": {}}, r"needs exactly one|unknown field"),
        ({"exec": {"command": "true"}}, r"exec\.command: expected a list of strings"),
    ],
)
def test_bad_probes_are_refused_naming_the_field(probe: dict[str, Any], error: str) -> None:
    with pytest.raises(SpecError, match=error):
        parse_spec("gpus", {"recipe": "simulated-gpu", "driver": {"readinessProbe": probe}})


def test_the_label_keys_a_pass_reads_are_in_its_plan() -> None:
    plan = _plan({"nodeSelector": {"pool": "gpu"}})
    assert {"pool", "sro.dev/simulated-gpu.count"} <= plan.label_keys
