"""One SecurityContextConstraints per operand, the RBAC `use` grant of each, the operator's OpenShift role.

Why one SCC per service account and not the built-in `privileged` / `hostaccess`: on OpenShift every
pod is admitted under an SCC its service account may `use`, and the built-in ones grant far more
than any of sro's pods needs (hostaccess: host network, PID and IPC for all). So each operand gets
an SCC that allows exactly what its pods do — privileged only for the driver, which makes device
nodes and loads kernel modules; for the others no privilege, every capability dropped but the one
or two a pod adds, host paths only where it reads (or, for three of them, writes) the node, no host
network anywhere — and one ClusterRole (`use` on that SCC alone) bound in the install namespace to
that one account. `tests/unit/test_openshift_scc.py` checks every operand's rendered pods against
the SCC its account is granted (`sro.openshift.admission`), and that each SCC grants nothing its
pods do not use.

Where the host paths are written (the `writable` of an operand: the driver, the runtime files, the
kubelet's device-plugin directory) an SCC cannot say which paths; the same test checks that every
other hostPath mount is read-only.

SELinux: the SCCs of operands that touch host paths leave the SELinux context to the pod (RunAsAny)
rather than pin the namespace's MCS label, because a host directory is not labelled for one
namespace. On RHCOS a container of type `container_t` may still be refused writes to a host
directory that is not `container_file_t`; that (and every other SELinux outcome) cannot be checked
on this project's clusters, which have no SELinux.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sro.api.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, NAMESPACE, RUNTIME_ROOT
from sro.api.openshift import (
    CLUSTER_OPERATOR_API_VERSION,
    CLUSTER_OPERATOR_KIND,
    CLUSTER_OPERATOR_NAME,
    CLUSTER_OPERATOR_PLURAL,
    CONFIG_GROUP,
    CRIO_HOOKS_DIR,
    SCC_API_VERSION,
    SCC_GROUP,
    SCC_KIND,
    SCC_PLURAL,
)

RBAC: Final = "rbac.authorization.k8s.io"
RBAC_V1: Final = f"{RBAC}/v1"
OPERATOR_ROLE: Final = "sro-operator-openshift"
KUBELET_PLUGINS: Final = "/var/lib/kubelet/device-plugins"
HEALTH_DIR: Final = "/var/lib/sro/health"  # the device plugin's health reports (sro.devices.healthreport)
# The token of an account whose token is mounted comes as one of these volumes (projected since
# Kubernetes 1.21 and on OpenShift 4; a secret volume on older clusters such as the local 1.20).
TOKEN_VOLUMES: Final = ("projected", "secret")


@dataclass(frozen=True)
class Operand:
    """A service account of sro's, the SCC it is granted and why it needs what that SCC allows."""

    account: str
    why: str
    privileged: bool = False
    host_pid: bool = False
    host_dir: bool = False  # hostPath volumes at all
    writable: tuple[str, ...] = ()  # host paths its pods may mount read-write ("*": any)
    run_as: str = "RunAsAny"  # RunAsAny | MustRunAsNonRoot
    capabilities: tuple[str, ...] = ()  # it adds these (every other is dropped)
    volumes: tuple[str, ...] = ()  # volume types besides hostPath
    token: bool = False  # its service-account token is mounted
    read_only_root: bool = True

    @property
    def scc(self) -> str:
        return self.account

    @property
    def role(self) -> str:
        """The ClusterRole granting `use` of its SCC (and the RoleBinding's name)."""
        return self.account.replace("sro-", "sro-scc-", 1)


