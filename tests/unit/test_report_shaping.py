"""From Prometheus answers to a report's series and the status lines (pure)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sro.report.shaping import (
    ShapeError,
    display_names,
    matrix_series,
    memory_legend,
    node_summaries,
    panels,
    summary_line,
    title,
    vector_samples,
)


def matrix(*series: tuple[dict[str, str], list[tuple[float, str]]]) -> dict[str, Any]:
    return {
        "resultType": "matrix",
        "result": [{"metric": m, "values": [[t, v] for t, v in values]} for m, values in series],
    }


SIM = {"simulated": "true"}


def test_series_are_named_per_grouping_and_in_natural_order() -> None:
    data = matrix(
        ({"Hostname": "n", "gpu": "10", **SIM}, [(1, "5")]),
        ({"Hostname": "n", "gpu": "2", **SIM}, [(1, "7")]),
        ({"Hostname": "n", "gpu": "0", "GPU_I_ID": "3"}, [(1, "1")]),
        ({"gpu": "1"}, [(1, "1")]),
    )
    names = [s.name for s in matrix_series(data, "device")]
    assert names == ["(no Hostname) gpu1", "n gpu0/mig3", "n gpu2", "n gpu10"]
    by_ns = matrix_series(matrix(({"namespace": "team-a"}, []), ({}, [])), "namespace")
    assert [s.name for s in by_ns] == ["(no namespace)", "team-a"]


def test_values_keep_nan_and_reject_garbage() -> None:
    (s,) = matrix_series(matrix(({"Hostname": "a"}, [(1, "NaN"), (2, "3.5"), (3, "NaN")])), "node")
    assert math.isnan(s.values[0]) and s.last() == 3.5
    with pytest.raises(ShapeError, match="not a number"):
        matrix_series(matrix(({"Hostname": "a"}, [(1, "x")])), "node")
    with pytest.raises(ShapeError, match="expected a matrix result, got 'vector'"):
        matrix_series({"resultType": "vector", "result": []}, "node")
    with pytest.raises(ShapeError):
        matrix_series(None, "node")


def test_used_share_is_computed_where_both_were_scraped() -> None:
    used = matrix(({"Hostname": "a", **SIM}, [(1, "1024"), (2, "2048"), (3, "4096")]))
    free = matrix(({"Hostname": "a", **SIM}, [(2, "6144"), (3, "4096")]))  # no free at t=1
    p = panels("node", matrix(), used, free)
    (share,) = p.used_share
    assert share.times == (2, 3) and share.values == (25.0, 50.0)
    assert p.total_mib == {(("a",), True): 8192.0}
    assert memory_legend(p, (("a",), True), "a") == "a  4.0 / 8.0 GiB"


def test_no_free_metric_means_no_share_and_used_alone_in_the_legend() -> None:
    p = panels("node", matrix(), matrix(({"Hostname": "a"}, [(1, "2048")])), matrix())
    assert p.used_share == () and p.total_mib == {}
    assert memory_legend(p, (("a",), False), "a") == "a  2.0 GiB"
    assert memory_legend(p, (("b",), False), "b") == "b"


def test_simulated_is_said_in_the_title_and_marked_only_when_mixed() -> None:
    util_sim = matrix(({"Hostname": "a", **SIM}, [(1, "5")]), ({"Hostname": "b", **SIM}, [(1, "5")]))
    p = panels("node", util_sim, matrix(), matrix())
    assert p.simulated == "all"
    assert "by node — SIMULATED devices\nlast 1h, step 15s, times in UTC" in title(p, 3600, 15, "")
    assert display_names(p) == {(("a",), True): "a", (("b",), True): "b"}

    mixed = panels(
        "node",
        matrix(({"Hostname": "a", **SIM}, [(1, "5")]), ({"Hostname": "b"}, [(1, "5")])),
        matrix(),
        matrix(),
    )
    assert mixed.simulated == "some"
    assert "some series from SIMULATED devices" in title(mixed, 60, 1, " (node a)")
    assert display_names(mixed) == {(("a",), True): "a (simulated)", (("b",), False): "b"}

    real = panels("device", matrix(({"Hostname": "a", "gpu": "0"}, [(1, "5")])), matrix(), matrix())
    assert real.simulated == "none" and "SIMULATED" not in title(real, 60, 1, "")


def test_groups_come_from_utilisation_or_memory() -> None:
    p = panels(
        "node", matrix(({"Hostname": "a"}, [(1, "5")])), matrix(({"Hostname": "b"}, [(1, "5")])), matrix()
    )
    assert p.groups == ((("a",), False), (("b",), False))


def vector(*samples: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {"resultType": "vector", "result": [{"metric": m, "value": [1700000000.0, v]} for m, v in samples]}


def dev(name: str, node: str, gpu: str, **extra: str) -> dict[str, str]:
    return {"__name__": f"DCGM_FI_DEV_{name}", "Hostname": node, "gpu": gpu, **extra}


def test_status_lines_per_node() -> None:
    data = vector(
        (dev("GPU_UTIL", "node-b", "0"), "90"),
        (dev("GPU_UTIL", "node-b", "1"), "30"),
        (dev("FB_USED", "node-b", "0"), "40960"),
        (dev("FB_FREE", "node-b", "0"), "40960"),
        (dev("FB_USED", "node-b", "1"), "0"),
        (dev("FB_FREE", "node-b", "1"), "81920"),
        (dev("GPU_UTIL", "node-a", "0", simulated="true"), "12"),
        (dev("GPU_UTIL", "", "9"), "50"),  # no node: left out
        (dev("GPU_TEMP", "node-a", "0"), "60"),  # not a reading of the summary
    )
    lines = [summary_line(s) for s in node_summaries(vector_samples(data))]
    assert lines == [
        "node-a: 1 GPU, utilisation 12% (max 12%), SIMULATED",
        "node-b: 2 GPUs, utilisation 60% (max 90%), framebuffer 40.0/160.0 GiB (25%)",
    ]


def test_status_vector_shape_is_checked() -> None:
    with pytest.raises(ShapeError, match="expected a vector result"):
        vector_samples({"resultType": "matrix", "result": []})
    with pytest.raises(ShapeError, match="malformed sample"):
        vector_samples({"resultType": "vector", "result": [{"metric": {}, "value": [1]}]})
