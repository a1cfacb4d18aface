"""`sro local restart COMPONENT`: one daemon of a running cluster stopped by pid and started again.

Why: users meet control-plane and node daemons restarting under running workloads, and the fault
campaign (issue 25) makes them restart at bad moments. Each daemon comes back with the flags and files
`up` would give it now (so a restart also applies a changed flag, such as the API server's audit
log), and what runs on the cluster is kept: containers outlive a kubelet restart (containerd holds
them) and a containerd restart (each container's shim runs in its own session, re-parented to init,
and the new containerd reconnects to it); clients of the API server and etcd reconnect.

Which daemon and whether it may be restarted is pure (`find`, `check`); `restart` does the I/O through
`supervisor` and says each step, with its time, as it goes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sro.console.progress import Progress
from sro.local import supervisor
from sro.local.components import Component
from sro.local.layout import Layout

# Only the cluster's own daemons (not Prometheus and its targets loop: `up --no-prometheus` for those)
CLUSTER_DAEMONS = (
    "etcd",
    "containerd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
)
GRACE = 15.0  # seconds between SIGTERM and SIGKILL (the API server drains its requests)
HEALTH_TIMEOUT = 90.0


class RestartRefused(Exception):
    """Nothing was done: an unknown daemon, or one that is not running (exit status 2)."""


def check(name: str, running: bool) -> None:
    """Refuse, in one line, a daemon that is not the cluster's or that is not running."""
    if name not in CLUSTER_DAEMONS:
        raise RestartRefused(f"unknown component {name!r}: one of {', '.join(CLUSTER_DAEMONS)}")
    if not running:
        raise RestartRefused(
            f"{name} is not running: the local cluster is not up (`sro local up`; `sro local status` shows it)"
        )


@dataclass(frozen=True)
class Restart:
    """What a restart did, in seconds since it began."""

    name: str
    old_pid: int
    stopped_at: float
    killed: bool
    new_pid: int
    started_at: float
    healthy_at: float | None  # None: not waited for


def restart(
    layout: Layout,
    comp: Component,
    progress: Progress,
    wait: bool = True,
    grace: float = GRACE,
    health_timeout: float = HEALTH_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> Restart:
    """Stop `comp` (SIGTERM, SIGKILL after `grace`), write its files, start it with its argv, and with
    `wait` wait until its health check passes. Raises RestartRefused when it is not running (nothing
    done), TimeoutError when it does not become healthy (with its log's last lines)."""
    proc = supervisor.running(layout, comp.name)
    check(comp.name, proc is not None)
    assert proc is not None
    t0 = clock()
    progress(f"{comp.name}: SIGTERM to pid {proc.pid}")
    stopped = supervisor.terminate(layout, comp.name, grace)
    stopped_at = clock() - t0
    killed = stopped is not None and stopped.killed
    progress(
        f"{comp.name}: stopped in {stopped_at:.1f} s" + (f" (SIGKILL after {grace:g} s)" if killed else "")
    )
    for path, text in comp.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    new = supervisor.start(layout, comp)
    started_at = clock() - t0
    progress(f"{comp.name}: started, pid {new.pid}")
    healthy_at = None
    if wait:
        deadline = clock() + health_timeout
        while not supervisor.healthy(layout, comp.health):
            if supervisor.stale_pidfile(layout, comp.name) or clock() > deadline:
                what = "exited" if supervisor.stale_pidfile(layout, comp.name) else "is not healthy"
                raise TimeoutError(
                    f"{comp.name} {what} {clock() - t0 - started_at:.0f} s after its restart; the end of "
                    f"{layout.log(comp.name)}:\n{supervisor.log_tail(layout, comp.name)}"
                )
            time.sleep(0.2)
        healthy_at = clock() - t0
        progress(
            f"{comp.name}: healthy after {healthy_at - started_at:.1f} s ({healthy_at:.1f} s down and up)"
        )
    return Restart(comp.name, proc.pid, stopped_at, killed, new.pid, started_at, healthy_at)


def find(comps: Sequence[Component], name: str) -> Component:
    """The daemon of that name among `comps` (RestartRefused: not one of the cluster's)."""
    for comp in comps:
        if comp.name == name and name in CLUSTER_DAEMONS:
            return comp
    check(name, running=True)  # says which names there are
    raise RestartRefused(f"component {name!r} is not part of this cluster")
