"""The daemons of the local cluster as data: each one's command line, config files and health check.

Pure: given the layout, the node's name and address and where the binaries are, this returns what to
write and what to run. `cluster.py` does the I/O. Keeping it data makes the flags reviewable in one
place and lets a unit test check, say, that the admission plugins the issue asks for are all on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sro.api.names import NAMESPACE, OPERATOR_LEASE, RUNTIME_LAUNCHER
from sro.local.layout import (
    CLUSTER_DOMAIN,
    PAUSE_IMAGE,
    POD_CIDR,
    RUNTIME_HANDLER,
    SERVICE_CIDR,
    Layout,
)

ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "DefaultTolerationSeconds",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ExtendedResourceToleration",
    "ResourceQuota",
    "Priority",
    "NodeRestriction",
)


# The API server's audit policy: who wrote what, and nothing of reads or watches, so that the log stays
# small enough to read continuously (the fault campaign's observer follows it: one leader acts at a time,
# an eviction is accepted once). Rules apply first match first.
# - the operator's Lease (`sro-operator`) at Request level: its writes carry holderIdentity (a renewal, a
#   take-over, a release to none), which Metadata does not show. A create names no object in its URL, so
#   a rule with resourceNames never matches it: the Lease's first write (a fresh install) is matched by
#   the rule for creates of Leases in sro's namespace, the only Lease there;
# - the nodes' heartbeats (their Leases in kube-node-lease, every 10 s per node, from hollow and
#   simulated nodes too) and Events: left out, they would be most of the log and say nothing about who acted;
# - every other write on every resource and subresource (pods/eviction creates, nodes/status patches)
#   at Metadata level: verb, user, user agent, object, response code.
AUDIT_WRITES = ("create", "update", "patch", "delete", "deletecollection")
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],  # one line per request, written when its response is complete
    "rules": [
        {
            "level": "Request",
            "verbs": list(AUDIT_WRITES),
            "resources": [
                {"group": "coordination.k8s.io", "resources": ["leases"], "resourceNames": [OPERATOR_LEASE]}
            ],
        },
        {
            "level": "Request",
            "verbs": ["create"],
            "namespaces": [NAMESPACE],
            "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
        },
        {"level": "None", "namespaces": ["kube-node-lease"]},
        {"level": "None", "resources": [{"group": "", "resources": ["events"]}]},
        {"level": "None", "resources": [{"group": "events.k8s.io", "resources": ["events"]}]},
        {"level": "Metadata", "verbs": list(AUDIT_WRITES)},
        {"level": "None"},
    ],
}
AUDIT_LOG_MAX_MB = 50


def audit_policy_file(layout: Layout) -> tuple[Path, str]:
    """Where the policy is written, and its text. The name carries the text's hash: the API server
    reads the policy only at start, and `up` restarts it when its command line changes."""
    text = yaml.safe_dump(AUDIT_POLICY, sort_keys=False)
    return layout.config / f"audit-policy-{hashlib.sha256(text.encode()).hexdigest()[:10]}.yaml", text


AUDIT_LOG_BACKUPS = 2


@dataclass(frozen=True)
class Health:
    """How to tell the daemon is serving: an HTTP(S) URL (client cert from pki when `tls`) or a unix socket."""

    url: str = ""
    tls: bool = False
    socket: Path | None = None


@dataclass(frozen=True)
class Component:
    name: str
    argv: tuple[str, ...]
    health: Health
    files: Mapping[Path, str] = field(default_factory=dict)
    ports: tuple[int, ...] = ()
    # Another process running argv[0] is a copy of this daemon that sro did not start (`up` refuses
    # to start a second one). False where many run at once: Python, Prometheus.
    exclusive: bool = True


@dataclass(frozen=True)
class NodeFacts:
    name: str
    ip: str


# The API rate limits Kubernetes 1.20 gives the controller-manager and the scheduler by default:
# they bound how fast DaemonSet pods appear and are bound (scale runs raise them: `sro local up
# --kube-api-qps/--kube-api-burst`).
DEFAULT_API_LIMITS = {"kube-controller-manager": (20, 30), "kube-scheduler": (50, 100)}


@dataclass(frozen=True)
class ApiLimits:
    """--kube-api-qps/--kube-api-burst for the controller-manager and the scheduler; 0: their default."""

    qps: int = 0
    burst: int = 0

    def flags(self) -> tuple[str, ...]:
        out = []
        if self.qps:
            out.append(f"--kube-api-qps={self.qps}")
        if self.burst:
            out.append(f"--kube-api-burst={self.burst}")
        return tuple(out)

    def effective(self, component: str) -> tuple[int, int]:
        qps, burst = DEFAULT_API_LIMITS[component]
        return (self.qps or qps, self.burst or burst)

    def describe(self) -> str:
        return "; ".join(
            f"{c}: qps {q}, burst {b}" for c in DEFAULT_API_LIMITS for q, b in [self.effective(c)]
        )


def kubeconfig(server: str, pki: Path, cert: str, user: str) -> str:
    """A kubeconfig that authenticates with a client certificate from our CA."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "sro-local", "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")}}
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{cert}.crt"),
                    "client-key": str(pki / f"{cert}.key"),
                },
            }
        ],
        "contexts": [{"name": "sro-local", "context": {"cluster": "sro-local", "user": user}}],
        "current-context": "sro-local",
    }
    return yaml.safe_dump(doc, sort_keys=False)


