"""The operator on OpenShift: the runtime state also writes CRI-O's hooks.d (pure reconcile)."""

from __future__ import annotations

from typing import Any

from sro.api.openshift import CRIO_HOOKS_DIR
from sro.operator.observed import NodeInfo, Observed, SpecialResourceInfo
from sro.operator.reconcile import reconcile

NODE = NodeInfo(name="n1", labels={"kubernetes.io/hostname": "n1", "sro.dev/simulated-gpu.enabled": "true"})
SR = SpecialResourceInfo(name="gpus", uid="u", spec={"recipe": "simulated-gpu"})


def _runtime(openshift: bool) -> dict[str, Any]:
    plan = reconcile(
        Observed(sr=SR, nodes=(NODE,), image="localhost/sro:t", openshift=openshift), "sro-system"
    )
    (ds,) = [
        o for o in plan.apply if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "sro-gpus-runtime"
    ]
    return dict(ds["spec"]["template"]["spec"])


def test_runtime_state_writes_crio_hooks_d_on_openshift_only() -> None:
    pod = _runtime(openshift=True)
    c = pod["containers"][0]  # the second is the report container
    assert f"--crio-hooks-dir={CRIO_HOOKS_DIR}" in c["command"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert not mounts[CRIO_HOOKS_DIR].get("readOnly")
    assert {"name": "crio-hooks", "hostPath": {"path": CRIO_HOOKS_DIR, "type": "DirectoryOrCreate"}} in pod[
        "volumes"
    ]
    plain = _runtime(openshift=False)
    assert not any("crio" in a for a in plain["containers"][0]["command"])
    assert all(v["name"] != "crio-hooks" for v in plain["volumes"])
