"""Comparing two benchmark reports: only a move larger than both runs' spreads is flagged.

Also pins the report document `compare` reads (reporting.document), so a change to one side of the
JSON that the other does not follow fails here rather than in a comparison run weeks later.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import compare, reporting
from benchmarks.harness import Figure, paired_figure


def _doc(*figures: Figure) -> dict[str, object]:
    return reporting.document(list(figures), {"cores": 2}, {})


def _fig(name: str, measured: list[float], baseline: list[float]) -> Figure:
    return paired_figure(name, "ms", "floor", measured, baseline, goal=2.0)


def test_worse_only_when_b_spread_lies_above_a_spread() -> None:
    a = compare.figures(_doc(_fig("x", [10, 11, 12], [10, 10, 10]), _fig("y", [10, 20, 15], [10, 10, 10])))
    b = compare.figures(_doc(_fig("x", [13, 14, 15], [10, 10, 10]), _fig("y", [18, 19, 25], [10, 10, 10])))
    by_name = {c.name: c for c in compare.compare(a, b)}
    assert by_name["x"].flag == "WORSE"  # 1.3–1.5x against 1.0–1.2x
    assert by_name["x"].change == pytest.approx(1.4 / 1.1)
    assert by_name["y"].flag == ""  # 1.8–2.5x overlaps 1.0–2.0x: within the noise


def test_better_when_b_spread_lies_below() -> None:
    a = compare.figures(_doc(_fig("x", [30, 31, 32], [10, 10, 10])))
    b = compare.figures(_doc(_fig("x", [10, 11, 12], [10, 10, 10])))
    (c,) = compare.compare(a, b)
    assert c.flag == "better"
    assert c.change is not None and c.change < 1


def test_single_measurements_compare_as_points() -> None:
    a = compare.figures(_doc(Figure("rss", 40.0, 20.0, "MiB", "bare")))
    b = compare.figures(_doc(Figure("rss", 50.0, 20.0, "MiB", "bare")))
    (c,) = compare.compare(a, b)
    assert (c.a, c.b) == (compare.Side(2.0, 2.0, 2.0), compare.Side(2.5, 2.5, 2.5))
    assert c.flag == "WORSE"


def test_figures_present_in_one_report_only_are_listed_and_flagged() -> None:
    a = compare.figures(_doc(Figure("old", 1.0, 1.0, "s", "b"), Figure("both", 1.0, 1.0, "s", "b")))
    b = compare.figures(_doc(Figure("both", 1.0, 1.0, "s", "b"), Figure("new", 1.0, 1.0, "s", "b")))
    changes = compare.compare(a, b)
    assert [(c.name, c.flag) for c in changes] == [("old", "only in A"), ("both", ""), ("new", "only in B")]
    assert compare.rows(changes)[0] == ("old", "1.00x", "-", "-", "only in A")


def test_a_zero_baseline_is_null_in_json_and_not_compared() -> None:
    doc = _doc(Figure("z", 1.0, 0.0, "s", "none"))
    text = json.dumps(doc, allow_nan=False)  # strict JSON: no Infinity
    (c,) = compare.compare(compare.figures(json.loads(text)), compare.figures(json.loads(text)))
    assert (c.change, c.flag) == (None, "")


def test_load_refuses_what_is_not_a_report(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "other.json").write_text('{"x": 1}')
    with pytest.raises(ValueError, match="not JSON"):
        compare.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="not a benchmark report"):
        compare.load(tmp_path / "other.json")
    with pytest.raises(ValueError, match="cannot read"):
        compare.load(tmp_path / "missing.json")


def test_main_prints_one_line_on_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main([str(tmp_path / "a.json")]) == 2
    assert compare.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("usage:") and out[1].startswith("compare: cannot read")


def test_main_round_trips_a_written_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, runs in (("a", [10.0, 11.0]), ("b", [30.0, 31.0])):
        (tmp_path / f"{name}.json").write_text(json.dumps(_doc(_fig("x", runs, [10.0, 10.0]))))
    assert compare.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "WORSE" in out and "1 figures: 1 worse, 0 better" in out


def test_report_status_summary_and_explanations() -> None:
    figs = [
        _fig("met", [10.0], [10.0]),
        _fig("missed", [30.0], [10.0]),
        paired_figure("floor", "ms", "b", [30.0], [10.0], goal=2.0, why="the kubelet's 1 s probe period"),
        Figure("info", 1.0, 2.0, "MiB", "bare"),
    ]
    assert [reporting.status(f) for f in figs] == ["yes", "NO", "explained", "-"]
    assert reporting.summary(figs) == "1 of 3 goals met, 1 explained, 1 not met"
    assert reporting.explanations(figs) == ["floor: the kubelet's 1 s probe period"]
    row = reporting.row(_fig("x", [10.0, 30.0, 21.0], [10.0, 10.0, 10.0]))
    assert row[3:] == ("2.10x", "1.00x–3.00x", "<= 2x", "NO")
    rec = reporting.record(figs[2])
    assert rec["ratios"] == [3.0] and rec["spread"] == [3.0, 3.0] and rec["status"] == "explained"
    assert rec["measured_runs"] == [30.0] and rec["baseline_runs"] == [10.0]


def test_a_record_reads_back_as_the_same_figure() -> None:
    f = paired_figure("x", "ms", "floor", [30.0, 10.0], [10.0, 0.0], goal=1.5, why="a floor")
    back = reporting.figure_from(json.loads(json.dumps(reporting.record(f))))
    assert back == f  # the infinite per-pair ratio went out as null and came back infinite


def test_merge_keeps_the_later_run_of_a_figure_and_every_machine() -> None:
    a = _doc(Figure("x", 1.0, 1.0, "s", "b"), Figure("y", 2.0, 1.0, "s", "b"))
    b = _doc(Figure("x", 3.0, 1.0, "s", "b"))
    merged = reporting.merge([("a.json", a), ("b.json", b)])
    assert [(r["name"], r["ratio"]) for r in merged["figures"]] == [("y", 2.0), ("x", 3.0)]
    assert [m["file"] for m in merged["machine"]["merged_from"]] == ["a.json", "b.json"]
    assert merged["summary"] == "0 of 0 goals met, 0 explained, 0 not met"


def test_an_absolute_limit_is_judged_counted_and_kept_in_json() -> None:
    """The issue's absolute targets (operator RSS < 150 MiB, relabel p99 < 1 s) are judged on the value,
    whatever its informational baseline: a p99 of 1.9 s is not met, and the summary counts it."""
    over = Figure("relabel p99", 1.94, 0.4, "s", "one LIST of all nodes", "< 1 s", limit=1.0)
    under = Figure("rss", 115.0, 95.0, "MiB", "idle", "< 150 MiB", limit=150.0)
    at = Figure("at", 1.0, 0.4, "s", "list", "< 1 s", limit=1.0)
    assert [reporting.status(f) for f in (over, under, at)] == ["NO", "yes", "NO"]
    assert reporting.summary([over, under, Figure("info", 1.0, 2.0, "MiB", "bare")]) == (
        "1 of 2 goals met, 0 explained, 1 not met"
    )
    assert reporting.figure_from(json.loads(json.dumps(reporting.record(over)))) == over
