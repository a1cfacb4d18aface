"""The operator benchmark's floors for the validation states, over made-up runs: a relist that fell
while a validation ran, and the wait for the device in the node's allocatable, count only where
they were seen, and explain a gap only when they cover it."""

from __future__ import annotations

import statistics

from benchmarks.bench_operator import OperatorRun, _validation_floor, _why
from sro.api.names import DEVICE_PLUGIN_VALIDATION, DRIVER_VALIDATION


def _run(dv: float, dpv: float, wait: float | None) -> OperatorRun:
    return OperatorRun(
        total=9.0, steps={}, annotated={}, pod_seen={}, pod_done={}, delete=1.0, rss=80.0, cgroup_mib=None,
        agent_start={}, relist={DRIVER_VALIDATION: dv, DEVICE_PLUGIN_VALIDATION: dpv}, mount_wait={},
        allocatable_wait=wait,
    )  # fmt: skip


def test_the_workload_validation_counts_its_relists_and_its_wait_for_the_device_run_by_run() -> None:
    ops = [_run(0.0, 1.0, 0.3), _run(0.0, 1.0, 0.5), _run(0.0, 0.0, 0.9)]
    seconds, parts = _validation_floor(DEVICE_PLUGIN_VALIDATION, ops)
    assert seconds == 1.3  # the median of the runs' sums (1.3, 1.5, 0.9), not a sum of medians
    assert "in 2 of 3 runs" in parts[0]
    assert "allocatable 0.50 s" in parts[1]


def test_a_validation_no_relist_fell_into_has_no_floor_and_its_gap_stays_unexplained() -> None:
    ops = [_run(0.0, 0.0, None), _run(1.0, 0.0, None), _run(0.0, 0.0, None)]
    assert _validation_floor(DRIVER_VALIDATION, ops) == (0.0, [])
    assert _why((DRIVER_VALIDATION,), 0.2, ops, {}, {"": [1.0]}) == ""


def test_the_driver_validation_never_counts_the_device_wait() -> None:
    ops = [_run(1.0, 0.0, 0.8)] * 3
    seconds, parts = _validation_floor(DRIVER_VALIDATION, ops)
    assert seconds == 1.0 and len(parts) == 1
    assert "more than the 0.90 s" in _why((DRIVER_VALIDATION,), 0.9, ops, {}, {"": [1.0]})


def test_the_gap_a_floor_must_cover_is_the_median_of_the_pairs_differences() -> None:
    from benchmarks.bench_operator import _gap

    # the medians differ by -0.05 s, yet two pairs of three are 0.05 s slower than their baseline
    measured, baseline = [0.95, 1.05, 0.5], [0.9, 1.0, 1.2]
    assert statistics.median(measured) - statistics.median(baseline) < 0
    assert round(_gap(measured, baseline), 6) == 0.05