# Where containerd >= 1.7 reads CDI specs: sro's runtime state writes the node's under /var/run/cdi
# (gone at reboot, like the devices it names), an admin's static ones go to /etc/cdi.
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


def _cdi_settings(cdi: bool) -> str:
    if not cdi:
        return "  # containerd < 1.7 reads no CDI specs: devices reach containers through the sro handler's hook\n"
    dirs = ", ".join(f'"{d}"' for d in CDI_SPEC_DIRS)
    return (
        "  # containerd >= 1.7: CDI devices named by the device plugin (cdi.k8s.io/ annotations)\n"
        f"  enable_cdi = true\n  cdi_spec_dirs = [{dirs}]\n"
    )


def containerd_config(layout: Layout, cdi: bool = False) -> str:
    """containerd's config (version 2: 1.6 and 1.7 read it); `cdi` when the binary reads CDI specs.

    Nothing here is deprecated in 1.7 (`ctr deprecations list` names only the CRI v1alpha2 API,
    which kubelet 1.20 speaks and 1.7 still serves): runc's cgroup driver is the runtime option
    `SystemdCgroup`, not the CRI plugin's `systemd_cgroup`, and no registry mirrors are set.
    """
    # TOML written by hand: the structure is fixed and small, and it avoids a TOML dependency.
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{layout.containerd_root}"
state = "{layout.containerd_state}"

[grpc]
  address = "{layout.containerd_socket}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # This VM lacks CAP_SYS_RESOURCE: negative oom_score_adj writes would fail every container start.
  restrict_oom_score_adj = true
{_cdi_settings(cdi)}
[{cri}.containerd]
  default_runtime_name = "runc"
  snapshotter = "overlayfs"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [{cri}.containerd.runtimes.runc.options]
    SystemdCgroup = false

# `sro runtime`: the runc wrapper that injects devices into containers that ask for them. Its launcher
# is `sro runtime install`'s to write (the runtime state's DaemonSet, or a test); `up` only puts the
# pass-through one (runc alone) there when there is none, so that the handler always has a binary.
[{cri}.containerd.runtimes.{RUNTIME_HANDLER}]
  runtime_type = "io.containerd.runc.v2"
  [{cri}.containerd.runtimes.{RUNTIME_HANDLER}.options]
    SystemdCgroup = false
    BinaryName = "{RUNTIME_LAUNCHER}"

