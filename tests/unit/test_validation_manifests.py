"""The validation pod renders for both checks and both recipes with as little privilege as each needs."""

from __future__ import annotations

from typing import Any

import pytest

from sro.manifests import render

VALUES: dict[str, Any] = dict(
    name="sro-validate-x",
    namespace="sro-system",
    node="vm",
    sr="gpus",
    image="localhost/sro:t",
    pull_policy="Never",
)


def _objects(**values: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = {d["kind"]: d for d in render("validation", **{**VALUES, **values})}
    assert sorted(docs) == ["Pod", "ServiceAccount"]
    return docs["ServiceAccount"], docs["Pod"]


def _tolerated(pod: dict[str, Any]) -> set[str]:
    return {t["key"] for t in pod["spec"]["tolerations"]}


@pytest.mark.parametrize("recipe", ["simulated-gpu", "nvidia-gpu"])
def test_driver_pod(recipe: str) -> None:
    sa, pod = _objects(check="driver", recipe=recipe)
    assert sa["metadata"]["name"] == "sro-validation" and sa["automountServiceAccountToken"] is False
    spec = pod["spec"]
    assert pod["metadata"]["name"] == "sro-validate-x" and pod["metadata"]["namespace"] == "sro-system"
    assert spec["restartPolicy"] == "Never" and spec["nodeName"] == "vm" and "nodeSelector" not in spec
    assert "runtimeClassName" not in spec and spec["automountServiceAccountToken"] is False
    assert _tolerated(pod) >= {
        "node.kubernetes.io/unschedulable",
        "sro.dev/gpus.not-ready",
        "CriticalAddonsOnly",
    }
    (c,) = spec["containers"]
    assert c["command"] == [
        "sro",
        "validate",
        "driver",
        f"--recipe={recipe}",
        "--driver-root=/driver-root",
        "--dev-root=/host-dev",
        "--termination-log=/dev/termination-log",
    ]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert all(m["readOnly"] for m in c["volumeMounts"])
    paths = {v["hostPath"]["path"] for v in spec["volumes"]}
    if recipe == "simulated-gpu":
        assert paths == {"/var/lib/sro/driver/simulated-gpu", "/dev"}
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        }
        assert pod["metadata"]["labels"]["sro.dev/simulated"] == "true"
    else:
        assert paths == {"/", "/dev"}
        assert c["securityContext"] == {
            "privileged": True
        }  # NVML must open /dev/nvidia* before any hook exists
        assert "resources" not in c or "nvidia.com/gpu" not in c["resources"].get("limits", {})


def test_driver_root_override() -> None:
    _, pod = _objects(check="driver", recipe="nvidia-gpu", driver_root="/run/nvidia/driver")
    assert {v["hostPath"]["path"] for v in pod["spec"]["volumes"]} == {"/run/nvidia/driver", "/dev"}


@pytest.mark.parametrize(
    ("recipe", "resource"), [("simulated-gpu", "sro.dev/simulated-gpu"), ("nvidia-gpu", "nvidia.com/gpu")]
)
def test_workload_pod_goes_through_the_scheduler(recipe: str, resource: str) -> None:
    _, pod = _objects(check="workload", recipe=recipe)
    spec = pod["spec"]
    assert "nodeName" not in spec and spec["nodeSelector"] == {"kubernetes.io/hostname": "vm"}
    assert spec["runtimeClassName"] == "sro" and "volumes" not in spec
    (c,) = spec["containers"]
    assert c["command"] == [
        "sro",
        "validate",
        "workload",
        f"--recipe={recipe}",
        "--termination-log=/dev/termination-log",
    ]
    assert c["resources"]["limits"][resource] == "1"
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["MKNOD"]},
    }
    assert "volumeMounts" not in c and resource in _tolerated(pod)


def test_workload_options() -> None:
    values = dict(
        runtime_class="nvidia",
        resource="nvidia.com/gpu.shared",
        hostname="vm.example",
        cuda_sample="/x/vectorAdd",
    )
    _, pod = _objects(check="workload", recipe="nvidia-gpu", **values)
    spec = pod["spec"]
    assert spec["runtimeClassName"] == "nvidia" and spec["nodeSelector"] == {
        "kubernetes.io/hostname": "vm.example"
    }
    (c,) = spec["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu.shared"] == "1"
    assert "--cuda-sample=/x/vectorAdd" in c["command"]


def test_missing_or_bad_values_are_errors() -> None:
    with pytest.raises(ValueError, match="'check' is undefined"):
        render("validation", **VALUES)
    with pytest.raises(ValueError, match="check_must_be_driver_or_workload"):
        render("validation", **VALUES, check="runtime")
    values: dict[str, Any] = {k: v for k, v in VALUES.items() if k != "sr"}
    with pytest.raises(ValueError, match="'sr' is undefined"):
        render("validation", **values, check="driver")
