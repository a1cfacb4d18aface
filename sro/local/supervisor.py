"""Start and stop the cluster's daemons by PID, and check them: no init system needed.

Each daemon's pid file holds its pid and kernel start time, so a stale file from an earlier crash
(or a recycled pid) is never mistaken for a running daemon, and `down` signals only processes this
project started. Daemons run in their own session with output appended to one log file each.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sro.local.components import Component, Health
from sro.local.layout import Layout


@dataclass(frozen=True)
class Running:
    pid: int
    started: int  # clock ticks since boot, /proc/<pid>/stat field 22


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return _from_stat(stat)


def _from_stat(stat: str) -> int | None:
    """The start time in /proc/<pid>/stat's text; None once the process is gone.

    A zombie is gone, unless other threads of it are still exiting: a Go daemon's main thread
    becomes a zombie first, and its sockets stay open until its last thread is done, so a restart
    that went on then found the old scheduler's port still listening, owned by no process (seen
    once in a benchmark's restart of kube-scheduler)."""
    # the command name may contain spaces and parentheses: split after the last ')'
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z" and int(fields[17]) <= 1:  # field 20, num_threads
        return None
    return int(fields[19])


def running(layout: Layout, name: str) -> Running | None:
    """The daemon's process if our pid file names a live process that is still the one we started."""
    try:
        pid_s, started_s = layout.pidfile(name).read_text().split()
        pid, started = int(pid_s), int(started_s)
    except (OSError, ValueError):
        return None
    return Running(pid, started) if _start_time(pid) == started else None


def binary_replaced(pid: int) -> bool:
    """Whether the process runs a binary that has since been replaced on disk (a rebuild with a new
    source fix renames a new file over it): the kernel marks its exe link "(deleted)"."""
    try:
        return os.readlink(f"/proc/{pid}/exe").endswith(" (deleted)")
    except OSError:
        return False


def stale_pidfile(layout: Layout, name: str) -> bool:
    return layout.pidfile(name).exists() and running(layout, name) is None


def start(layout: Layout, comp: Component) -> Running:
    """Start the daemon detached: in its own session, re-parented to init, output appended to its log.

    A short-lived `sh` backgrounds it and prints its pid, so the daemon is never our child: it
    cannot become our zombie, and it keeps running after `sro local up` exits.
    """
    layout.logs.mkdir(parents=True, exist_ok=True)
    layout.run.mkdir(parents=True, exist_ok=True)
    log = layout.log(comp.name)
    with log.open("a") as f:
        f.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {' '.join(comp.argv)}\n")
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LOG": str(log),
    }
    out = subprocess.run(
        ["/bin/sh", "-c", 'exec 3>&1; "$@" </dev/null >>"$LOG" 2>&1 3>&- & echo $!', "sh", *comp.argv],
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,
        check=True,
    )
    pid = int(out.stdout.strip())
    started = _start_time(pid) or 0
    layout.pidfile(comp.name).write_text(f"{pid} {started}\n")
    return Running(pid, started)


@dataclass(frozen=True)
class Stopped:
    """How a daemon went: its pid, whether the grace ran out (SIGKILL), how long it took."""

    pid: int
    killed: bool
    seconds: float


def terminate(layout: Layout, name: str, timeout: float = 15.0) -> Stopped | None:
    """SIGTERM, then SIGKILL after `timeout`; None when it was not running. The pid file goes either way."""
    proc = running(layout, name)
    result = None
    if proc is not None:
        t0 = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        deadline = t0 + timeout
        while _start_time(proc.pid) == proc.started and time.monotonic() < deadline:
            time.sleep(0.05)
        killed = _start_time(proc.pid) == proc.started
        if killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            while _start_time(proc.pid) == proc.started:
                time.sleep(0.05)
        result = Stopped(proc.pid, killed, time.monotonic() - t0)
    layout.pidfile(name).unlink(missing_ok=True)
    return result


def stop(layout: Layout, name: str, timeout: float = 15.0) -> bool:
    """SIGTERM, then SIGKILL after `timeout`; returns whether a process was stopped."""
    return terminate(layout, name, timeout) is not None


def stop_many(layout: Layout, names: list[str], timeout: float = 15.0) -> list[str]:
    """`stop` for many daemons at once: SIGTERM to all, then SIGKILL to those left after `timeout`
    (hollow nodes: hundreds of them stop in the time of one). Returns the names that were running."""
    procs = {name: proc for name in names if (proc := running(layout, name)) is not None}
    for proc in procs.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    left = dict(procs)
    while left:
        left = {n: p for n, p in left.items() if _start_time(p.pid) == p.started}
        if not left:
            break
        if time.monotonic() > deadline:
            for p in left.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
        time.sleep(0.1)
    for name in names:
        layout.pidfile(name).unlink(missing_ok=True)
    return sorted(procs)


def cmdline(pid: int) -> tuple[str, ...]:
    """A process's argv, () when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(a.decode(errors="replace") for a in raw.split(b"\0")[:-1])


def tls_context(layout: Layout) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    ctx.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
    return ctx


def healthy(layout: Layout, health: Health) -> bool:
    if health.socket is not None:
        if not health.socket.exists():
            return False
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(1)
            try:
                s.connect(str(health.socket))
            except OSError:
                return False
        return True
    ctx = tls_context(layout) if health.tls else None
    try:
        with urllib.request.urlopen(health.url, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def port_owner(port: int) -> str | None:
    """Who listens on a TCP port (any address), e.g. 'etcd (pid 123)', or None when it is free."""
    out = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True, text=True)
    line = out.stdout.strip().splitlines()
    if not line:
        return None
    if 'users:(("' in line[0]:
        detail = line[0].split('users:(("', 1)[1]
        name, rest = detail.split('"', 1)
        pid = rest.split("pid=", 1)[1].split(",", 1)[0] if "pid=" in rest else "?"
        return f"{name} (pid {pid})"
    return "another process"


def log_tail(layout: Layout, name: str, lines: int = 20) -> str:
    try:
        return "\n".join(layout.log(name).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


_CRASH_MARKERS = ("fatal error:", "panic:", "F0", "F1")  # Go runtime, Go panic, klog's Fatal


def crash_summary(log_text: str, lines: int = 12) -> str:
    """The last `lines` lines of the daemon's latest run, preceded by its first crash line (and the two
    after it) when that lies further up. `start` begins each run with a `==== ` line."""
    all_lines = log_text.splitlines()
    starts = [i for i, line in enumerate(all_lines) if line.startswith("==== ")]
    run = all_lines[starts[-1] :] if starts else all_lines
    tail = run[-lines:]
    crash = next((i for i, line in enumerate(run) if line.startswith(_CRASH_MARKERS)), None)
    if crash is None or crash >= len(run) - lines:
        return "\n".join(tail)
    head = run[crash : min(crash + 3, len(run) - lines)]
    return "\n".join([*head, "...", *tail])


def pids_of(exe: str) -> list[int]:
    """Processes running this executable (by /proc/<pid>/exe)."""
    target = os.path.realpath(exe)
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "exe").removesuffix(" (deleted)") == target:
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids
