"""`sro local up | down | status`: the orchestration of a real single-node Kubernetes.

Ordering and idempotence live here; what each daemon is lives in `components.py`, how processes are
started and checked in `supervisor.py`, what it sets on the host in `hostsetup.py`, and what gets
mounted and torn down in `cleanup.py`. `up` either ends with a Ready node or stops everything it
started and says why (with the log tail).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sro.api.names import RUNTIME_LAUNCHER, simulated_opt_in_label
from sro.api.recipes import SIMULATED_GPU
from sro.console.progress import Progress
from sro.local import cleanup, containerdversion, kubebuild, prometheus, supervisor
from sro.local.components import ApiLimits, Component, NodeFacts, admin_kubeconfig, components
from sro.local.hollow import HollowNodes
from sro.local.hostsetup import enable_forwarding, ensure_launcher, share_root_mount
from sro.local.images import ensure_base_images
from sro.local.layout import KUBERNETES_SERVICE_IP, RUNTIME_HANDLER, Layout
from sro.local.pki import cert_specs, ensure_pki

# Debian packages behind each binary `up` needs: the message on a missing one names what to install.
PREREQUISITES = {
    "/usr/bin/etcd": "etcd-server",
    "/usr/bin/containerd": "containerd",
    "/usr/sbin/runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "/usr/lib/cni/host-local": "containernetworking-plugins",
    "/usr/lib/cni/loopback": "containernetworking-plugins",
    "/usr/sbin/iptables": "iptables",
    "/usr/sbin/conntrack": "conntrack",
    "/usr/bin/ctr": "containerd",
    "/usr/bin/ss": "iproute2",
    "/usr/bin/go": "golang-go",
    "/usr/bin/dpkg-source": "dpkg-dev",
    "/usr/bin/gcc": "gcc",
}


STALE_DISCOVERY = "the server doesn't have a resource type"  # kubectl, with a stale discovery cache
# Restarted in place by `up` when their flags changed (the API rate limits, the API server's audit
# log): none holds state (etcd does), and clients reconnect.
RESTARTABLE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


class ClusterError(RuntimeError):
    """Something stops the cluster from coming up; the message says what and what to run."""


def _quiet(_: str) -> None:
    pass


def node_ip() -> str:
    """The address other pods reach the API on: the source address of the default route.

    The `kubernetes` Service refuses a loopback endpoint, so the apiserver must advertise this one.
    """
    out = subprocess.run(["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True, text=True)
    words = out.stdout.split()
    if "src" in words:
        return words[words.index("src") + 1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return str(s.getsockname()[0])
        except OSError as e:
            raise ClusterError(
                "no non-loopback IPv4 address found: the node needs one for in-cluster clients"
            ) from e


def node_name() -> str:
    return socket.gethostname().split(".")[0].lower()


@dataclass
class LocalCluster:
    layout: Layout
    node: NodeFacts

    @classmethod
    def default(cls) -> LocalCluster:
        return cls(Layout(), NodeFacts(node_name(), node_ip()))

    # ---- what users and tests need -------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.layout.admin_kubeconfig

    @property
    def node_name(self) -> str:
        return self.node.name

    def kubectl_path(self) -> Path:
        """Our kubectl, built from the same source as the server (any kubectl on PATH otherwise)."""
        ours = self.layout.bin / "kubectl"
        if ours.exists():
            return ours
        found = shutil.which("kubectl")
        if found is None:
            raise ClusterError("no kubectl: run `sro local up` first (it installs one next to the cluster)")
        return Path(found)

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))

        def run() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(self.kubectl_path()), *args],
                input=input,
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
            )

        out = run()
        if out.returncode != 0 and STALE_DISCOVERY in out.stderr:
            # kubectl keeps the API's resource list for 10 minutes (~/.kube/cache/discovery) and
            # resolves short names (`sr`) from it alone: a CRD installed since is unknown to it. The
            # cache is stale, not the server: drop it and ask once more with a fresh one.
            shutil.rmtree(Path.home() / ".kube" / "cache" / "discovery", ignore_errors=True)
            out = run()
        if check and out.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {out.stderr.strip() or out.stdout.strip()}")
        return out

    def _components(self, bindir: Path, everything: bool = False) -> tuple[Component, ...]:
        """The daemons `up` runs, in start order: the cluster's, then Prometheus and its targets loop
        where `up --prometheus` asked for them (`everything`: asked or not, for `down`)."""
        extra = prometheus.components(self.layout) if everything or prometheus.wanted(self.layout) else ()
        return self._cluster_components(bindir) + extra

    def components(self) -> tuple[Component, ...]:
        """The cluster's daemons as `up` starts them now (`sro local restart` starts one of them)."""
        return self._cluster_components(self.layout.bin)

    def _cluster_components(self, bindir: Path) -> tuple[Component, ...]:
        runtime = containerdversion.installed()  # its config asks for CDI where it reads it (>= 1.7)
        return components(
            self.layout, self.node, bindir, self.api_limits(), cdi=runtime is not None and runtime.reads_cdi
        )

    # ---- API rate limits of the controller-manager and scheduler (scale runs) -----------------
    @property
    def _limits_path(self) -> Path:
        return self.layout.config / "api-limits.json"

    def api_limits(self) -> ApiLimits:
        """The limits `up` starts them with: the last ones asked for (defaults: none asked)."""
        try:
            doc = json.loads(self._limits_path.read_text())
            return ApiLimits(int(doc.get("qps", 0)), int(doc.get("burst", 0)))
        except (OSError, ValueError, AttributeError):
            return ApiLimits()

    def set_api_limits(self, qps: int | None, burst: int | None) -> ApiLimits:
        """Remember new limits (None: keep that one; 0: the default) for `up` to apply."""
        old = self.api_limits()
        new = ApiLimits(old.qps if qps is None else qps, old.burst if burst is None else burst)
        if new != old:
            self._limits_path.parent.mkdir(parents=True, exist_ok=True)
            self._limits_path.write_text(json.dumps({"qps": new.qps, "burst": new.burst}) + "\n")
        return new

    def _flags_changed(self) -> list[str]:
        """Running daemons of RESTARTABLE whose command line is not the one `up` would start."""
        out = []
        for comp in self._components(self.layout.bin):
            proc = supervisor.running(self.layout, comp.name) if comp.name in RESTARTABLE else None
            if proc is not None and supervisor.cmdline(proc.pid) != comp.argv:
                out.append(comp.name)
        return out

    def _binaries_replaced(self) -> bool:
        """Whether `up` has new binaries to run: the build cache has a binary built before a source
        fix it now carries (or no manifest), or a running daemon's binary has been rebuilt since."""
        if not kubebuild.fixes_current(self.layout.kube_cache(kubebuild.cache_key())):
            return True
        procs = (supervisor.running(self.layout, c.name) for c in self._components(self.layout.bin))
        return any(p is not None and supervisor.binary_replaced(p.pid) for p in procs)

    def _containerd_reconfigured(self) -> bool:
        """Whether the running containerd read another config than `up` writes now: it reads it only
        at start, and what it is asked for follows its version (CDI from 1.7) and sro's own changes."""
        if supervisor.running(self.layout, "containerd") is None:
            return False
        comp = next(c for c in self._components(self.layout.bin) if c.name == "containerd")
        path = self.layout.config / "containerd.toml"
        try:
            return path.read_text() != comp.files[path]
        except OSError:
            return True

    # ---- hollow nodes ----------------------------------------------------------------------------
    def hollow(self) -> HollowNodes:
        return HollowNodes(self.layout, self.layout.bin)

    def scale_hollow(
        self, count: int | None, config_text: str | None, progress: Progress = _quiet
    ) -> list[str]:
        """`count` hollow nodes (None: as many as run now) with the config (None: the saved one)."""
        bindir = kubebuild.ensure_kubernetes(self.layout, progress)  # builds kubemark into an older cache
        self._install_tools(bindir)
        hollow = HollowNodes(self.layout, bindir)
        if count is None:
            count = len(hollow.nodes())
        return hollow.scale(count, config_text, progress)

    # ---- status ------------------------------------------------------------------------------
    def status(self) -> list[tuple[str, str, str]]:
        """(component, state, detail) for every daemon, without starting anything.

        States: running, unhealthy (alive but its health check fails), dead (`up` started it and it
        exited since: our pid file names a process that is gone), stopped (never started, or `down`).
        """
        rows = []
        for comp in self._components(self.layout.bin):
            proc = supervisor.running(self.layout, comp.name)
            if proc is None:
                if supervisor.stale_pidfile(self.layout, comp.name):
                    rows.append((comp.name, "dead", f"exited; log: {self.layout.log(comp.name)}"))
                else:
                    rows.append((comp.name, "stopped", ""))
            elif supervisor.healthy(self.layout, comp.health):
                rows.append((comp.name, "running", f"pid {proc.pid}"))
            else:
                rows.append((comp.name, "unhealthy", f"pid {proc.pid}; log: {self.layout.log(comp.name)}"))
        return rows

    def death_report(self, name: str, lines: int = 12) -> str:
        """What a dead daemon's log says about its end: the last lines, and before them the line where
        it crashed (a Go runtime fatal error or panic is followed by pages of goroutine stacks)."""
        return supervisor.crash_summary(supervisor.log_tail(self.layout, name, lines=5000), lines)

    def is_healthy(self) -> bool:
        return all(state == "running" for _, state, _ in self.status()) and self.node_ready()

    def node_ready(self) -> bool:
        if not self.kubeconfig.exists():
            return False
        out = self.kubectl(
            "get",
            "node",
            self.node.name,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
            check=False,
            timeout=15,
        )
        return out.returncode == 0 and out.stdout.strip() == "True"

    # ---- up ----------------------------------------------------------------------------------
    def preflight(self) -> None:
        if os.geteuid() != 0:
            raise ClusterError("sro local up needs root (it runs containerd, a kubelet and mounts)")
        needed = PREREQUISITES | (prometheus.PREREQUISITES if prometheus.wanted(self.layout) else {})
        missing = sorted({pkg for path, pkg in needed.items() if not Path(path).exists()})
        if missing:
            raise ClusterError(
                f"missing Debian packages: {' '.join(missing)}. Install them with "
                f"`apt-get install {' '.join(missing)}` or run `./scripts/setup-host`"
            )

    def _check_free(self, comp: Component) -> None:
        for port in comp.ports:
            owner = supervisor.port_owner(port)
            if owner is not None:
                raise ClusterError(
                    f"port {port} (needed by {comp.name}) is in use by {owner}; stop it, or if it is a "
                    "leftover of an earlier run, run `sro local down` first"
                )
        exe = comp.argv[0]
        others = supervisor.pids_of(exe) if comp.exclusive else []
        if others:
            pids = " ".join(map(str, others))
            raise ClusterError(
                f"{Path(exe).name} is already running (pid {pids}) without a pid file of ours, so "
                f"`sro local down` cannot stop it; if it is a leftover of an earlier run, `kill {pids}` and try again"
            )

    def ensure_up(self, progress: Progress = _quiet) -> bool:
        """Bring the cluster up unless it already runs healthy; returns whether anything was started."""
        if (
            self.is_healthy()
            and not self._flags_changed()
            and not self._binaries_replaced()
            and not self._containerd_reconfigured()
        ):
            progress("Local cluster already running and healthy")
            if share_root_mount():  # a cluster brought up before `up` did it
                progress("Made / a shared mount (mount propagation for hostPath volumes)")
            return False
        return self.up(progress)

    def up(self, progress: Progress = _quiet) -> bool:
        self.preflight()
        bindir = kubebuild.ensure_kubernetes(self.layout, progress)
        self._install_tools(bindir)
        for d in (
            self.layout.state,
            self.layout.config,
            self.layout.cni_conf_dir,
            self.layout.logs,
            self.layout.run,
        ):
            d.mkdir(parents=True, exist_ok=True)
        made = ensure_pki(self.layout.pki, cert_specs(self.node.name, self.node.ip, KUBERNETES_SERVICE_IP))
        if made:
            progress(f"Certificates issued: {', '.join(made)}")
        self.layout.admin_kubeconfig.write_text(admin_kubeconfig(self.layout))
        self.layout.admin_kubeconfig.chmod(0o600)
        enable_forwarding()
        if share_root_mount():
            progress("Made / a shared mount (mount propagation for hostPath volumes)")
        if ensure_launcher():
            progress(f"Wrote the pass-through launcher {RUNTIME_LAUNCHER} (runc only) for the handler")
        started: list[str] = []
        try:
            changed = self._flags_changed()
            reconfigured = self._containerd_reconfigured()
            for comp in self._components(self.layout.bin):
                if comp.name in changed and comp.name == "kube-apiserver":
                    progress(f"{comp.name}: restarting with its new flags")
                    supervisor.stop(self.layout, comp.name)
                elif comp.name in changed:
                    flags = " ".join(self.api_limits().flags()) or "the default API rate limits"
                    progress(f"{comp.name}: restarting with {flags}")
                    supervisor.stop(self.layout, comp.name)
                elif (proc := supervisor.running(self.layout, comp.name)) is not None:
                    if supervisor.binary_replaced(proc.pid):  # rebuilt, or upgraded (containerd)
                        progress(f"{comp.name}: restarting on its new binary")
                    elif comp.name == "containerd" and reconfigured:
                        progress(f"{comp.name}: restarting with its new config")
                    else:
                        self._wait_healthy(comp, progress, already=True)
                        continue
                    supervisor.stop(self.layout, comp.name)
                if supervisor.stale_pidfile(self.layout, comp.name):
                    progress(f"{comp.name}: removing the stale pid file of an earlier run")
                    self.layout.pidfile(comp.name).unlink()
                self._check_free(comp)
                for path, text in comp.files.items():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
                progress(f"Starting {comp.name}")
                supervisor.start(self.layout, comp)
                started.append(comp.name)
                self._wait_healthy(comp, progress)
                if comp.name == "containerd":
                    ensure_base_images(self, progress)
            progress(f"Waiting for node {self.node.name} to be Ready")
            self._wait(self.node_ready, 120, f"node {self.node.name} Ready", "kubelet")
            self._apply_cluster_objects()
        except BaseException:
            for name in reversed(started):
                supervisor.stop(self.layout, name)
            if "containerd" in started:
                cleanup.remove_containers(self.layout)
                cleanup.unmount_all(self.layout)
            raise
        progress(f"Local cluster up: node {self.node.name} Ready; export KUBECONFIG={self.kubeconfig}")
        return bool(started)

    def _wait_healthy(self, comp: Component, progress: Progress, already: bool = False) -> None:
        self._wait(
            lambda: supervisor.healthy(self.layout, comp.health), 90, f"{comp.name} healthy", comp.name
        )
        if not already:
            progress(f"{comp.name} is healthy")

    def _wait(self, check: Callable[[], bool], timeout: float, what: str, component: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if supervisor.stale_pidfile(self.layout, component):
                break  # the daemon died: its log says why
            time.sleep(0.5)
        raise ClusterError(
            f"timed out waiting for {what}. Last lines of {self.layout.log(component)}:\n"
            f"{supervisor.log_tail(self.layout, component)}"
        )

    def _install_tools(self, bindir: Path) -> None:
        """Links to the built binaries under the state dir, so `sro local env` can put kubectl on PATH."""
        self.layout.bin.mkdir(parents=True, exist_ok=True)
        for binary in bindir.iterdir():
            link = self.layout.bin / binary.name
            if link.is_symlink() and link.readlink() == binary:
                continue
            link.unlink(missing_ok=True)
            link.symlink_to(binary)

    def _apply_cluster_objects(self) -> None:
        runtime_class = (
            "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n"
            f"  name: {RUNTIME_HANDLER}\n  labels:\n    app.kubernetes.io/managed-by: sro\nhandler: {RUNTIME_HANDLER}\n"
        )
        self.kubectl("apply", "-f", "-", input=runtime_class)
        # The node opts in to the simulated GPU recipe, as an admin would label a node of a real
        # cluster: a simulated-gpu SpecialResource selects it (there is no PCI device to match).
        self.kubectl(
            "label",
            "node",
            self.node.name,
            f"{simulated_opt_in_label(SIMULATED_GPU.name)}=true",
            "--overwrite",
        )

    def restart_kubelet(self, down_seconds: float = 0.0) -> None:
        """Stop the kubelet, wait, start it again (device-plugin re-registration tests)."""
        comp = next(c for c in self._components(self.layout.bin) if c.name == "kubelet")
        supervisor.stop(self.layout, "kubelet")
        time.sleep(down_seconds)
        supervisor.start(self.layout, comp)
        self._wait_healthy(comp, _quiet)

    # ---- down --------------------------------------------------------------------------------
    def down(self, purge: bool = False, progress: Progress = _quiet) -> None:
        """Stop the daemons in reverse start order; containers go while containerd can still kill them."""
        comps = self._components(self.layout.bin, everything=True)
        # hollow nodes first, while the API server can still delete their Node objects
        api_up = supervisor.running(self.layout, "kube-apiserver") is not None
        self.hollow().stop(progress, delete_nodes=api_up)
        for comp in reversed(comps):
            if comp.name == "containerd" and supervisor.running(self.layout, "containerd") is not None:
                n = cleanup.remove_containers(self.layout)
                if n:
                    progress(f"Removed {n} containers")
            if supervisor.stop(self.layout, comp.name):
                progress(f"Stopped {comp.name}")
        cleanup.kill_leftover_shims(self.layout)
        n = cleanup.unmount_all(self.layout)
        if n:
            progress(f"Unmounted {n} mounts")
        cleanup.network(self.layout, str(self.layout.bin / "kube-proxy"))
        if purge:
            cleanup.purge(self.layout)
            progress(
                f"Removed the cluster's data ({self.layout.state}, {self.layout.kubelet_root}, containerd's)"
            )
        progress("Local cluster down")