OPERANDS: Final[tuple[Operand, ...]] = (
    Operand(
        "sro-operator",
        "the operator: nobody, no host access, its token (it talks to the API) and a memory /tmp",
        run_as="MustRunAsNonRoot",
        volumes=("emptyDir",),
        token=True,
    ),
    Operand(
        "sro-discovery",
        "feature discovery: nobody, reads /sys, /proc, os-release, kernel configs and features.d "
        "through read-only host paths; its token (it labels its Node)",
        host_dir=True,
        run_as="MustRunAsNonRoot",
        volumes=("configMap",),
        token=True,
    ),
    Operand(
        "sro-driver",
        "the driver: makes device nodes under the host's /dev and (real hardware) loads kernel modules, "
        "with Bidirectional mount propagation of its driver root; privileged, as any driver container "
        "is (also the driver validation of a real NVIDIA driver, before any hook grants /dev/nvidia*)",
        privileged=True,
        host_dir=True,
        writable=("*",),
        volumes=("configMap",),
        read_only_root=False,
    ),
    Operand(
        "sro-runtime",
        "the runtime files: root (its host directory is root's), writes only that directory and "
        "CRI-O's hooks.d and the live CDI specs (/var/run/cdi), reads /usr, /dev and the driver root; "
        "no capability",
        host_dir=True,
        writable=(RUNTIME_ROOT, CRIO_HOOKS_DIR, "/var/run/cdi"),
        volumes=("emptyDir",),
    ),
    Operand(
        "sro-device-plugin",
        "the device plugin: root (the kubelet's device-plugin directory is root's), writes its socket "
        "there and its node's device health report in /var/lib/sro/health, reads the driver root and "
        "the kubelet's pod-resources socket; no capability",
        host_dir=True,
        writable=(KUBELET_PLUGINS, HEALTH_DIR),
        volumes=("configMap", "emptyDir"),
    ),
    Operand(
        "sro-exporter",
        "the exporter: root (the kubelet's pod-resources socket is root's), reads it and the driver "
        "root; no capability; its token (it reads its Node); its ready file in an emptyDir",
        host_dir=True,
        volumes=("configMap", "emptyDir"),
        token=True,
    ),
    Operand(
        "sro-validation",
        "validation pods: the driver check reads the driver root and /dev read-only as nobody; the "
        "workload check runs as root with CAP_MKNOD alone, to show the device cgroup refuses what "
        "was not granted, and writes its probe node in its own root filesystem",
        host_dir=True,
        capabilities=("MKNOD",),
        read_only_root=False,
    ),
    Operand(
        "sro-holder-scan",
        "a driver upgrade's holder scan: the node's processes (hostPID) and their fds and maps "
        "(CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH) as root, the driver root and /dev read-only",
        host_pid=True,
        host_dir=True,
        capabilities=("SYS_PTRACE", "DAC_READ_SEARCH"),
    ),
)
BY_ACCOUNT: Final[Mapping[str, Operand]] = {o.account: o for o in OPERANDS}


def _labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": component,
        "app.kubernetes.io/component": "openshift",
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
    }


def scc(op: Operand) -> dict[str, Any]:
    """The SCC of one operand (security.openshift.io/v1, OpenShift's field names)."""
    volumes = sorted(
        {*op.volumes, *(TOKEN_VOLUMES if op.token else ()), *(("hostPath",) if op.host_dir else ())}
    )
    return {
        "apiVersion": SCC_API_VERSION,
        "kind": SCC_KIND,
        "metadata": {
            "name": op.scc,
            "labels": _labels(op.account),
            "annotations": {"kubernetes.io/description": op.why},
        },
        "allowHostDirVolumePlugin": op.host_dir,
        "allowHostIPC": False,
        "allowHostNetwork": False,
        "allowHostPID": op.host_pid,
        "allowHostPorts": False,
        "allowPrivilegedContainer": op.privileged,
        "allowPrivilegeEscalation": op.privileged,  # privileged implies it; nobody else needs it
        "defaultAllowPrivilegeEscalation": False,
        "allowedCapabilities": ["*"] if op.privileged else list(op.capabilities),
        "defaultAddCapabilities": [],
        "requiredDropCapabilities": [] if op.privileged else ["ALL"],
        "readOnlyRootFilesystem": op.read_only_root,
        "runAsUser": {"type": op.run_as},
        # host paths are not labelled for one namespace: the pod says (or the runtime picks)
        "seLinuxContext": {"type": "RunAsAny" if op.host_dir else "MustRunAs"},
        "fsGroup": {"type": "RunAsAny"},
        "supplementalGroups": {"type": "RunAsAny"},
        "seccompProfiles": ["*"] if op.privileged else ["runtime/default"],
        "volumes": volumes,
        # granted through RBAC (`use`, below), never through these lists
        "users": [],
        "groups": [],
    }


