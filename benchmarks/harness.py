"""Tiny benchmark harness: every figure is printed next to a baseline measured in the same run.

Machines here are shared and noisy, so an absolute number means little; the ratio against a baseline
taken seconds apart on the same machine (e.g. a no-op gRPC call on the same kind of socket) is what
we compare across runs. Each benchmark module exposes `run() -> list[Figure]`.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    baseline: float
    unit: str
    baseline_name: str
    target: str = ""

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("inf")


def timings(fn: Callable[[], object], repeat: int, warmup: int = 3) -> list[float]:
    """Seconds per call of `fn`, `repeat` times after `warmup` unmeasured calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def percentile(samples: list[float], p: float) -> float:
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[int(p) - 1]


def rss_mib(pid: int) -> float:
    """Resident memory of a process, from /proc (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def poll(what: str, check: Callable[[], bool], timeout: float, every: float = 1.0) -> float:
    """Calls `check` every `every` seconds (a steady cadence) until true; seconds it took."""
    start = time.monotonic()
    tick = start
    while not check():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"benchmark: timed out after {timeout:.0f} s waiting for {what}")
        tick += every
        time.sleep(max(0.0, tick - time.monotonic()))
    return time.monotonic() - start


def stop(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds; the process is reaped either way."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
