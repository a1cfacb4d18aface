"""What the observer reads on the node itself: the simulated devices' nodes on the host, a
container's processes and the device nodes under its /dev, the operator's processes.

Why apart: it is the /proc and /dev half of the observer (`observer.py` is the API half), and it
needs the cluster to run on this machine (the local cluster) and root. Containers are found by
the container id in their cgroup path, as `benchmarks/bench_operator.py` finds the operator: no
exec into the pod, nothing started in it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from sro.api.recipes import SIMULATED_GPU
from sro.devices.driverstate import read_inventory


def device_paths() -> tuple[dict[int, str], dict[str, set[str]]] | None:
    """The host's recipe device nodes by (major, minor), and the nodes each device id gives."""
    try:
        inventory = read_inventory(Path(SIMULATED_GPU.driver_root))
    except Exception:
        return None
    by_rdev: dict[int, str] = {}
    by_id: dict[str, set[str]] = {}
    for d in inventory.devices:
        nodes = [d.device_node, *d.companion_nodes]
        by_id[str(d.uuid)] = set(nodes)
        for m in d.mig_devices:
            by_id[str(m.uuid)] = {d.device_node, *([m.device_node] if m.device_node else [])}
        for n in nodes:
            try:
                by_rdev[os.stat(n).st_rdev] = n
            except OSError:
                continue
    return by_rdev, by_id


# ---- processes --------------------------------------------------------------------------------------
def processes() -> Iterator[tuple[int, str]]:
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                yield int(p.name), (p / "cgroup").read_text()
            except OSError:
                continue


def pids_of(container_ids: set[str]) -> dict[str, int]:
    """A process of each container (the lowest pid: its first), found by the id in its cgroup."""
    out: dict[str, int] = {}
    if not container_ids:
        return out
    for pid, cgroup in processes():
        for cid in container_ids:
            if cid in cgroup and (cid not in out or pid < out[cid]):
                out[cid] = pid
    return out


def devices_seen(pid: int, by_rdev: dict[int, str]) -> set[str] | None:
    """The recipe's device nodes (as host paths) among the character devices under the container's
    /dev, two levels deep, known by (major, minor): a node renamed inside still counts."""
    root = Path(f"/proc/{pid}/root/dev")
    seen: set[str] = set()
    try:
        entries = list(root.iterdir())
    except OSError:
        return None
    for entry in entries:
        try:
            st = entry.lstat()
            if stat.S_ISDIR(st.st_mode):
                for sub in entry.iterdir():
                    sst = sub.lstat()
                    if stat.S_ISCHR(sst.st_mode) and sst.st_rdev in by_rdev:
                        seen.add(by_rdev[sst.st_rdev])
            elif stat.S_ISCHR(st.st_mode) and st.st_rdev in by_rdev:
                seen.add(by_rdev[st.st_rdev])
        except OSError:
            continue
    return seen


def operator_pids(pod_uids: list[str]) -> list[int]:
    """The `sro operator` processes of these pods (their cgroup paths name the pod's uid)."""
    keys = [k for u in pod_uids for k in (u, u.replace("-", "_"))]
    out = []
    for pid, cgroup in processes():
        if not any(k in cgroup for k in keys):
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"operator" in argv and any(b"sro" in a for a in argv):
            out.append(pid)
    return out