[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{layout.cni_conf_dir}"
"""


def cni_conflist() -> str:
    return json.dumps(
        {
            "cniVersion": "0.4.0",
            "name": "sro",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "sro0",
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def components(
    layout: Layout, node: NodeFacts, bindir: Path, limits: ApiLimits = ApiLimits(), cdi: bool = False
) -> tuple[Component, ...]:
    """Every daemon, in start order (each depends only on those before it); `cdi`: containerd reads
    CDI specs (>= 1.7, see containerdversion)."""
    pki, p, cfg = layout.pki, layout.ports, layout.config
    policy_path, policy_text = audit_policy_file(layout)
    api = f"https://127.0.0.1:{p.apiserver}"

    def kc(component: str, cert: str, user: str) -> tuple[Path, str]:
        return layout.kubeconfig(component), kubeconfig(api, pki, cert, user)

    def secure_serving(component: str, port: int) -> tuple[str, ...]:
        """A control-plane daemon's flags for its own kubeconfig and for serving /healthz over TLS
        with its certificate (no insecure port, no leader election: there is one of each)."""
        conf = layout.kubeconfig(component)
        return (
            f"--kubeconfig={conf}",
            f"--authentication-kubeconfig={conf}",
            f"--authorization-kubeconfig={conf}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={pki / f'{component}.crt'}",
            f"--tls-private-key-file={pki / f'{component}.key'}",
            "--port=0",
            "--leader-elect=false",
        )

    etcd = Component(
        "etcd",
        (
            "/usr/bin/etcd",
            "--name=sro-local",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls=https://127.0.0.1:{p.etcd_client}",
            f"--advertise-client-urls=https://127.0.0.1:{p.etcd_client}",
            f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
            f"--initial-cluster=sro-local=http://127.0.0.1:{p.etcd_peer}",
            f"--cert-file={pki / 'etcd.crt'}",
            f"--key-file={pki / 'etcd.key'}",
            f"--trusted-ca-file={pki / 'ca.crt'}",
            "--client-cert-auth=true",
            "--log-level=warn",
            "--logger=zap",
        ),
        Health(url=f"https://127.0.0.1:{p.etcd_client}/health", tls=True),
        ports=(p.etcd_client, p.etcd_peer),
    )
    containerd = Component(
        "containerd",
        ("/usr/bin/containerd", f"--config={cfg / 'containerd.toml'}"),
        Health(socket=layout.containerd_socket),
        files={
            cfg / "containerd.toml": containerd_config(layout, cdi),
            layout.cni_conf_dir / "10-sro.conflist": cni_conflist(),
        },
    )
    apiserver = Component(
        "kube-apiserver",
        (
            str(bindir / "kube-apiserver"),
            f"--advertise-address={node.ip}",
            "--bind-address=0.0.0.0",
            f"--secure-port={p.apiserver}",
            "--insecure-port=0",
            f"--etcd-servers=https://127.0.0.1:{p.etcd_client}",
            f"--etcd-cafile={pki / 'ca.crt'}",
            f"--etcd-certfile={pki / 'etcd.crt'}",
            f"--etcd-keyfile={pki / 'etcd.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            "--allow-privileged=true",
            f"--audit-policy-file={policy_path}",
            f"--audit-log-path={layout.audit_log}",
            "--audit-log-format=json",
            f"--audit-log-maxsize={AUDIT_LOG_MAX_MB}",
            f"--audit-log-maxbackup={AUDIT_LOG_BACKUPS}",
            "--v=1",
        ),
        Health(url=f"https://127.0.0.1:{p.apiserver}/readyz", tls=True),
        files={policy_path: policy_text},
        ports=(p.apiserver,),
    )
    controller_manager = Component(
        "kube-controller-manager",
        (
            str(bindir / "kube-controller-manager"),
            *secure_serving("controller-manager", p.controller_manager),
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            *limits.flags(),
            "--v=1",
        ),
        Health(url=f"https://127.0.0.1:{p.controller_manager}/healthz", tls=True),
        files=dict([kc("controller-manager", "controller-manager", "system:kube-controller-manager")]),
        ports=(p.controller_manager,),
    )
    scheduler = Component(
        "kube-scheduler",
        (
            str(bindir / "kube-scheduler"),
            *secure_serving("scheduler", p.scheduler),
            *limits.flags(),
            "--v=1",
        ),
        Health(url=f"https://127.0.0.1:{p.scheduler}/healthz", tls=True),
        files=dict([kc("scheduler", "scheduler", "system:kube-scheduler")]),
        ports=(p.scheduler,),
    )
    kubelet_config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.ip,
        "port": p.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": p.kubelet_healthz,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet.key"),
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "/etc/resolv.conf",
        # Images are imported locally and cannot be pulled again: never garbage-collect them, and do
        # not evict pods because a big shared disk is mostly full.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        # Compute node status every second, post it only when it changed (plus the 5-minute report):
        # a device the plugin marks unhealthy leaves the Node's allocatable within about a second,
        # instead of the default 10 s. The report's period must be set too: left unset, the kubelet
        # takes nodeStatusUpdateFrequency for it (its backward-compatible default) and posts the
        # whole status with new heartbeat times every second — a Node update a second to every
        # watcher of Nodes, which no cluster with the defaults sees.
        "nodeStatusUpdateFrequency": "1s",
        "nodeStatusReportFrequency": "5m",
    }
    kubelet = Component(
        "kubelet",
        (
            str(bindir / "kubelet"),
            f"--config={cfg / 'kubelet.yaml'}",
            f"--kubeconfig={layout.kubeconfig('kubelet')}",
            "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{layout.containerd_socket}",
            f"--node-ip={node.ip}",
            f"--hostname-override={node.name}",
            f"--root-dir={layout.kubelet_root}",
            "--v=1",
        ),
        Health(url=f"http://127.0.0.1:{p.kubelet_healthz}/healthz"),
        files={
            cfg / "kubelet.yaml": yaml.safe_dump(kubelet_config, sort_keys=False),
            layout.kubeconfig("kubelet"): kubeconfig(api, pki, "kubelet-client", f"system:node:{node.name}"),
        },
        ports=(p.kubelet, p.kubelet_healthz),
    )
    proxy_config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig("kube-proxy"))},
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "hostnameOverride": node.name,
        "bindAddress": "0.0.0.0",
        "metricsBindAddress": f"127.0.0.1:{p.proxy_metrics}",
        "healthzBindAddress": f"127.0.0.1:{p.proxy_healthz}",
        # Leave the host's conntrack sysctls alone (read-only in this VM).
        "conntrack": {"maxPerCore": 0},
    }
    proxy = Component(
        "kube-proxy",
        (str(bindir / "kube-proxy"), f"--config={cfg / 'kube-proxy.yaml'}", "--v=1"),
        Health(url=f"http://127.0.0.1:{p.proxy_healthz}/healthz"),
        files={
            cfg / "kube-proxy.yaml": yaml.safe_dump(proxy_config, sort_keys=False),
            layout.kubeconfig("kube-proxy"): kubeconfig(api, pki, "kube-proxy", "system:kube-proxy"),
        },
        ports=(p.proxy_metrics, p.proxy_healthz),
    )
    return (etcd, containerd, apiserver, controller_manager, scheduler, kubelet, proxy)


def admin_kubeconfig(layout: Layout) -> str:
    return kubeconfig(f"https://127.0.0.1:{layout.ports.apiserver}", layout.pki, "admin", "sro-admin")
