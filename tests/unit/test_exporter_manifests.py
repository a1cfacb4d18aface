"""The exporter's manifests (sro/manifests/monitoring 0200-0600) render, ask for no more privilege than
it needs (get on nodes, read-only host paths), and `sro install` creates its account and role."""

from __future__ import annotations

from typing import Any

import pytest

from sro.install.objects import objects
from sro.manifests import render

MINE = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service"}


def _objects(**values: Any) -> dict[str, Any]:
    docs = render(
        "monitoring", image="localhost/sro:test", namespace="sro-system", pull_policy="Never", **values
    )
    return {
        d["kind"]: d
        for d in docs
        if d["kind"] in MINE and d["metadata"]["labels"].get("app.kubernetes.io/name") == "sro-exporter"
    }


@pytest.mark.parametrize("recipe", ["simulated-gpu", "nvidia-gpu"])
def test_least_privilege(recipe: str) -> None:
    objs = _objects(recipe=recipe)
    assert set(objs) == MINE
    assert objs["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = objs["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == "sro-exporter"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sro-exporter", "namespace": "sro-system"}
    ]
    pod = objs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "sro-exporter" and pod["automountServiceAccountToken"] is True
    assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["resources"]["limits"]["memory"]
    # host paths read-only; its own writable state is an emptyDir in memory (the ready file)
    assert all(m["readOnly"] for m in c["volumeMounts"] if m["name"] != "state")
    assert {"name": "state", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in pod["volumes"]
    host = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert "/var/lib/kubelet/pod-resources" in host and len(host) == 2
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c["env"]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert f"--recipe={recipe}" in c["command"] and "--address=:9400" in c["command"]
    assert objs["DaemonSet"]["metadata"]["name"] == f"sro-exporter-{recipe}"
    config = next(v for v in pod["volumes"] if v["name"] == "plugin-config")
    assert config["configMap"] == {"name": f"sro-device-plugin-{recipe}", "optional": True}


def test_service_for_prometheus() -> None:
    objs = _objects(recipe="simulated-gpu", name="sro-x-monitoring")
    svc, ds = objs["Service"], objs["DaemonSet"]
    assert svc["metadata"]["name"] == ds["metadata"]["name"] == "sro-x-monitoring"
    assert svc["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
        "prometheus.io/path": "/metrics",
    }
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in svc["spec"]["selector"].items())
    assert ds["metadata"]["labels"]["sro.dev/simulated"] == "true"


def test_operator_values() -> None:
    """What the monitoring state would pass: its object name, the plugin's ConfigMap, the SR, interval."""
    objs = _objects(
        recipe="nvidia-gpu",
        name="sro-gpu-monitoring",
        plugin_config_map="sro-gpu-device-plugin",
        sr="gpu",
        interval="15s",
        runtime_class="sro",
    )
    pod = objs["DaemonSet"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert "--sr=gpu" in c["command"] and "--interval=15s" in c["command"]
    assert (
        next(v for v in pod["volumes"] if v["name"] == "plugin-config")["configMap"]["name"]
        == "sro-gpu-device-plugin"
    )
    assert pod["runtimeClassName"] == "sro"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in c["env"]
    assert {"name": "SRO_MANAGEMENT_DEVICES", "value": "all"} in c["env"]  # honoured in sro's namespace only


def test_install_creates_the_account_and_role() -> None:
    names = {(o["kind"], o["metadata"]["name"]) for o in objects()}
    assert {("ServiceAccount", "sro-exporter"), ("ClusterRole", "sro-exporter"),
            ("ClusterRoleBinding", "sro-exporter")} <= names  # fmt: skip
    assert ("DaemonSet", "sro-exporter-simulated-gpu") not in names  # the operator's to render
