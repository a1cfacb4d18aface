"""The runtime state's manifests render, install into RUNTIME_ROOT, and ask for no more than that."""

from __future__ import annotations

from typing import Any

import pytest

from sro.api.names import RUNTIME_ROOT
from sro.manifests import render


def _objects(**values: Any) -> dict[str, Any]:
    docs = render("runtime", image="localhost/sro:test", namespace="sro-system", **values)
    return {d["kind"]: d for d in docs}


@pytest.mark.parametrize("recipe", ["simulated-gpu", "nvidia-gpu"])
def test_least_privilege(recipe: str) -> None:
    objs = _objects(recipe=recipe, pull_policy="Never")
    assert sorted(objs) == ["DaemonSet", "ServiceAccount"]
    sa, ds = objs["ServiceAccount"], objs["DaemonSet"]
    assert sa["metadata"]["name"] == "sro-runtime" and sa["automountServiceAccountToken"] is False
    assert ds["metadata"]["name"] == "sro-runtime"
    pod = ds["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == "sro-runtime"
    assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in pod["tolerations"]
    assert "affinity" not in pod and "nodeSelector" not in pod  # the operator adds those
    c, report = pod["containers"]
    assert report["name"] == "report" and report["securityContext"] == c["securityContext"]
    assert [m["mountPath"] for m in report["volumeMounts"]] == ["/run/sro-runtime"]  # no host path
    assert "--cdi-dir=/var/run/cdi" in c["command"]
    assert "--report-file=/run/sro-runtime/report" in c["command"]
    assert c["imagePullPolicy"] == "Never"
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["resources"]["limits"]["memory"]
    assert c["command"][:3] == ["sro", "runtime", "install"]
    assert f"--root={RUNTIME_ROOT}" in c["command"] and f"--recipe={recipe}" in c["command"]
    assert "--wait" in c["command"] and "--python=/usr/bin/python3" in c["command"]
    ready = next(a.split("=", 1)[1] for a in c["command"] if a.startswith("--ready-file="))
    assert (
        c["readinessProbe"]["exec"]["command"][:2] == ["sh", "-c"]
        and c["readinessProbe"]["exec"]["command"][-1] == ready
    )

    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    host = {name: v["hostPath"]["path"] for name, v in volumes.items() if "hostPath" in v}
    assert host["runtime-root"] == RUNTIME_ROOT == mounts["runtime-root"]["mountPath"]
    assert not mounts["runtime-root"].get("readOnly")
    assert host["cdi-specs"] == "/var/run/cdi" == mounts["cdi-specs"]["mountPath"]  # live CDI specs
    assert not mounts["cdi-specs"].get("readOnly")
    for name in set(host) - {"runtime-root", "cdi-specs"}:  # the rest of the host: read-only, under /host
        assert mounts[name]["readOnly"] is True and mounts[name]["mountPath"] == "/host" + host[name]
    assert "/" not in host.values() and not any(p.startswith("/run") or p == "/var" for p in host.values())
    assert "--host-root=/host" in c["command"]


def test_driver_root_python_name_and_mode_are_values() -> None:
    ds = _objects(
        name="sro-runtime-gpus",
        recipe="nvidia-gpu",
        driver_root="/run/nvidia/driver",
        python="/opt/python/bin/python3.11",
        runtime_mode="cdi",
    )["DaemonSet"]
    assert ds["metadata"]["name"] == "sro-runtime-gpus"
    assert "--owner=sro-runtime-gpus" in ds["spec"]["template"]["spec"]["containers"][0]["command"]
    assert ds["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "sro-runtime-gpus"
    pod = ds["spec"]["template"]["spec"]
    c, _report = pod["containers"]
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert {"--driver-root=/run/nvidia/driver", "--python=/opt/python/bin/python3.11", "--mode=cdi"} <= set(
        c["command"]
    )
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/host/run/nvidia/driver"]["readOnly"] is True
    assert not any("mountPropagation" in m for m in mounts.values())  # needs a shared host /: not everywhere
    assert "/host/opt/python/bin" in mounts


def test_simulated_is_labelled_and_mounts_its_driver_root() -> None:
    ds = _objects(recipe="simulated-gpu")["DaemonSet"]
    assert ds["metadata"]["labels"]["sro.dev/simulated"] == "true"
    host = {v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert "/var/lib/sro/driver/simulated-gpu" in host
    nv = _objects(recipe="nvidia-gpu")["DaemonSet"]
    assert "sro.dev/simulated" not in nv["metadata"]["labels"]
    assert {v["hostPath"]["path"] for v in nv["spec"]["template"]["spec"]["volumes"] if "hostPath" in v} == {
        RUNTIME_ROOT,
        "/var/run/cdi",
        "/usr",
        "/dev",
    }


def test_the_hook_honours_management_requests_in_the_operators_namespace_only() -> None:
    docs = render("runtime", image="localhost/sro:test", namespace="gpu-operators")
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    command = ds["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--management-namespace=gpu-operators" in command
    assert not any("accept-envvar-unprivileged" in a for a in command)  # the unsafe option stays off
