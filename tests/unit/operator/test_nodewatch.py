"""Node events wake the operator only when what a reconcile reads of the node changed."""

from __future__ import annotations

import copy
from typing import Any

from sro.operator.nodewatch import NodeWatch


def _node(**labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "n1",
            "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": "n1", **labels},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t0"}]},
    }


def test_status_heartbeats_and_foreign_labels_wake_nothing() -> None:
    watch = NodeWatch()
    node = _node(**{"feature.node.kubernetes.io/kernel-version.full": "6.1.0"})
    assert watch.changed(node, deleted=False)  # first seen
    later = copy.deepcopy(node)
    later["metadata"]["resourceVersion"] = "2"
    later["status"]["conditions"][0]["lastHeartbeatTime"] = "t1"
    later["status"]["images"] = [{"names": ["x"]}]
    later["metadata"]["labels"]["team"] = "a"  # no SpecialResource reads it
    later["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"] = "true"
    assert not watch.changed(later, deleted=False)


def test_what_a_reconcile_reads_wakes_it() -> None:
    changes = [
        ("labels", "feature.node.kubernetes.io/kernel-version.full", "6.2.0"),  # kernel: another driver
        ("labels", "feature.node.kubernetes.io/system-os_release.ID", "ubuntu"),
        ("labels", "feature.node.kubernetes.io/pci-0302_10de.present", "true"),  # selection
        ("labels", "sro.dev/gpus.driver", "ready"),  # ours
        ("labels", "nvidia.com/gpu.count", "8"),  # the recipe's device count
        ("annotations", "sro.dev/gpus.reached", "selected=t"),
    ]
    for where, key, value in changes:
        watch = NodeWatch()
        node = _node()
        watch.changed(node, deleted=False)
        node = copy.deepcopy(node)
        node["metadata"][where][key] = value
        assert watch.changed(node, deleted=False), key
        assert not watch.changed(node, deleted=False), key  # the same view again: nothing new


def test_taints_cordon_and_deletion_wake_it() -> None:
    watch = NodeWatch()
    node = _node()
    watch.changed(node, deleted=False)
    tainted = copy.deepcopy(node)
    tainted["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    assert watch.changed(tainted, deleted=False)
    cordoned = copy.deepcopy(tainted)
    cordoned["spec"]["unschedulable"] = True
    assert watch.changed(cordoned, deleted=False)
    assert watch.changed(cordoned, deleted=True)
    assert watch.changed(cordoned, deleted=False)  # it came back
    unknown = copy.deepcopy(cordoned)
    unknown.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    assert watch.changed(unknown, deleted=False)  # its kubelet went silent


def test_a_node_selector_key_outside_the_prefixes_is_watched_once_a_pass_read_it() -> None:
    watch = NodeWatch()
    node = _node()
    watch.changed(node, deleted=False)
    labelled = copy.deepcopy(node)
    labelled["metadata"]["labels"]["pool"] = "gpu"
    assert not watch.changed(labelled, deleted=False)
    watch.read_by("gpus", {"pool", "sro.dev/simulated-gpu.count"})
    assert watch.keys == frozenset({"pool"})
    assert watch.changed(labelled, deleted=False)  # the view now includes pool
    relabelled = copy.deepcopy(labelled)
    relabelled["metadata"]["labels"]["pool"] = "cpu"
    assert watch.changed(relabelled, deleted=False)
    watch.forget("gpus")
    assert watch.keys == frozenset()


def test_a_device_resource_in_the_allocatable_wakes_it_cpu_and_memory_do_not() -> None:
    """A workload validation waits for its device in the node's allocatable: the kubelet's status
    update that posts it must wake the pass that creates the pod."""
    watch = NodeWatch()
    node = _node()
    node["status"]["allocatable"] = {"cpu": "2", "memory": "8Gi"}
    watch.changed(node, deleted=False)
    memory = copy.deepcopy(node)
    memory["status"]["allocatable"]["memory"] = "7Gi"
    assert not watch.changed(memory, deleted=False)
    posted = copy.deepcopy(memory)
    posted["status"]["allocatable"]["sro.dev/simulated-gpu"] = "8"
    assert watch.changed(posted, deleted=False)
    unhealthy = copy.deepcopy(posted)
    unhealthy["status"]["allocatable"]["sro.dev/simulated-gpu"] = "7"
    assert watch.changed(unhealthy, deleted=False)
