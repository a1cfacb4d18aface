"""The benchmark harness's pairing and reporting logic: run order, medians, spread, met/explained.

The figures in the README come from this arithmetic, so it is pinned on tiny fixtures here rather
than trusted to whatever the benchmarks happen to print.
"""

from __future__ import annotations

import pytest

from benchmarks.harness import Figure, paired, paired_figure, paired_timings


def test_paired_alternates_which_side_runs_first() -> None:
    order: list[str] = []

    def m() -> float:
        order.append("m")
        return float(len(order))

    def b() -> float:
        order.append("b")
        return float(len(order))

    ms, bs = paired(m, b, n=5)
    assert order == ["m", "b", "b", "m", "m", "b", "b", "m", "m", "b"]
    # pair i keeps its own two runs, whichever ran first
    assert ms == [1.0, 4.0, 5.0, 8.0, 9.0]
    assert bs == [2.0, 3.0, 6.0, 7.0, 10.0]


def test_paired_refuses_zero_pairs() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        paired(lambda: 1.0, lambda: 1.0, n=0)


def test_paired_figure_takes_medians_and_per_pair_ratios() -> None:
    f = paired_figure("x", "ms", "floor", [10.0, 30.0, 20.0], [10.0, 10.0, 5.0], goal=2.0)
    assert (f.value, f.baseline) == (20.0, 10.0)
    assert f.ratios == (1.0, 3.0, 4.0)
    assert f.ratio == 3.0  # median of per-pair ratios, not 20/10
    assert f.spread == (1.0, 4.0)
    assert f.target == "<= 2x"
    assert f.met is False
    assert f.measured_runs == (10.0, 30.0, 20.0)
    assert f.baseline_runs == (10.0, 10.0, 5.0)


def test_paired_figure_met_at_the_goal_exactly() -> None:
    f = paired_figure("x", "ms", "floor", [15.0], [10.0], goal=1.5, target="<= 1.5x by hand")
    assert f.met is True
    assert f.target == "<= 1.5x by hand"
    assert f.spread == (1.5, 1.5)


def test_paired_figure_refuses_unequal_sides() -> None:
    with pytest.raises(ValueError, match="as many"):
        paired_figure("x", "ms", "floor", [1.0, 2.0], [1.0], goal=None)


def test_positional_figure_is_informational_and_single() -> None:
    f = Figure("rss", 40.0, 20.0, "MiB", "bare python", "< 64 MiB")
    assert f.ratio == 2.0
    assert f.spread is None
    assert f.met is None
    assert f.why == ""


def test_zero_baseline_gives_an_infinite_ratio_not_a_crash() -> None:
    assert Figure("x", 1.0, 0.0, "ms", "none").ratio == float("inf")
    assert paired_figure("x", "ms", "none", [1.0], [0.0], goal=1.0).met is False


def test_paired_timings_keeps_one_batch_per_side_per_pair_in_alternating_order() -> None:
    order: list[str] = []
    ms, bs = paired_timings(lambda: order.append("m"), lambda: order.append("b"), per_pair=2, n=3, warmup=1)
    assert [len(b) for b in ms] == [2, 2, 2] and [len(b) for b in bs] == [2, 2, 2]
    # each batch is its warm-up call plus per_pair timed calls; the sides alternate which goes first
    assert "".join(order) == "mmmbbbbbbmmmmmmbbb"
    assert all(t >= 0 for batch in ms + bs for t in batch)


def test_paired_timings_by_call_takes_the_sides_calls_in_turn() -> None:
    order: list[str] = []
    ms, bs = paired_timings(
        lambda: order.append("m"), lambda: order.append("b"), per_pair=3, n=2, warmup=1, by_call=True
    )
    assert [len(b) for b in ms] == [3, 3] and [len(b) for b in bs] == [3, 3]
    # per pair: one warm-up call of each, then the timed calls in turn, which side first alternating
    assert "".join(order) == "mb" + "mbbmmb" + "mb" + "mbbmmb"
    assert all(t >= 0 for batch in ms + bs for t in batch)


def test_a_bad_pairs_setting_is_one_line_not_a_traceback() -> None:
    from benchmarks.harness import _pairs

    assert _pairs("7") == 7
    for bad in ("0", "-1", "five", ""):
        with pytest.raises(SystemExit, match="SRO_BENCH_PAIRS must be"):
            _pairs(bad)
