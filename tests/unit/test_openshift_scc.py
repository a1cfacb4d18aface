"""Every pod sro runs, rendered from its templates in each variant, against the SCC its account is granted.

SCCs are enforced only by OpenShift's API server (the local cluster merely stores them), so this is
where "privileged only for the driver, the least that works for the others" is checked: each pod
passes its SCC's admission rules unchanged (`sro.openshift.admission.check`), mounts read-write only
the host paths its operand may write, and each SCC grants nothing its pods do not use (`excess`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sro.api.openshift import CRIO_HOOKS_DIR
from sro.install import scc as sccs
from sro.manifests import components, render
from sro.openshift.admission import check, excess, writable_host_paths

BASE: dict[str, Any] = dict(namespace="sro-system", image="localhost/sro:t", pull_policy="Never", sr="gpus")
NVIDIA = dict(recipe="nvidia-gpu", driver_root="/run/nvidia/driver")
SIM = dict(recipe="simulated-gpu")
# component -> the value sets the operator (or `sro install`) renders it with
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "operator": [{}],
    "discovery": [{"sleep_interval": "10s"}],
    "driver": [
        {**SIM, "name": "sro-gpus-driver-6-1"},
        {**NVIDIA, "name": "sro-gpus-driver-6-1", "driver_image": "registry.example/driver:550-6.1"},
    ],
    "runtime": [
        {**SIM, "name": "sro-gpus-runtime"},
        {**NVIDIA, "name": "sro-gpus-runtime"},
        {**SIM, "name": "sro-gpus-runtime", "hooks_dir": CRIO_HOOKS_DIR},
    ],
    "device-plugin": [
        {**SIM, "name": "sro-gpus-device-plugin"},
        {**NVIDIA, "name": "sro-gpus-device-plugin", "runtime_class": "sro"},
    ],
    "monitoring": [
        {**SIM, "name": "sro-gpus-monitoring"},
        {**NVIDIA, "name": "sro-gpus-monitoring", "runtime_class": "sro", "prometheus_operator": True},
    ],
    "validation": [
        {**v, "name": "sro-gpus-validate", "node": "vm", "check": check_}
        for v in (SIM, NVIDIA)
        for check_ in ("driver", "workload")
    ],
    "upgrade": [{**v, "name": "sro-holders-vm", "node": "vm"} for v in (SIM, NVIDIA)],
    "remediation": [
        {
            **v,
            "name": "sro-gpus-remediation-vm",
            "node": "vm",
            "action": action,
            "devices": ["GPU-0"],
            "token": "t",
        }
        for v in (SIM, NVIDIA)
        for action in ("reset", "reboot")
    ],
}
# Components that are not operands: `node-report` is an example for `sro manifests render`, deployed
# by neither `sro install` nor the operator.
NOT_OPERANDS = {"node-report"}


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    if obj["kind"] == "Pod":
        return dict(obj["spec"])
    if obj["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
        return dict(obj["spec"]["template"]["spec"])
    return None


def pods() -> Iterator[tuple[str, dict[str, Any]]]:
    for component, variants in VARIANTS.items():
        for i, values in enumerate(variants):
            for obj in render(component, **{**BASE, **values}):
                spec = _pod_spec(obj)
                if spec is not None:
                    yield f"{component}[{i}] {obj['kind']} {obj['metadata']['name']}", spec


PODS = list(pods())


def test_every_operand_component_is_covered() -> None:
    assert set(VARIANTS) == set(components()) - NOT_OPERANDS


@pytest.mark.parametrize(("what", "pod"), PODS, ids=[w for w, _ in PODS])
def test_pod_is_admitted_unchanged_by_its_scc(what: str, pod: dict[str, Any]) -> None:
    account = pod.get("serviceAccountName", "default")
    assert account in sccs.BY_ACCOUNT, f"{what} runs as {account}, which no SCC is granted to"
    op = sccs.BY_ACCOUNT[account]
    assert check(sccs.scc(op), pod) == []
    writable = writable_host_paths(pod)
    if "*" not in op.writable:
        assert set(writable) <= set(op.writable), f"{what} writes host paths its operand may not"


@pytest.mark.parametrize("op", sccs.OPERANDS, ids=[o.account for o in sccs.OPERANDS])
def test_scc_grants_nothing_its_pods_do_not_use(op: sccs.Operand) -> None:
    mine = [p for _, p in PODS if p.get("serviceAccountName", "default") == op.account]
    assert mine, f"no pod runs as {op.account}"
    assert excess(sccs.scc(op), mine) == []
    if op.writable and "*" not in op.writable:
        written = {path for p in mine for path in writable_host_paths(p)}
        assert written == set(op.writable), f"{op.account} may write {op.writable} but writes {written}"


def test_privileged_only_for_the_driver() -> None:
    privileged = {o.scc for o in sccs.OPERANDS if sccs.scc(o)["allowPrivilegedContainer"]}
    assert privileged == {"sro-driver"}
    for o in sccs.OPERANDS:
        s = sccs.scc(o)
        assert s["allowHostNetwork"] is False and s["allowHostIPC"] is False and s["allowHostPorts"] is False
        assert s["users"] == [] and s["groups"] == []  # granted through RBAC only
        assert s["allowHostPID"] is (o.account == "sro-holder-scan")


def test_privileged_pods_are_the_driver_its_validation_and_a_real_gpu_reset() -> None:
    privileged = sorted(
        w for w, p in PODS if any((c.get("securityContext") or {}).get("privileged") for c in p["containers"])
    )
    assert privileged == [  # the simulated driver (driver[0]) has CAP_MKNOD alone
        "driver[1] DaemonSet sro-gpus-driver-6-1",
        "remediation[2] Pod sro-gpus-remediation-vm",  # a real GPU reset: /dev/nvidia*, chroot
        "validation[2] Pod sro-gpus-validate",
    ]


def test_the_checker_refuses_what_an_scc_does_not_allow() -> None:
    restricted = sccs.scc(sccs.BY_ACCOUNT["sro-device-plugin"])
    pod = {
        "hostNetwork": True,
        "volumes": [{"name": "v", "nfs": {"server": "x", "path": "/"}}],
        "securityContext": {"runAsUser": 0},
        "containers": [
            {
                "name": "c",
                "ports": [{"containerPort": 1, "hostPort": 1}],
                "securityContext": {
                    "privileged": True,
                    "capabilities": {"add": ["SYS_ADMIN"]},
                    "readOnlyRootFilesystem": False,
                    "seccompProfile": {"type": "Unconfined"},
                },
            }
        ],
    }
    problems = "\n".join(check(restricted, pod))
    for word in ("hostNetwork", "nfs", "hostPort", "privileged", "SYS_ADMIN", "writable root", "unconfined"):
        assert word in problems
    nonroot = sccs.scc(sccs.BY_ACCOUNT["sro-operator"])
    assert any("non-root" in p for p in check(nonroot, {"containers": [{"name": "c"}]}))
    assert "allowPrivilegedContainer: no container is privileged" in excess(
        sccs.scc(sccs.BY_ACCOUNT["sro-driver"]), [{"containers": [{"name": "c"}]}]
    )


def test_grants_name_each_account_and_its_scc() -> None:
    objs = sccs.objects("ns")
    kinds = [o["kind"] for o in objs]
    n = len(sccs.OPERANDS)
    assert kinds.count("SecurityContextConstraints") == n
    assert kinds.count("RoleBinding") == n and kinds.count("ClusterRole") == n + 1
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRole"}
    for o in objs:
        if o["kind"] == "RoleBinding":
            assert o["metadata"]["namespace"] == "ns"
            (subject,) = o["subjects"]
            op = sccs.BY_ACCOUNT[subject["name"]]
            assert subject["namespace"] == "ns" and o["roleRef"]["name"] == op.role
            (rule,) = roles[op.role]["rules"]
            assert rule == {
                "apiGroups": ["security.openshift.io"],
                "resources": ["securitycontextconstraints"],
                "resourceNames": [op.scc],
                "verbs": ["use"],
            }
    for o in objs:
        assert o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "sro"
    # every rule of the operator's OpenShift role is narrowed to sro's own names
    assert all(rule.get("resourceNames") for rule in roles[sccs.OPERATOR_ROLE]["rules"])
