"""Where the local cluster keeps everything, and the fixed facts of its network (pure, no I/O).

One frozen `Layout` names every path and port, so `up`, `down`, `status` and the tests agree on what
belongs to the cluster: `down` removes exactly what is listed here and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sro import __version__

# Debian's kubernetes source package; the build cache is keyed by it (and by Go's version).
KUBERNETES_SOURCE_PACKAGE = "kubernetes"
KUBE_BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "kubectl",
    # hollow nodes (`sro local up --hollow-nodes N`): a real kubelet with a fake container runtime
    "kubemark",
)
# Binaries added to the build after caches without them were made: such a cache is completed by
# building only these into it (the others, maybe running, stay untouched), never rebuilt whole.
ADDED_BINARIES = ("kubemark",)

SERVICE_CIDR = "10.96.0.0/12"
KUBERNETES_SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/24"
CLUSTER_DOMAIN = "cluster.local"

PAUSE_IMAGE = "localhost/pause:sro"
BUSYBOX_IMAGE = "localhost/busybox:sro"
# glibc + busybox, for pods that run the driver's dynamically linked tools (nvidia-smi), as CUDA images do
GLIBC_IMAGE = f"localhost/sro-glibc:{__version__}"
RUNTIME_HANDLER = "sro"  # containerd runtime handler (and RuntimeClass) running `sro runtime`


@dataclass(frozen=True)
class Ports:
    etcd_client: int = 2379
    etcd_peer: int = 2380
    apiserver: int = 6443
    kubelet: int = 10250
    kubelet_healthz: int = 10248
    scheduler: int = 10259
    controller_manager: int = 10257
    proxy_metrics: int = 10249
    proxy_healthz: int = 10256
    hollow_rules: int = 10390  # the hollow nodes' failure rules server (sro local up --hollow-nodes)
    prometheus: int = 9090  # sro local up --prometheus (Prometheus's default: `sro report` needs no URL)
    prometheus_targets: int = 10391  # its file_sd loop's health (sro local prometheus-targets)

    def all(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass(frozen=True)
class Layout:
    """Every path of the local cluster. `state` is ours alone; the others are the daemons' defaults."""

    state: Path = Path("/var/lib/sro-local")
    cache: Path = Path("/var/cache/sro")
    kubelet_root: Path = Path("/var/lib/kubelet")  # standard, so device plugins find kubelet.sock
    containerd_root: Path = Path("/var/lib/containerd")
    containerd_state: Path = Path("/run/containerd")
    ports: Ports = Ports()

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.state / "etcd"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log of writes (JSON lines; the policy is `components.AUDIT_POLICY`),
        rotated by the API server itself to `kube-apiserver-audit-<time>.log` beside it."""
        return self.logs / "kube-apiserver-audit.log"

    @property
    def run(self) -> Path:
        return self.state / "run"  # pid files

    @property
    def config(self) -> Path:
        return self.state / "config"

    @property
    def cni_conf_dir(self) -> Path:
        return self.state / "cni"

    @property
    def bin(self) -> Path:
        return self.state / "bin"  # launchers we generate (runtime wrapper) and links to kube binaries

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    def kubeconfig(self, component: str) -> Path:
        return self.config / f"{component}.kubeconfig"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def pidfile(self, component: str) -> Path:
        return self.run / f"{component}.pid"

    def kube_cache(self, key: str) -> Path:
        return self.cache / "kubernetes" / key

    @property
    def image_cache(self) -> Path:
        return self.cache / "images"

    @property
    def managed_mount_roots(self) -> tuple[Path, ...]:
        """Mounts under these belong to the cluster (pod volumes, container rootfs, sandboxes)."""
        return (self.kubelet_root, self.containerd_root, self.containerd_state, Path("/run/netns"))
