"""`sro demo` and `sro demo --nvidia`, their pure parts: the default flavour is the demo as it was,
the NVIDIA one is examples/simulated-nvidia.yaml on the nvidia-gpu recipe with an nvidia-smi workload,
and the flag picks it (the stages themselves run in tests/e2e/test_demo.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.demo import commands, flavours, partitioning
from sro.demo.flavours import NVIDIA, SIMULATED
from sro.demo.stages import Outcome, workload_pod
from sro.local.layout import BUSYBOX_IMAGE, GLIBC_IMAGE


def test_the_default_flavour_is_the_demo_as_it_was() -> None:
    pod = workload_pod()
    container = pod["spec"]["containers"][0]
    assert container["image"] == BUSYBOX_IMAGE and "runtimeClassName" not in pod["spec"]  # CDI default
    assert container["resources"] == {"limits": {SIMULATED_GPU.resource: "2"}}
    assert container["command"][-1] == (
        'echo "SRO_VISIBLE_DEVICES=$SRO_VISIBLE_DEVICES"; '
        "ls /dev | grep sro-simgpu | tr '\\n' ' '; echo; simgpu-smi"
    )
    assert SIMULATED.special_resource()["metadata"]["name"] == "simulated-gpu"
    assert SIMULATED.opt_in == ""  # `sro local up` sets simulated-gpu's opt-in, the demo leaves it
    assert commands.next_steps(SIMULATED) == (
        'Next: eval "$(sro local env)"; kubectl get sr; kubectl -n sro-system get pods; sro status\n'
        "      sro simulate fault --device 0 --xid 79   # watch allocatable drop, then --clear\n"
        "      sro demo --cleanup                       # remove what the demo deployed"
    )


def test_the_nvidia_flavour_is_the_example_on_nvidia_gpu() -> None:
    doc = NVIDIA.special_resource()
    assert doc == yaml.safe_load((Path(flavours.EXAMPLES) / "simulated-nvidia.yaml").read_text())
    assert doc["spec"]["recipe"] == NVIDIA_GPU.name and doc["spec"]["driver"]["mode"] == "simulated"
    assert NVIDIA.opt_in == "sro.dev/nvidia-gpu.simulated"
    pod = workload_pod(NVIDIA)
    container = pod["spec"]["containers"][0]
    assert container["image"] == GLIBC_IMAGE and "runtimeClassName" not in pod["spec"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert (
        "$NVIDIA_VISIBLE_DEVICES" in container["command"][-1] and "nvidia-smi -L" in container["command"][-1]
    )
    assert "--driver-root /run/nvidia/driver" in commands.next_steps(NVIDIA)
    assert "sro demo --nvidia --cleanup" in commands.next_steps(NVIDIA)


def test_the_built_in_document_is_the_example(tmp_path: Path) -> None:
    """An installed wheel has no examples/: the built-in copy must say the same."""
    from dataclasses import replace

    example = yaml.safe_load(NVIDIA.example.read_text())
    gone = replace(NVIDIA, example=tmp_path / "absent.yaml")
    assert gone.special_resource() == example
    assert yaml.safe_load(gone.special_resource()["spec"]["driver"]["devicesConfig"]) == yaml.safe_load(
        example["spec"]["driver"]["devicesConfig"]
    )


def test_partitioning_pods_ask_for_the_flavours_resource() -> None:
    gpu = partitioning.pod("p", "ns", gpus=3, resource=NVIDIA_GPU.resource)
    assert gpu["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "3"}}
    assert partitioning.pod("p", "ns", gpus=1)["spec"]["containers"][0]["resources"] == {
        "limits": {SIMULATED_GPU.resource: "1"}
    }
    assert "resources" not in partitioning.pod("cpu", "ns")["spec"]["containers"][0]


def test_the_flag_picks_the_flavour(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    node = {
        "metadata": {"labels": {"nvidia.com/gpu.count": "4"}},
        "status": {"allocatable": {"nvidia.com/gpu": "4"}},
    }

    class Cluster:
        node_name = "vm"

    def run(cluster: Any, progress: Any, flavour: Any, report: Any) -> Outcome:
        seen.append(("run", flavour.name))
        assert report == Path("report.png")  # the monitoring stage is on by default
        return Outcome(node, "GPU 0: ...", [])

    monkeypatch.setattr(commands.LocalCluster, "default", staticmethod(lambda: Cluster()))
    monkeypatch.setattr(commands, "run", run)
    monkeypatch.setattr(commands, "show", lambda c, o, f: seen.append(("show", f.recipe.resource)))
    monkeypatch.setattr(commands, "cleanup", lambda c, f: seen.append(("cleanup", f.name)))
    result = CliRunner().invoke(commands.demo, ["--nvidia", "--cleanup"])
    assert result.exit_code == 0, result.output
    assert seen == [("run", "simulated-nvidia"), ("show", "nvidia.com/gpu"), ("cleanup", "simulated-nvidia")]
    seen.clear()
    result = CliRunner().invoke(commands.demo, [])
    assert result.exit_code == 0, result.output
    assert seen == [("run", "simulated-gpu"), ("show", SIMULATED_GPU.resource)]
    assert "sro simulate fault --device 0 --xid 79   #" in result.output
