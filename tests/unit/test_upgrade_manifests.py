"""The holder-scan pod of a driver upgrade, and that it is the only pod of sro that sees the node's
processes: every template of every component, rendered for both recipes and both validation checks,
has no other pod spec with hostPID or CAP_SYS_PTRACE."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sro.api import holders as contract
from sro.manifests import components, render, templates

VALUES: dict[str, Any] = dict(
    name="sro-holders-vm",
    namespace="sro-system",
    node="vm",
    image="localhost/sro:t",
    pull_policy="Never",
)
SCAN = ("upgrade", "0100_holder-scan-pod.yaml")


def _pod(**values: Any) -> dict[str, Any]:
    docs = render("upgrade", **{**VALUES, **values})
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Pod"]
    return docs[1]


@pytest.mark.parametrize(
    ("recipe", "root"),
    [("simulated-gpu", "/var/lib/sro/driver/simulated-gpu"), ("nvidia-gpu", "/run/nvidia/driver")],
)
def test_holder_scan_pod(recipe: str, root: str) -> None:
    pod = _pod(recipe=recipe, driver_root=root, sr="gpus")
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "sro-holders-vm" and meta["namespace"] == "sro-system"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "sro"
    assert meta["annotations"] == {"container.apparmor.security.beta.kubernetes.io/scan": "unconfined"}
    assert spec["hostPID"] is True and spec["nodeName"] == "vm" and spec["restartPolicy"] == "Never"
    assert 30 <= spec["activeDeadlineSeconds"] <= 120
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "sro-holder-scan"
    assert "hostNetwork" not in spec and "hostIPC" not in spec
    keys = {t["key"] for t in spec["tolerations"]}
    assert keys >= {"node.kubernetes.io/unschedulable", "sro.dev/gpus.not-ready", "CriticalAddonsOnly"}
    (c,) = spec["containers"]
    assert c["command"][:3] == ["sro", "driver", "holders"] and f"--recipe={recipe}" in c["command"]
    assert "--proc-root=/proc" in c["command"]
    assert f"--termination-log={contract.TERMINATION_LOG}" in c["command"]
    assert c["terminationMessagePath"] == contract.TERMINATION_LOG and c["terminationMessagePolicy"] == "File"
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert "privileged" not in sc
    assert c["resources"]["requests"] == {"cpu": "10m", "memory": "32Mi"}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert all(m["readOnly"] for m in mounts.values())
    assert "--driver-root=/driver-root" in c["command"] and "--dev-root=/host-dev" in c["command"]
    volumes = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    assert volumes == {"driver-root": root, "host-dev": "/dev"}
    assert ("sro.dev/simulated" in meta["labels"]) == (recipe == "simulated-gpu")


def test_holder_scan_needs_its_values() -> None:
    with pytest.raises(ValueError, match="node"):
        render("upgrade", **{k: v for k, v in VALUES.items() if k != "node"})
    pod = _pod()  # recipe and driver root have defaults; the operator passes its own
    assert "--recipe=nvidia-gpu" in pod["spec"]["containers"][0]["command"]


def _value_sets() -> Iterator[dict[str, Any]]:
    for recipe in ("simulated-gpu", "nvidia-gpu"):
        for check in ("driver", "workload"):
            yield {**VALUES, "sr": "gpus", "recipe": recipe, "check": check, "driver_image": "x/driver:1"}


def _pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if obj.get("kind") == "Pod":
        yield obj["spec"]
    template = (obj.get("spec") or {}).get("template") or {}
    if "spec" in template:
        yield template["spec"]
    job = ((obj.get("spec") or {}).get("jobTemplate") or {}).get("spec", {}).get("template", {})
    if "spec" in job:
        yield job["spec"]


def _capabilities(spec: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        out |= set(((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or [])
    return out


def test_no_other_pod_sees_the_nodes_processes() -> None:
    rendered = 0
    for component in components():
        for values in _value_sets():
            for obj in render(component, **values):
                for spec in _pod_specs(obj):
                    rendered += 1
                    name = f"{component}: {obj['kind']} {obj['metadata']['name']} ({values['recipe']})"
                    if component == SCAN[0]:
                        assert spec["hostPID"] is True, name
                        continue
                    assert not spec.get("hostPID"), f"{name} has hostPID"
                    caps = {c.upper().removeprefix("CAP_") for c in _capabilities(spec)}
                    assert "SYS_PTRACE" not in caps, f"{name} adds SYS_PTRACE"
    assert rendered >= 8 * 4, "fewer pod specs than the components have?"
    # the same in the template text, so that a branch these values do not take cannot add them
    for component in components():
        for name, text in templates(component).items():
            if (component, name) == SCAN:
                continue
            assert "SYS_PTRACE" not in text, f"{component}/{name}"
            assert "hostPID: true" not in text and "hostPID: {{" not in text, f"{component}/{name}"
