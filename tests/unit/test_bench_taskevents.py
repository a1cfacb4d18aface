"""The container start benchmark reads containerd's `ctr events` lines: a pod's sandbox by its labels,
each task's first start to the nanosecond, other namespaces and topics left out."""

from __future__ import annotations

import json

import pytest

from benchmarks.taskevents import TaskEvents, stamp

SANDBOX = "318a8fe2ee7ab342d76865ca2a9a522675a8e0cda54bfdde9c26bfe0a9b2851d"
APP = "084350d4afa191de9f253e151d09787f1f10b268e7fe363d52e29405d1550e34"


def _line(when: str, topic: str, event: dict[str, object], namespace: str = "k8s.io") -> str:
    return f"2026-12-02 {when} +0000 UTC {namespace} {topic} {json.dumps(event)}"


LABELS = {
    "io.cri-containerd.kind": "sandbox",
    "io.kubernetes.pod.name": "p",
    "io.kubernetes.pod.namespace": "ns",
}
LINES = [
    'time="2026-12-02T15:43:21Z" level=warning msg="DEPRECATION: CRI API v1alpha2 is deprecated"',
    _line("15:43:22.769299711", "/containers/create", {"id": SANDBOX, "image": "localhost/pause:sro"}),
    _line("15:43:22.775369309", "/containers/update", {"id": SANDBOX, "labels": LABELS}),
    _line("15:43:22.904417272", "/tasks/start", {"container_id": SANDBOX, "pid": 9293}),
    _line("15:43:22.920246719", "/containers/create", {"id": APP, "image": "localhost/busybox:sro"}),
    _line("15:43:22.989826615", "/tasks/create", {"container_id": APP, "bundle": "/run/x"}),
    _line("15:43:23.0029", "/tasks/start", {"container_id": APP, "pid": 9324}),  # fewer digits
    _line("15:43:24.5", "/tasks/start", {"container_id": APP, "pid": 9400}),  # a restart: not the first
    _line("15:43:23.0", "/tasks/start", {"container_id": "other", "pid": 1}, namespace="moby"),
]


def test_the_span_is_sandbox_task_start_to_container_task_start() -> None:
    events = TaskEvents()
    events.feed(LINES)
    assert events.sandboxes == {("ns", "p"): SANDBOX}
    span = events.span("ns", "p", APP)
    assert span == pytest.approx(23.0029 - 22.904417272, abs=1e-6)
    assert "other" not in events.started


def test_an_unseen_pod_or_container_has_no_span() -> None:
    events = TaskEvents()
    events.feed(LINES[:4])  # the container has not started yet
    assert events.span("ns", "p", APP) is None
    assert events.span("ns", "q", APP) is None


def test_stamps_keep_nanoseconds() -> None:
    a, b = stamp("2026-12-02 15:43:22", "904417272"), stamp("2026-12-02 15:43:22", "904417273")
    assert b - a == 1
    assert stamp("2026-12-02 15:43:22", None) == stamp("2026-12-02 15:43:22", "0")
