"""Hollow nodes on the local cluster's real control plane: start, scale, list and stop them.

Each hollow node is kubemark `--morph=kubelet` (a real kubelet with a fake container runtime, built
with the cluster) under its own client certificate (`system:node:<name>`, signed by the cluster's
CA, so NodeRestriction treats it as any kubelet), on a port of its own, in a mount namespace of its
own: kubemark hard-codes its runtime socket and root directory under /tmp, so each gets a private
tmpfs there (gone with the process: nothing is left behind), and a private /etc/hosts naming its
probe address (see `hollowconfig`). The rules server answers the operands' probes. The Node objects
get the config's extended resources in status.capacity (the hollow kubelet keeps them).

What is decided lives in `hollowconfig` (pure); this module only runs processes and calls the API.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sro.console.progress import Progress
from sro.local import supervisor
from sro.local.components import Component, Health, kubeconfig
from sro.local.hollowconfig import (
    DEFAULT_CONFIG,
    HOLLOW_LABEL,
    HollowConfig,
    HollowConfigError,
    allocate_ports,
    cert_spec,
    check_capacity,
    hosts_file,
    parse_config,
    probe_address,
    quantity_patch,
)
from sro.local.layout import Layout
from sro.local.pki import ensure_pki

RULES = "hollow-rules"  # the rules server's daemon name (pid file, log)
PID_PREFIX = "hollow."  # hollow node <name>'s daemon is "hollow.<name>"
PORT_BASE = 12000  # hollow kubelets' ports, from here up (below the ephemeral range)
READY_TIMEOUT = 120.0


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class HollowNode:
    name: str
    pid: int | None  # None: its pid file names a process that is gone (dead)
    port: int


class HollowNodes:
    def __init__(self, layout: Layout, bindir: Path) -> None:
        self.layout = layout
        self.bindir = bindir

    # ---- where things are ----------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        return self.layout.state / "hollow"

    @property
    def config_path(self) -> Path:
        return self.dir / "config.yaml"

    @property
    def ports_path(self) -> Path:
        return self.dir / "ports.json"

    def config(self) -> HollowConfig:
        return parse_config(self.config_path.read_text()) if self.config_path.exists() else HollowConfig()

    def _ports(self) -> dict[str, int]:
        try:
            return {str(k): int(v) for k, v in json.loads(self.ports_path.read_text()).items()}
        except (OSError, ValueError):
            return {}

    def nodes(self) -> list[HollowNode]:
        """Every hollow node with a pid file (running or dead), in index order."""
        ports = self._ports()
        out = []
        for pidfile in self.layout.run.glob(f"{PID_PREFIX}*.pid"):
            name = pidfile.name.removeprefix(PID_PREFIX).removesuffix(".pid")
            proc = supervisor.running(self.layout, PID_PREFIX + name)
            out.append(HollowNode(name, proc.pid if proc else None, ports.get(name, 0)))
        return sorted(out, key=lambda n: _index(n.name))

    def rules_port(self) -> int:
        return self.layout.ports.hollow_rules

    # ---- scaling -------------------------------------------------------------------------------
    def scale(self, count: int, config_text: str | None, progress: Progress = _quiet) -> list[str]:
        """Exactly `count` hollow nodes, Ready, with the config (the saved one when None); returns
        their names. A config that changes the nodes themselves (not only the failure rules)
        restarts the running ones; the rules server re-reads the rules by itself."""
        old_text = self.config_path.read_text() if self.config_path.exists() else None
        text = config_text if config_text is not None else old_text
        config = parse_config(text) if text is not None else parse_config(DEFAULT_CONFIG)
        text = text if text is not None else DEFAULT_CONFIG
        running = [n for n in self.nodes() if n.pid is not None]
        check_capacity(count, len(running), os.cpu_count() or 1, _mem_available_mib())
        if old_text is not None and _node_part(parse_config(old_text)) != _node_part(config) and running:
            progress(f"The hollow node config changed: restarting {len(running)} hollow nodes")
            self.stop(progress)
            running = []
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "hosts").mkdir(exist_ok=True)
        _write(self.config_path, text)
        if count == 0:
            self.stop(progress)
            return []
        wanted = [config.node_name(i) for i in range(count)]
        extra = [n.name for n in self.nodes() if n.name not in wanted]
        if extra:
            self._stop_nodes(extra, progress)
        self._ensure_rules_server(progress)
        have = {n.name for n in self.nodes() if n.pid is not None}
        for n in self.nodes():
            if n.pid is None:  # died: its pid file goes, the node starts again below
                self.layout.pidfile(PID_PREFIX + n.name).unlink(missing_ok=True)
        missing = [i for i in range(count) if config.node_name(i) not in have]
        if missing:
            self._start(config, missing, progress)
        self._wait_ready(config, wanted, progress)
        return wanted

    def _ensure_rules_server(self, progress: Progress) -> None:
        if supervisor.running(self.layout, RULES) is not None:
            return
        self.layout.pidfile(RULES).unlink(missing_ok=True)
        port = self.rules_port()
        owner = supervisor.port_owner(port)
        if owner is not None:
            raise HollowConfigError(f"port {port} (the hollow nodes' rules server) is in use by {owner}")
        argv = (
            sys.executable,
            "-m",
            "sro",
            "local",
            "rules-server",
            f"--config={self.config_path}",
            f"--port={port}",
        )
        supervisor.start(self.layout, Component(RULES, argv, Health()))
        deadline = time.monotonic() + 15
        while supervisor.port_owner(port) is None:
            if time.monotonic() > deadline or supervisor.running(self.layout, RULES) is None:
                raise HollowConfigError(
                    f"the rules server did not start; {self.layout.log(RULES)}:\n{supervisor.log_tail(self.layout, RULES)}"
                )
            time.sleep(0.2)
        progress(f"Rules server for hollow node probes on port {port} ({self.config_path})")

    def _start(self, config: HollowConfig, indices: list[int], progress: Progress) -> None:
        pki = self.layout.pki
        (pki / "hollow").mkdir(parents=True, exist_ok=True)
        specs = tuple(cert_spec(config.node_name(i)) for i in indices)
        made = ensure_pki(pki, specs)
        if made:
            progress(f"Issued {len(made)} hollow node client certificates (CA {pki / 'ca.crt'})")
        ports = self._ports()
        taken = set(ports.values())
        fresh = allocate_ports(len(indices), PORT_BASE, taken | _listening_ports())
        base_hosts = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
        api = f"https://127.0.0.1:{self.layout.ports.apiserver}"
        kubemark = self.bindir / "kubemark"
        if not kubemark.exists():
            raise HollowConfigError(
                f"{kubemark} is missing: run `sro local up` (it builds kubemark with the cluster)"
            )
        progress(
            f"Starting {len(indices)} hollow nodes (kubemark --morph=kubelet, ports {fresh[0]}..{fresh[-1]})"
        )
        for i, port in zip(indices, fresh, strict=True):
            name = config.node_name(i)
            ports[name] = port
            kc = self.layout.config / f"hollow.{name}.kubeconfig"
            _write(kc, kubeconfig(api, pki, f"hollow/{name}", f"system:node:{name}"))
            kc.chmod(0o600)
            hosts = self.dir / "hosts" / name
            _write(hosts, hosts_file(base_hosts, probe_address(i)))
            argv = hollow_argv(kubemark, name, kc, port, hosts, config.node_labels(i), config.taints)
            supervisor.start(self.layout, Component(PID_PREFIX + name, argv, Health()))
        _write(self.ports_path, json.dumps(ports, indent=1))

    def _wait_ready(self, config: HollowConfig, wanted: list[str], progress: Progress) -> None:
        deadline = time.monotonic() + READY_TIMEOUT + len(wanted) * 0.5
        patched: set[str] = set()
        said = ""
        while True:
            nodes = {n["metadata"]["name"]: n for n in self._api_nodes()}
            for name in wanted:
                node = nodes.get(name)
                if node is None or name in patched:
                    continue
                cap = node.get("status", {}).get("capacity", {})
                if config.capacity and any(cap.get(k) != v for k, v in config.capacity.items()):
                    self._api("PATCH", f"/api/v1/nodes/{name}/status", quantity_patch(config.capacity))
                patched.add(name)
            ready = [n for n in wanted if n in nodes and _ready(nodes[n])]
            line = f"Hollow nodes: {len([n for n in wanted if n in nodes])}/{len(wanted)} registered, {len(ready)} Ready"
            if line != said:
                progress(line)
                said = line
            if len(ready) == len(wanted) and patched >= set(wanted):
                return
            dead = [n.name for n in self.nodes() if n.pid is None and n.name in wanted]
            if dead or time.monotonic() > deadline:
                who = dead[0] if dead else next(n for n in wanted if n not in ready)
                why = "died" if dead else f"not Ready after {READY_TIMEOUT:.0f} s"
                raise HollowConfigError(
                    f"hollow node {who} {why}; the end of {self.layout.log(PID_PREFIX + who)}:\n"
                    f"{supervisor.log_tail(self.layout, PID_PREFIX + who, 8)}"
                )
            time.sleep(1)

    # ---- stopping ------------------------------------------------------------------------------
    def stop(self, progress: Progress = _quiet, delete_nodes: bool = True) -> None:
        """Stop every hollow node and the rules server; delete their Node objects (when the API
        server answers)."""
        names = [n.name for n in self.nodes()]
        if names:
            self._stop_nodes(names, progress, delete_nodes)
        if supervisor.stop(self.layout, RULES):
            progress("Stopped the hollow nodes' rules server")
        if delete_nodes:
            self._delete_leftover_nodes(progress)

    def _stop_nodes(self, names: list[str], progress: Progress, delete_nodes: bool = True) -> None:
        stopped = supervisor.stop_many(self.layout, [PID_PREFIX + n for n in names])
        if stopped:
            progress(f"Stopped {len(stopped)} hollow nodes")
        ports = self._ports()
        for n in names:
            ports.pop(n, None)
            (self.layout.config / f"hollow.{n}.kubeconfig").unlink(missing_ok=True)
            (self.dir / "hosts" / n).unlink(missing_ok=True)
        if self.dir.exists():
            _write(self.ports_path, json.dumps(ports, indent=1))
        if delete_nodes:
            gone = [n for n in names if self._delete_node(n)]
            if gone:
                progress(f"Deleted {len(gone)} hollow Node objects")

    def _delete_leftover_nodes(self, progress: Progress) -> None:
        """Node objects of hollow nodes whose processes are gone (a crash, a reboot)."""
        left = [n["metadata"]["name"] for n in self._api_nodes()]
        gone = [n for n in left if self._delete_node(n)]
        if gone:
            progress(f"Deleted {len(gone)} Node objects of hollow nodes no longer running")

    def _delete_node(self, name: str) -> bool:
        try:
            self._api("DELETE", f"/api/v1/nodes/{name}")
            return True
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    # ---- the API (the admin's client certificate; no kubectl needed for /status) ---------------
    def _api(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"https://127.0.0.1:{self.layout.ports.apiserver}{path}", data=data, method=method
        )
        req.add_header("User-Agent", "sro-local")
        req.add_header("Accept", "application/json")
        if body is not None:
            kind = "json-patch+json" if isinstance(body, list) else "merge-patch+json"
            req.add_header("Content-Type", f"application/{kind}")
        with urllib.request.urlopen(req, timeout=30, context=supervisor.tls_context(self.layout)) as resp:
            return json.loads(resp.read() or b"null")

    def _api_nodes(self) -> list[dict[str, Any]]:
        """The hollow nodes' Node objects ([] when the API server does not answer)."""
        if not (self.layout.pki / "admin.crt").exists():
            return []
        try:
            doc = self._api("GET", f"/api/v1/nodes?labelSelector={HOLLOW_LABEL}%3Dtrue")
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return []
        return list(doc.get("items") or [])

    def ready_nodes(self) -> set[str]:
        return {n["metadata"]["name"] for n in self._api_nodes() if _ready(n)}


