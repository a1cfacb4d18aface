"""Finding a pod's process on this machine and reading its memory and start, for the benchmarks that
run the local cluster here (its pods' processes are in this machine's /proc, their cgroups under /sys)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from benchmarks.harness import rss_mib


def pod_process(pod_uid: str, word: bytes) -> int:
    """The PID of the largest `sro ... <word> ...` process of the pod (its cgroup path names the uid)."""
    if not pod_uid:
        raise RuntimeError("benchmark: the pod has no uid")
    keys = (pod_uid, pod_uid.replace("-", "_"))
    best: tuple[float, int] | None = None
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cgroup = (p / "cgroup").read_text()
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(k in cgroup for k in keys) or word not in argv or not any(b"sro" in a for a in argv):
            continue
        try:
            rss = rss_mib(int(p.name))
        except (OSError, RuntimeError):
            continue
        if best is None or rss > best[0]:
            best = (rss, int(p.name))
    if best is None:
        raise RuntimeError(f"benchmark: no `sro {word.decode()}` process of pod {pod_uid} in /proc")
    return best[1]


def cgroup_mib(pid: int) -> float | None:
    """The memory charged to the process's container cgroup (page cache included): cgroup v1's
    memory.usage_in_bytes, else v2's memory.current; None when neither can be read."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            f = Path("/sys/fs/cgroup/memory", path.lstrip("/"), "memory.usage_in_bytes")
        elif controllers == "":
            f = Path("/sys/fs/cgroup", path.lstrip("/"), "memory.current")
        else:
            continue
        try:
            return int(f.read_text()) / 2**20
        except (OSError, ValueError):
            continue
    return None


def bare_python_rss() -> float:
    proc = subprocess.Popen(["python3", "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.5)
        return rss_mib(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def agent_start(pod_uid: str, word: bytes, ready: str) -> float:
    """Seconds from the agent process's start (/proc: 10 ms ticks) to its ready file's mtime (seen
    through /proc/<pid>/root): what the agent itself adds to its pod's start, measured in place."""
    pid = pod_process(pod_uid, word)
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot_to_wall = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    started = boot_to_wall + ticks / os.sysconf("SC_CLK_TCK")
    return Path(f"/proc/{pid}/root{ready}").stat().st_mtime - started
