"""The device-plugin manifests render, and ask for no more privilege than the plugin needs."""

from __future__ import annotations

from typing import Any

import pytest

from sro.manifests import render


def _objects(**values: Any) -> dict[str, Any]:
    docs = render(
        "device-plugin", image="localhost/sro:test", namespace="sro-system", pull_policy="Never", **values
    )
    return {d["kind"]: d for d in docs}


@pytest.mark.parametrize("recipe", ["simulated-gpu", "nvidia-gpu"])
def test_least_privilege(recipe: str) -> None:
    objs = _objects(recipe=recipe)
    assert sorted(objs) == ["ConfigMap", "DaemonSet", "Namespace", "ServiceAccount"]
    assert objs["ServiceAccount"]["automountServiceAccountToken"] is False
    pod = objs["DaemonSet"]["spec"]["template"]["spec"]
    assert (
        pod["automountServiceAccountToken"] is False
        and pod["serviceAccountName"] == objs["ServiceAccount"]["metadata"]["name"]
    )
    # `sro install` creates the account once for every recipe: its name cannot depend on the recipe
    assert objs["ServiceAccount"]["metadata"]["name"] == "sro-device-plugin"
    assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["resources"]["limits"]["memory"]
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    # the kubelet's plugin dir, the driver root, the health report's dir and pod-resources: no more
    assert {
        "/var/lib/kubelet/device-plugins",
        "/var/lib/sro/health",
        "/var/lib/kubelet/pod-resources",
    } <= host_paths
    assert len(host_paths) == 4
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["driver-root"]["readOnly"] and mounts["config"]["readOnly"]
    assert mounts["pod-resources"]["readOnly"] and not mounts["health"].get("readOnly")
    assert "--health-dir=/var/lib/sro/health" in c["command"]
    assert f"--recipe={recipe}" in c["command"]


def test_simulated_is_labelled_and_config_is_passed() -> None:
    objs = _objects(recipe="simulated-gpu", plugin_config="health:\n  recoverAfterSeconds: 2\n")
    ds = objs["DaemonSet"]
    assert ds["metadata"]["labels"]["sro.dev/simulated"] == "true"
    assert ds["spec"]["template"]["metadata"]["labels"]["sro.dev/simulated"] == "true"
    assert objs["ConfigMap"]["data"]["config.yaml"].strip() == "health:\n  recoverAfterSeconds: 2"
    host = {v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert "/var/lib/sro/driver/simulated-gpu" in host
    assert "sro.dev/simulated" not in _objects(recipe="nvidia-gpu")["DaemonSet"]["metadata"]["labels"]


def test_runtime_class_for_nvml() -> None:
    pod = _objects(recipe="nvidia-gpu", runtime_class="sro")["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "sro"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in pod["containers"][0]["env"]
    # the management request the hook honours only in the operator's namespace (issue 21 §1)
    assert {"name": "SRO_MANAGEMENT_DEVICES", "value": "all"} in pod["containers"][0]["env"]
    assert "runtimeClassName" not in _objects(recipe="simulated-gpu")["DaemonSet"]["spec"]["template"]["spec"]


def test_not_ready_until_registered() -> None:
    """The readiness probe tests the file the plugin keeps while it is registered (not before its
    driver is there), in a pod-local directory: a host path would outlive the pod."""
    pod = _objects(recipe="simulated-gpu")["DaemonSet"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    (flag,) = [a for a in c["command"] if a.startswith("--ready-file=")]
    ready = flag.split("=", 1)[1]
    # the check waits for the file (up to 2 s, every 0.1 s) rather than failing at once
    assert (
        c["readinessProbe"]["exec"]["command"][:2] == ["sh", "-c"]
        and c["readinessProbe"]["exec"]["command"][-1] == ready
    )
    (mount,) = [m for m in c["volumeMounts"] if ready.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" in volume
