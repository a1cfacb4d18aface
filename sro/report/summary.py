"""One line of GPU utilisation per node for `sro status`, when a Prometheus is reachable.

Why quiet: the status table is the point of `sro status`; the utilisation line is a bonus. When
Prometheus is down, slow, answers an error or has no GPU metrics, the lines are simply not there
(a debug log says why), and it never waits more than `timeout` seconds.
"""

from __future__ import annotations

import logging

from sro.report.prometheus import Prometheus, PrometheusError, default_url
from sro.report.promql import summary_query
from sro.report.shaping import ShapeError, node_summaries, summary_line, vector_samples

log = logging.getLogger(__name__)


def utilisation_lines(prometheus_url: str | None = None, *, timeout: float = 2.0) -> list[str]:
    """`node-a: 4 GPUs, utilisation 63% (max 91%), framebuffer 120.0/320.0 GiB (38%), SIMULATED`, one
    per node with DCGM metrics, from one instant query; [] when there is no answer. Default URL:
    `$PROMETHEUS_URL`, else http://127.0.0.1:9090."""
    prom = Prometheus(prometheus_url or default_url(), timeout=timeout)
    try:
        samples = vector_samples(prom.query(summary_query()))
    except (PrometheusError, ShapeError) as e:
        log.debug("no utilisation summary: %s", e)
        return []
    return [summary_line(s) for s in node_summaries(samples)]
