"""`sro demo`'s stages on the real cluster: sro install, the operator walking the example
SpecialResource to a validated node, a 2-GPU workload, and a cleanup that leaves nothing of ours."""

from __future__ import annotations

import json
import re

import pytest

from sro.api.names import simulated_opt_in_label
from sro.api.recipes import SIMULATED_GPU
from sro.demo.stages import cleanup, run
from sro.local.cluster import LocalCluster
from sro.operator.cdiruntime import reads_cdi

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(900)]


def test_demo_stages_end_with_a_workload_holding_two_simulated_gpus(
    cluster: LocalCluster, sro_image: str
) -> None:
    try:
        outcome = run(cluster, lambda _: None)
        node, output = outcome.node, outcome.output
        labels = node["metadata"]["labels"]
        assert labels[f"{SIMULATED_GPU.label_prefix}count"] == "8"
        assert labels[f"{SIMULATED_GPU.label_prefix}simulated"] == "true"
        assert node["status"]["allocatable"][SIMULATED_GPU.resource] == "8"
        lines = output.splitlines()
        visible = lines[0].split("=", 1)[1].split(",")
        assert len(visible) == 2 and all(v.startswith("GPU-") for v in visible), output
        assert sorted(re.findall(r"sro-simgpu\d+", lines[1])) == ["sro-simgpu0", "sro-simgpu1"], output
        assert "SIMULATED devices" in output and all(v in output for v in visible), output
        # the path the stage named is the operator's rule for this node's runtime (run() has checked
        # the pod: no runtimeClassName and simgpu-smi from the CDI spec there, else it raised)
        runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
        assert outcome.path is not None and outcome.path.cdi is reads_cdi(runtime), (runtime, outcome.path)
        tried = {row[0].split(" ")[0]: row for row in outcome.partitioning}
        assert len(outcome.partitioning) == 4, outcome.partitioning
        assert "taint" in tried["CPU-only"][2]
        assert "exceeded quota" in tried["2nd"][2]
        assert "Preempted by" in tried["high-priority"][2]
    finally:
        cleanup(cluster)
    node = json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout)
    ours = [
        k for k in node["metadata"]["labels"] if k.startswith(("sro.dev/", "feature.node.kubernetes.io/"))
    ]
    assert ours == [simulated_opt_in_label(SIMULATED_GPU.name)], ours  # `sro local up` sets the opt-in
    assert cluster.kubectl("get", "crd", "specialresources.sro.dev", check=False).returncode != 0
