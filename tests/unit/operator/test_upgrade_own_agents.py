"""The holder scan does not wait for sro's own agents: on the `nvml` backend the device plugin, the
exporter and discovery map the driver's libnvidia-ml.so, and they only go (or restart) once the
driver's revision moves, so an upgrade that waited for them never ended (found on the local cluster
with the simulated NVIDIA driver). Anyone else's process still blocks it, named."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from sro.operator.observed import PodInfo, workload_from_json
from sro.operator.upgrade.record import DRIVER_REPLACED, PODS_EVICTED
from sro.operator.upgrade.scan import read_scan
from tests.unit.operator.test_upgrade import NEW, NOW, NS, REV_KEY, facts, node, rec, run, scan, sr, workload

LIB = "libnvidia-ml.so.550.90.07"


def message(*holders: tuple[int, str, str]) -> str:
    return json.dumps(
        {
            "holders": [
                {"pid": pid, "exe": "python3.11", "holds": holds, "podUID": uid}
                for pid, holds, uid in holders
            ]
        }
    )


def test_read_scan_leaves_out_our_pods_only() -> None:
    text = message((10, LIB, "plugin-uid"), (11, LIB, "discovery-uid"), (12, "/dev/nvidia0", "user-uid"))
    free, words = read_scan(text, frozenset({"plugin-uid", "discovery-uid"}))
    assert not free and words == "process 12 (python3.11) holds /dev/nvidia0 in pod user-uid"
    assert read_scan(message((10, LIB, "plugin-uid")), frozenset({"plugin-uid"})) == (True, "")
    free, words = read_scan(message((10, LIB, "plugin-uid")))  # nothing said to be ours: it blocks
    assert not free and "process 10" in words
    # a process outside any pod is never ours, even with an empty uid among ours
    assert read_scan(message((13, LIB, "")), frozenset({""}))[0] is False


def test_the_states_pods_and_our_daemonsets_do_not_block_the_upgrade() -> None:
    n = node("a", record=rec(PODS_EVICTED))
    text = message((10, LIB, "plugin-uid"), (11, LIB, "discovery-uid"))
    held = scan(sr(), n, "Failed", message=text, finished_at=NOW - timedelta(seconds=1))
    elsewhere = workload("sro-discovery-x", device=False, controller="DaemonSet", uid="discovery-uid")
    discovery = replace(elsewhere, namespace=NS)  # the operator's namespace: sro's own
    plan = run(sr(), facts(n, workloads=(discovery,), scan=held, own=frozenset({"plugin-uid"})))
    record = plan.nodes["a"].record
    assert record is not None and record.state == DRIVER_REPLACED
    assert plan.nodes["a"].labels[REV_KEY] == NEW
    # the same DaemonSet pod in another namespace is someone else's: it blocks
    plan = run(sr(), facts(n, workloads=(elsewhere,), scan=held, own=frozenset({"plugin-uid"})))
    record = plan.nodes["a"].record
    assert record is not None and record.state == PODS_EVICTED and "process 11" in record.reason
    assert "process 10" not in record.reason


def test_a_workload_pod_carries_its_uid() -> None:
    doc = {"metadata": {"name": "p", "namespace": NS, "uid": "u-1"}, "spec": {"nodeName": "a"}}
    assert workload_from_json(doc).uid == "u-1"
    assert isinstance(PodInfo("s", "a", "upgrade-scan").uid, str)
