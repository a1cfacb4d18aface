"""When containerd started a pod's sandbox and its container, read from containerd's own events.

Why events: the span a container start benchmark compares (sandbox started -> container started:
CNI, the image check, the CDI edits, runc create with its hooks, runc start) is ~150 ms, and the
clocks a pod can read itself (/proc/uptime, a process's start time in /proc/<pid>/stat) tick every
10 ms: two medians one tick apart were the whole difference. containerd stamps each event in
nanoseconds as it publishes it: `/tasks/start` after runc has started the task's process.

`ctr events` prints one line per event (the namespace, the topic, the event as JSON):
`2026-12-02 15:43:22.904417272 +0000 UTC k8s.io /tasks/start {"container_id":"318a...","pid":9293}`
A sandbox is named by the container records' labels (`io.cri-containerd.kind: sandbox`,
`io.kubernetes.pod.name`/`namespace`) in its `/containers/create` or `/containers/update` events.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterable

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d+))? \+0000 UTC (\S+) (/\S+) (\{.*\})\s*$")


def stamp(date_time: str, fraction: str | None) -> int:
    """Nanoseconds since the epoch of a UTC `YYYY-MM-DD HH:MM:SS` and its decimal fraction (an int:
    a float of epoch seconds keeps only a quarter of a microsecond)."""
    whole = datetime.datetime.strptime(date_time, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.UTC)
    return int(whole.timestamp()) * 10**9 + (int(fraction.ljust(9, "0")[:9]) if fraction else 0)


class TaskEvents:
    """Task starts by container id, and sandbox ids by (namespace, pod name), from event lines."""

    def __init__(self, namespace: str = "k8s.io") -> None:
        self.namespace = namespace
        self.started: dict[str, int] = {}  # ns
        self.sandboxes: dict[tuple[str, str], str] = {}

    def feed(self, lines: Iterable[str]) -> None:
        for line in lines:
            m = _LINE.match(line)
            if m is None or m[3] != self.namespace:
                continue
            try:
                event = json.loads(m[5])
            except ValueError:
                continue
            if m[4] == "/tasks/start" and "container_id" in event:
                self.started.setdefault(event["container_id"], stamp(m[1], m[2]))
            elif m[4] in ("/containers/create", "/containers/update"):
                labels = event.get("labels") or {}
                if labels.get("io.cri-containerd.kind") == "sandbox" and "io.kubernetes.pod.name" in labels:
                    pod = (labels.get("io.kubernetes.pod.namespace", ""), labels["io.kubernetes.pod.name"])
                    self.sandboxes[pod] = event["id"]

    def span(self, namespace: str, pod: str, container_id: str) -> float | None:
        """Seconds from the pod's sandbox task start to its container's task start (None: not seen)."""
        sandbox = self.sandboxes.get((namespace, pod))
        if sandbox is None or sandbox not in self.started or container_id not in self.started:
            return None
        return (self.started[container_id] - self.started[sandbox]) / 1e9


class EventStream:
    """`ctr events` in the background, fed into a TaskEvents as its lines come; stop() ends it."""

    def __init__(self, address: str, namespace: str = "k8s.io") -> None:
        self.events = TaskEvents(namespace)
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            ["ctr", "--address", address, "--namespace", namespace, "events"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            with self._lock:
                self.events.feed([line])

    def span(self, namespace: str, pod: str, container_id: str, wait: float = 10.0) -> float:
        """TaskEvents.span, waiting up to `wait` s for both events to be read."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                found = self.events.span(namespace, pod, container_id)
            if found is not None:
                return found
            if time.monotonic() > deadline or self._proc.poll() is not None:
                raise RuntimeError(f"benchmark: no containerd task start events for pod {namespace}/{pod}")
            time.sleep(0.05)

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._thread.join(timeout=5)
