"""`sro demo`'s stages on the real cluster: driver, discovery, device plugin, a 2-GPU workload, cleanup."""

from __future__ import annotations

import re

import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.demo import cleanup, run
from sro.local.cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.root]


def test_demo_stages_end_with_a_workload_holding_two_simulated_gpus(
    cluster: LocalCluster, sro_image: str
) -> None:
    try:
        node, output = run(cluster, lambda _: None)
        labels = node["metadata"]["labels"]
        assert labels[f"{SIMULATED_GPU.label_prefix}count"] == "8"
        assert labels[f"{SIMULATED_GPU.label_prefix}simulated"] == "true"
        assert node["status"]["allocatable"][SIMULATED_GPU.resource] == "8"
        lines = output.splitlines()
        visible = lines[0].split("=", 1)[1].split(",")
        assert len(visible) == 2 and all(v.startswith("GPU-") for v in visible), output
        assert sorted(re.findall(r"sro-simgpu\d+", lines[1])) == ["sro-simgpu0", "sro-simgpu1"], output
        assert "SIMULATED devices" in output and all(v in output for v in visible), output
    finally:
        cleanup(cluster)
    node_labels = cluster.kubectl("get", "node", cluster.node_name, "--show-labels").stdout
    assert "sro.dev/simulated-gpu" not in node_labels
    assert "feature.node.kubernetes.io/" not in node_labels
