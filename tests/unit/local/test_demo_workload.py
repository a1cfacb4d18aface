"""The demo's workload: the pod carries only its request where the node's runtime reads CDI (the
operator's rule), the runtime class only where it does not, the stage line says which, and the
check catches a pod that did not get its devices the way the line says."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sro.demo.flavours import NVIDIA, SIMULATED
from sro.demo.workload import RuntimePath, check, device_nodes, runtime_path, tool, workload_pod

CDI = RuntimePath(True, "containerd 1.7.24")
HOOK = RuntimePath(False, "containerd 1.6.20")
OUTPUT = (
    "SRO_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb\nsro-simgpu0 sro-simgpu1 sro-simgpuctl \nSIMULATED devices: 2\n"
)


@pytest.mark.parametrize(
    ("reported", "cdi", "words"),
    [
        (
            "containerd://1.7.24~ds1-6+deb13u1",
            True,
            "devices through CDI by containerd 1.7.24, no runtime class",
        ),
        ("containerd://2.0.2", True, "devices through CDI by containerd 2.0.2, no runtime class"),
        ("containerd://1.6.20~ds1", False, "through the sro runtime class (containerd 1.6.20 reads no CDI)"),
        ("containerd://Unknown", False, "through the sro runtime class (containerd://Unknown reads no CDI)"),
        ("", False, "through the sro runtime class (an unreported runtime reads no CDI)"),
    ],
)
def test_the_path_is_the_operators_rule_and_the_line_says_it(reported: str, cdi: bool, words: str) -> None:
    path = runtime_path(reported)
    assert path.cdi is cdi and path.words() == words


@pytest.mark.parametrize("flavour", [SIMULATED, NVIDIA], ids=["simulated", "nvidia"])
def test_the_pod_names_the_runtime_class_only_where_cdi_is_not_read(flavour: Any) -> None:
    bare = workload_pod(flavour, cdi=True)
    assert "runtimeClassName" not in bare["spec"]
    container = bare["spec"]["containers"][0]
    assert set(container) == {"name", "image", "imagePullPolicy", "command", "resources"}  # no env
    assert container["resources"] == {"limits": {flavour.recipe.resource: "2"}}
    classed = workload_pod(flavour, cdi=False)
    assert classed["spec"]["runtimeClassName"] == "sro"
    del classed["spec"]["runtimeClassName"]
    assert classed == bare


def test_the_tool_is_the_last_command_of_the_script() -> None:
    assert tool(SIMULATED) == "simgpu-smi" and tool(NVIDIA) == "nvidia-smi"


def test_control_nodes_are_not_counted_as_devices() -> None:
    """The first demo run on the cluster listed sro-simgpuctl beside the two GPUs: that is not a third."""
    simulated = ["sro-simgpu0", "sro-simgpu1", "sro-simgpuctl"]
    assert device_nodes(SIMULATED, simulated) == ["sro-simgpu0", "sro-simgpu1"]
    listed = ["nvidia0", "nvidia12", "nvidiactl", "nvidia-uvm", "nvidia-modeset"]
    assert device_nodes(NVIDIA, listed) == ["nvidia0", "nvidia12"]


def _pod(cdi: bool = True, phase: str = "Succeeded") -> dict[str, Any]:
    pod = workload_pod(SIMULATED, cdi=cdi)
    pod["status"] = {"phase": phase}
    return pod


def test_a_cdi_workload_that_got_its_devices_passes_with_the_evidence() -> None:
    problems, evidence = check(_pod(), OUTPUT, SIMULATED, CDI)
    assert problems == []
    assert evidence == (
        "no runtimeClassName, no env; containerd gave it sro-simgpu0 sro-simgpu1 sro-simgpuctl, "
        "SRO_VISIBLE_DEVICES and simgpu-smi from the node's CDI spec"
    )
    problems, evidence = check(_pod(cdi=False), OUTPUT, SIMULATED, HOOK)
    assert problems == [] and evidence.startswith("runtimeClassName sro; the sro hook gave it")


def test_the_check_names_every_way_the_cdi_path_was_not_shown() -> None:
    classed = _pod(cdi=False)
    assert check(classed, OUTPUT, SIMULATED, CDI)[0] == ["it carries runtimeClassName sro"]
    with_env = copy.deepcopy(_pod())
    with_env["spec"]["containers"][0]["env"] = [{"name": "SRO_VISIBLE_DEVICES", "value": "all"}]
    assert check(with_env, OUTPUT, SIMULATED, CDI)[0] == ["it carries env of its own"]
    one = OUTPUT.replace("sro-simgpu0 sro-simgpu1", "sro-simgpu0")
    assert check(_pod(), one, SIMULATED, CDI)[0] == ["it saw 1 device nodes (sro-simgpu0), not 2"]
    failed = check(
        _pod(phase="Failed"), "SRO_VISIBLE_DEVICES=\n\nsh: simgpu-smi: not found\n", SIMULATED, CDI
    )[0]
    assert failed == [
        "it saw 0 device nodes (none), not 2",
        "SRO_VISIBLE_DEVICES lists nothing",
        "it ended Failed: simgpu-smi did not run to the end",
    ]
    assert check(_pod(), OUTPUT, SIMULATED, HOOK)[0] == ["it should name runtimeClassName sro, it names none"]