def use_role(op: Operand) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_V1,
        "kind": "ClusterRole",
        "metadata": {"name": op.role, "labels": _labels(op.account)},
        "rules": [
            {"apiGroups": [SCC_GROUP], "resources": [SCC_PLURAL], "resourceNames": [op.scc], "verbs": ["use"]}
        ],
    }


def use_binding(op: Operand, namespace: str) -> dict[str, Any]:
    """The grant: a RoleBinding in the install namespace, so only that namespace's account may use it."""
    return {
        "apiVersion": RBAC_V1,
        "kind": "RoleBinding",
        "metadata": {"name": op.role, "namespace": namespace, "labels": _labels(op.account)},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": op.role},
        "subjects": [{"kind": "ServiceAccount", "name": op.account, "namespace": namespace}],
    }


def operator_rules(extra_sccs: Iterable[str] = ()) -> list[dict[str, Any]]:
    """What the operator needs on OpenShift, besides its Kubernetes roles: to keep the SCCs and the
    grants of `grant_objects` in place itself (a bundle or a plain `deploy/` install has none), and
    to write its ClusterOperator. Every rule is narrowed to sro's own object names.

    It holds `use` of the SCCs because RBAC lets an account create a role, or bind one, only with
    permissions it holds itself; holding them adds nothing it could not do already (it creates
    DaemonSets that run under these accounts). Writing an SCC is a cluster-admin-level right (an
    SCC's own `users` field grants it): installs that create them up front may remove the first rule.
    """
    sccs = [*(o.scc for o in OPERANDS), *extra_sccs]
    roles = [o.role for o in OPERANDS]
    return [
        {"apiGroups": [SCC_GROUP], "resources": [SCC_PLURAL], "resourceNames": sccs,
         "verbs": ["get", "create", "patch", "use"]},
        {"apiGroups": [RBAC], "resources": ["clusterroles"], "resourceNames": roles,
         "verbs": ["get", "create", "patch"]},
        {"apiGroups": [RBAC], "resources": ["rolebindings"], "resourceNames": roles,
         "verbs": ["get", "create", "patch"]},
        {"apiGroups": [CONFIG_GROUP], "resources": [CLUSTER_OPERATOR_PLURAL],
         "resourceNames": [CLUSTER_OPERATOR_NAME], "verbs": ["get", "create", "patch"]},
        {"apiGroups": [CONFIG_GROUP], "resources": [f"{CLUSTER_OPERATOR_PLURAL}/status"],
         "resourceNames": [CLUSTER_OPERATOR_NAME], "verbs": ["get", "patch", "update"]},
    ]  # fmt: skip


def operator_role() -> dict[str, Any]:
    return {
        "apiVersion": RBAC_V1,
        "kind": "ClusterRole",
        "metadata": {"name": OPERATOR_ROLE, "labels": _labels("sro-operator")},
        "rules": operator_rules(),
    }


def operator_binding(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_V1,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": OPERATOR_ROLE, "labels": _labels("sro-operator")},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": OPERATOR_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "sro-operator", "namespace": namespace}],
    }


def grant_objects(namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """Every SCC with its `use` ClusterRole and RoleBinding: what the operator keeps in place itself."""
    out: list[dict[str, Any]] = [scc(o) for o in OPERANDS]
    out += [use_role(o) for o in OPERANDS]
    out += [use_binding(o, namespace) for o in OPERANDS]
    return out


def cluster_operator() -> dict[str, Any]:
    """The ClusterOperator the operator mirrors its SpecialResources into (`spec` is required, empty)."""
    return {
        "apiVersion": CLUSTER_OPERATOR_API_VERSION,
        "kind": CLUSTER_OPERATOR_KIND,
        "metadata": {"name": CLUSTER_OPERATOR_NAME, "labels": _labels("sro-operator")},
        "spec": {},
    }


def objects(namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """What `sro install --platform openshift` adds: the grants, the operator's OpenShift role and its
    ClusterOperator (whose status the operator writes; `sro uninstall` removes it with the rest)."""
    return [*grant_objects(namespace), operator_role(), operator_binding(namespace), cluster_operator()]
