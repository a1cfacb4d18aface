"""Tearing the local cluster down without leaving processes, mounts or network state behind.

containerd's shims outlive containerd, pod sandboxes hold network namespaces and the kubelet leaves
tmpfs volumes mounted, so stopping the daemons is not enough: this module kills the containers
through containerd, unmounts everything under the cluster's directories (deepest first), and removes
the bridge, the CNI address leases and kube-proxy's iptables chains.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from sro.local.layout import Layout

CNI_NETWORK = "sro"
BRIDGE = "sro0"


def _ctr(layout: Layout, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", str(layout.containerd_socket), *args], capture_output=True, text=True, timeout=60
    )


def remove_containers(layout: Layout) -> int:
    """Kill and delete every task in every containerd namespace; returns how many."""
    count = 0
    for ns in _ctr(layout, "namespaces", "ls", "-q").stdout.split():
        tasks = _ctr(layout, "-n", ns, "tasks", "ls", "-q").stdout.split()
        for task in tasks:
            _ctr(layout, "-n", ns, "tasks", "kill", "--all", "--signal", "SIGKILL", task)
        for task in tasks:
            for _ in range(50):
                out = _ctr(layout, "-n", ns, "tasks", "delete", "--force", task)
                # the CRI plugin deletes a Kubernetes task itself once it exits: "not found" is done
                if out.returncode == 0 or "not found" in out.stderr:
                    break
                time.sleep(0.1)
            count += 1
    return count


def _shim_pids(layout: Layout) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            cmdline
            and cmdline[0].endswith(b"containerd-shim-runc-v2")
            and str(layout.containerd_socket).encode() in (b" ".join(cmdline))
        ):
            pids.append(int(entry.name))
    return pids


def kill_leftover_shims(layout: Layout) -> None:
    """Shims whose containers are gone exit on their own; any left (containerd died first) are killed
    together with their process group, which holds the containers they ran."""
    for pid in _shim_pids(layout):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def managed_mounts(layout: Layout) -> list[str]:
    """Mount points under the cluster's directories, deepest first."""
    roots = [str(r) for r in layout.managed_mount_roots]
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == r or point.startswith(r + "/") for r in roots):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_all(layout: Layout) -> int:
    count = 0
    for _ in range(3):  # stacked mounts on one point need one umount each
        points = managed_mounts(layout)
        if not points:
            break
        for point in points:
            if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True)
            count += 1
    for ns in Path("/run/netns").glob("cni-*"):
        ns.unlink(missing_ok=True)
    return count


def network(layout: Layout, kube_proxy: str) -> None:
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)
    shutil.rmtree(f"/var/lib/cni/networks/{CNI_NETWORK}", ignore_errors=True)
    if Path(kube_proxy).exists():
        subprocess.run([kube_proxy, "--cleanup"], capture_output=True, timeout=60)
    _drop_cni_chains()


def _drop_cni_chains() -> None:
    """The bridge plugin's masquerade chains (CNI-*) of containers killed without a CNI DEL."""
    saved = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
    chains = [line[1:].split()[0] for line in saved.splitlines() if line.startswith(":CNI-")]
    for line in saved.splitlines():
        if line.startswith("-A POSTROUTING") and "-j CNI-" in line:
            rule = shlex.split(line[3:])
            subprocess.run(["iptables", "-t", "nat", "-D", *rule], capture_output=True)
    for chain in chains:
        subprocess.run(["iptables", "-t", "nat", "-F", chain], capture_output=True)
    for chain in chains:
        subprocess.run(["iptables", "-t", "nat", "-X", chain], capture_output=True)


def purge(layout: Layout) -> None:
    for path in (layout.state, layout.kubelet_root, layout.containerd_root, layout.containerd_state):
        shutil.rmtree(path, ignore_errors=True)
