"""The campaign's SpecialResource delete-and-apply fault over a fake cluster: a delete slower than
SLOW_DELETE_S keeps the operator replicas' logs of it in a file the fault's line names (a slow
delete in a campaign was not explainable afterwards: the replicas had been replaced)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks.chaos import faults


class FakeCluster:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def kubectl(self, *args: str, check: bool = False, input: str | None = None, timeout: float = 120) -> Any:
        self.calls.append(args)
        out = ""
        if args[:2] == ("get", "pods"):
            out = json.dumps(
                {
                    "items": [
                        {"metadata": {"name": "sro-operator-a"}},
                        {"metadata": {"name": "sro-operator-b"}},
                    ]
                }
            )
        elif args[0] == "logs":
            out = f"2026-11-26T09:35:25Z {args[3]}: chaos-gpu: deleted; removing its DaemonSets\n"
        return subprocess.CompletedProcess(args, 0, out, "")


def target(cluster: FakeCluster) -> faults.Target:
    doc = {"apiVersion": "sro.dev/v1alpha1", "kind": "SpecialResource", "metadata": {"name": "chaos-gpu"}}
    return faults.Target(cluster, "chaos-gpu", doc, "localhost/sro:0.1.0")  # type: ignore[arg-type]


def test_a_quick_delete_keeps_no_logs() -> None:
    cluster = FakeCluster()
    line = faults.sr_reapplied(target(cluster), {})
    assert line.startswith("SpecialResource deleted in") and "slow" not in line
    assert [c[0] for c in cluster.calls] == ["delete", "apply"]


def test_a_slow_delete_keeps_every_replicas_log_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "SLOW_DELETE_S", -1.0)
    cluster = FakeCluster()
    line = faults.sr_reapplied(target(cluster), {})
    path = Path(line.split("are in ")[1])
    try:
        text = path.read_text()
        assert "==== sro-operator-a" in text and "==== sro-operator-b" in text
        assert "sro-operator-b: chaos-gpu: deleted" in text
        logs = [c for c in cluster.calls if c[0] == "logs"]
        assert len(logs) == 2 and all(any(a.startswith("--since=") for a in c) for c in logs)
        assert cluster.calls[-1][0] == "apply", "it is applied again after the logs are kept"
    finally:
        path.unlink()
