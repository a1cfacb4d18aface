"""Tiny benchmark harness: every figure is printed next to a baseline measured in the same run.

Machines here are shared and noisy, so an absolute number means little; the ratio against a baseline
taken seconds apart on the same machine (e.g. a no-op gRPC call on the same kind of socket) is what
we compare across runs. Each benchmark module exposes `run() -> list[Figure]`.

A single measured/baseline pair is still hostage to whatever else ran in that second, so figures
with a goal are measured in pairs (`paired`): the two sides alternate (m, b, b, m, m, b, ...) so
neither always pays a warm-up or always follows the other, each pair gives one ratio, and a figure
reports the median ratio with the min–max of the per-pair ratios as its spread. A goal is a ratio
ceiling (a few targets are absolute instead, "RSS < 150 MiB": a `limit` on the value); where it is
not met, `why` names the floor that prevents it and the measurement showing it.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _pairs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise SystemExit(f"SRO_BENCH_PAIRS must be a whole number of pairs, at least 1, not {text!r}")
    return int(text)


# Pairs per paired figure: the issue asks for the median of at least 5.
PAIRS = _pairs(os.environ.get("SRO_BENCH_PAIRS", "5"))


@dataclass(frozen=True)
class Figure:
    name: str
    value: float  # median of the measured runs
    baseline: float  # median of the baseline runs
    unit: str
    baseline_name: str
    target: str = ""  # human text, e.g. "<= 1.0x"
    ratios: tuple[float, ...] = ()  # per-pair ratios (measured_i / baseline_i) when measured in pairs
    goal: float | None = None  # the target as a ratio ceiling: met when ratio <= goal; None = informational
    why: str = ""  # where the goal is not met: the floor that prevents it, with its measurement
    measured_runs: tuple[float, ...] = ()  # the raw runs behind `value`, kept for the JSON report
    baseline_runs: tuple[float, ...] = ()  # the raw runs behind `baseline`
    limit: float | None = None  # an absolute ceiling on `value` where the target is one ("< 1 s")

    @property
    def ratio(self) -> float:
        if self.ratios:
            return statistics.median(self.ratios)
        return self.value / self.baseline if self.baseline else float("inf")

    @property
    def spread(self) -> tuple[float, float] | None:
        """(min, max) of the per-pair ratios; None when the figure is a single measurement."""
        return (min(self.ratios), max(self.ratios)) if self.ratios else None

    @property
    def met(self) -> bool | None:
        """Whether the median ratio meets the goal, or the value stays under the limit; None for
        informational figures."""
        if self.goal is not None:
            return self.ratio <= self.goal
        return None if self.limit is None else self.value < self.limit


def _ratio(measured: float, baseline: float) -> float:
    return measured / baseline if baseline else float("inf")


def paired(
    measured: Callable[[], float], baseline: Callable[[], float], n: int = 5
) -> tuple[list[float], list[float]]:
    """Runs alternate (m, b, b, m, m, b, ...) so neither side always pays the warm-up; returns both lists.

    Each callable runs one measurement and returns its value; pair i is (measured[i], baseline[i]).
    """
    if n < 1:
        raise ValueError(f"paired: n must be at least 1, not {n}")
    ms: list[float] = []
    bs: list[float] = []
    for i in range(n):
        if i % 2 == 0:
            ms.append(measured())
            bs.append(baseline())
        else:
            bs.append(baseline())
            ms.append(measured())
    return ms, bs


def paired_timings(
    measured: Callable[[], object],
    baseline: Callable[[], object],
    per_pair: int,
    n: int = PAIRS,
    warmup: int = 3,
    by_call: bool = False,
) -> tuple[list[list[float]], list[list[float]]]:
    """Seconds per call of each side in `n` pairs of `per_pair` calls; batch i of one side pairs
    with batch i of the other, for per-pair percentiles. The sides take turns batch by batch (the
    order of `paired`), or with `by_call` call by call (m, b, b, m, ...): a tail figure (a p99 of
    sub-millisecond calls) is set by a handful of calls, and a burst of noise from the rest of a
    shared machine lasting a few hundred ms lands on one side's batch only; taken in turn, both
    sides sample the same bursts."""
    ms: list[list[float]] = []
    bs: list[list[float]] = []
    if not by_call:

        def one(fn: Callable[[], object], into: list[list[float]]) -> float:
            into.append(timings(fn, per_pair, warmup))
            return 0.0  # the batch itself is what counts

        paired(lambda: one(measured, ms), lambda: one(baseline, bs), n)
        return ms, bs

    for _ in range(n):
        for _ in range(warmup):
            measured()
            baseline()
        m, b = paired(lambda: _timed(measured), lambda: _timed(baseline), per_pair)
        ms.append(m)
        bs.append(b)
    return ms, bs


def paired_figure(
    name: str,
    unit: str,
    baseline_name: str,
    measured: list[float],
    baseline: list[float],
    goal: float | None,
    target: str = "",
    why: str = "",
) -> Figure:
    """A figure from pairs: value/baseline are the medians, ratios one per pair (measured_i / baseline_i)."""
    if not measured or len(measured) != len(baseline):
        raise ValueError(
            f"{name}: need as many measured runs as baseline runs, got {len(measured)} and {len(baseline)}"
        )
    if not target and goal is not None:
        target = f"<= {goal:g}x"
    return Figure(
        name,
        statistics.median(measured),
        statistics.median(baseline),
        unit,
        baseline_name,
        target,
        ratios=tuple(_ratio(m, b) for m, b in zip(measured, baseline, strict=True)),
        goal=goal,
        why=why,
        measured_runs=tuple(measured),
        baseline_runs=tuple(baseline),
    )


def timings(fn: Callable[[], object], repeat: int, warmup: int = 3) -> list[float]:
    """Seconds per call of `fn`, `repeat` times after `warmup` unmeasured calls."""
    for _ in range(warmup):
        fn()
    return [_timed(fn) for _ in range(repeat)]


def _timed(fn: Callable[[], object]) -> float:
    """Seconds one call of `fn` takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


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