def hollow_argv(
    kubemark: Path,
    name: str,
    kubeconfig_path: Path,
    port: int,
    hosts: Path,
    labels: dict[str, str],
    taints: tuple[str, ...],
) -> tuple[str, ...]:
    """A hollow kubelet in a mount namespace of its own: a private tmpfs on /tmp (kubemark's fixed
    runtime socket and root directory) and its own /etc/hosts (its probe address)."""
    script = (
        'mount -t tmpfs -o mode=1777,size=256m sro-hollow /tmp && mount --bind "$0" /etc/hosts && exec "$@"'
    )
    argv = [
        "/usr/bin/unshare",
        "--mount",
        "--propagation=private",
        "/bin/sh",
        "-c",
        script,
        str(hosts),
        str(kubemark),
        "--morph=kubelet",
        f"--name={name}",
        f"--kubeconfig={kubeconfig_path}",
        f"--kubelet-port={port}",
        "--kubelet-read-only-port=0",
        "--v=0",
    ]
    if labels:
        argv.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    if taints:
        argv.append("--register-with-taints=" + ",".join(taints))
    return tuple(argv)


def _index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _node_part(config: HollowConfig) -> tuple[Any, ...]:
    """What a running hollow node was started with (the failure rules are not: they can change)."""
    return (config.name_prefix, dict(config.labels), config.taints, dict(config.capacity), config.systems)


def _ready(node: dict[str, Any]) -> bool:
    conds = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _mem_available_mib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _listening_ports() -> set[int]:
    """TCP ports something listens on (from /proc/net/tcp and tcp6)."""
    out: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # LISTEN
                out.add(int(fields[1].rsplit(":", 1)[1], 16))
    return out
