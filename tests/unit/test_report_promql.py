"""The PromQL of `sro report` and the status summary, and its time range (pure)."""

from __future__ import annotations

import pytest

from sro.report.promql import (
    Filters,
    PromQLError,
    auto_step,
    format_duration,
    parse_duration,
    quote,
    report_queries,
    summary_query,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("15m", 900),
        ("1h", 3600),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("500ms", 0.5),
        ("90", 90),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1x", "h", "1h 30m", "-5m", "0s", "0", "nan", "1.5h", "30s1"])
def test_bad_durations_are_named(text: str) -> None:
    with pytest.raises(PromQLError, match=repr(text.strip())):
        parse_duration(text)


def test_auto_step_is_round_and_keeps_a_few_hundred_points() -> None:
    assert auto_step(60) == 1
    assert auto_step(3600) == 15
    assert auto_step(86400) == 600
    assert auto_step(30 * 86400) == 10800
    for span in (60, 3600, 6 * 3600, 7 * 86400):
        assert 100 <= span / auto_step(span) <= 250 or auto_step(span) == 1


def test_format_duration() -> None:
    assert [format_duration(s) for s in (3600, 90, 15, 86400 + 7200, 0.25)] == [
        "1h",
        "1m30s",
        "15s",
        "1d2h",
        "250ms",
    ]


def test_label_values_are_quoted() -> None:
    assert quote('a"b\\c') == '"a\\"b\\\\c"'
    q = report_queries("device", Filters(node='x"} or vector(1) #'))
    assert 'Hostname="x\\"} or vector(1) #"' in q.util


def test_per_device_queries_dedupe_pod_series() -> None:
    q = report_queries("device", Filters())
    assert q.util == "max by (Hostname, gpu, GPU_I_ID, simulated) (DCGM_FI_DEV_GPU_UTIL)"
    assert q.used == "max by (Hostname, gpu, GPU_I_ID, simulated) (DCGM_FI_DEV_FB_USED)"
    assert q.free == "max by (Hostname, gpu, GPU_I_ID, simulated) (DCGM_FI_DEV_FB_FREE)"


def test_per_node_utilisation_is_averaged_and_memory_summed() -> None:
    q = report_queries("node", Filters(node="node-a"))
    assert q.util == (
        "avg by (Hostname, simulated) "
        '(max by (Hostname, gpu, GPU_I_ID, simulated) (DCGM_FI_DEV_GPU_UTIL{Hostname="node-a"}))'
    )
    assert q.used.startswith("sum by (Hostname, simulated) (max by (Hostname, gpu, GPU_I_ID, simulated) (")


def test_per_namespace_takes_only_devices_pods_hold() -> None:
    q = report_queries("namespace", Filters())
    assert q.util == (
        "avg by (namespace, simulated) "
        '(max by (namespace, Hostname, gpu, GPU_I_ID, simulated) (DCGM_FI_DEV_GPU_UTIL{namespace!=""}))'
    )
    narrowed = report_queries("namespace", Filters(node="n", namespace="team-a"))
    assert 'DCGM_FI_DEV_FB_FREE{Hostname="n",namespace="team-a"}' in narrowed.free
    # A namespace filter on devices keeps the device grouping.
    assert report_queries("device", Filters(namespace="team-a")).util.endswith(
        '(DCGM_FI_DEV_GPU_UTIL{namespace="team-a"})'
    )


def test_summary_query_asks_for_all_three_readings_at_once() -> None:
    assert summary_query() == (
        "max by (__name__, Hostname, gpu, GPU_I_ID, simulated) "
        '({__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE"})'
    )
