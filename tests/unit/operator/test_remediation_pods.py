"""The remediation's action pods (`sro.operator.remediation.pods`): one per (node, token), pinned to
the node, tolerating every taint, running `sro driver reset|reboot` with only the privileges its
variant needs, the recipe mounted as every other agent has it, devices and token kept as data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from sro.api.specialresource import SpecialResourceSpec
from sro.api.specparsing import parse_spec, with_driver_mode
from sro.operator.admission import resolve_recipe
from sro.operator.recipedistribution import RECIPE_FILE, config_map_name
from sro.operator.remediation.pods import (
    ACTION_ANNOTATION,
    DEVICES_ANNOTATION,
    TOKEN_ANNOTATION,
    action_pod,
    action_pod_name,
    pod_devices,
    pod_token,
)
from sro.operator.remediation.policy import TIMEOUT_SECONDS
from sro.operator.remediation.record import RESETTING
from sro.operator.rendering import Context
from tests.unit.operator.test_custom_recipe_distribution import FPGA, NIC_RULE_RECIPE, custom_sr

NS = "sro-system"
IMAGE = "localhost/sro:test"
TOKEN = "2026-11-26T01:30:00Z"
GPU0 = "GPU-8f0e5a5c-0000-4000-8000-000000000000"
GPU1 = "GPU-8f0e5a5c-0000-4000-8000-000000000001"


def ctx_for(body: Mapping[str, Any], custom: Mapping[str, Any] | None = None, name: str = "gpus") -> Context:
    spec: SpecialResourceSpec = parse_spec(name, dict(body))
    recipe = resolve_recipe(spec, custom)
    spec, recipe = with_driver_mode(spec, recipe)
    return Context(name, f"uid-{name}", spec, recipe, NS, IMAGE)


SIM = ctx_for({"recipe": "simulated-gpu"})
REAL = ctx_for({"recipe": "nvidia-gpu", "driver": {"mode": "host", "version": "550.90.07"}})
SIM_NVIDIA = ctx_for(
    {
        "recipe": "nvidia-gpu",
        "driver": {"mode": "simulated", "version": "550.90.07", "devicesConfig": "personality: nvidia\n"},
    }
)


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod["spec"]["containers"]
    return dict(c)


LEDGER = "/var/lib/sro/remediation"


def _volumes(pod: dict[str, Any]) -> dict[str, str]:
    """The host paths besides the ledger, which every variant writes (asserted here)."""
    paths = {v["name"]: (v.get("hostPath") or {}).get("path", "") for v in pod["spec"]["volumes"]}
    assert paths.pop("ledger") == LEDGER
    assert {"name": "ledger", "mountPath": LEDGER} in pod["spec"]["containers"][0]["volumeMounts"]
    return paths


def _mounts(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in _container(pod)["volumeMounts"]}


def test_one_name_per_node_and_token() -> None:
    a = action_pod_name(SIM, "gpu-node-1", TOKEN)
    assert a == action_pod_name(SIM, "gpu-node-1", TOKEN)
    assert a.startswith("sro-gpus-remediation-gpu-node-1-")
    assert a != action_pod_name(SIM, "gpu-node-1", "2026-11-26T01:31:00Z")
    assert a != action_pod_name(SIM, "gpu-node-2", TOKEN)
    long = action_pod_name(SIM, "a-very-long-node-name." * 10, TOKEN)
    assert len(long) <= 63 and long == long.lower()


def test_simulated_reset_pod() -> None:
    pod = action_pod(SIM, "n1", "reset", [GPU0, GPU1], TOKEN)
    meta, spec, c = pod["metadata"], pod["spec"], _container(pod)
    assert meta["name"] == action_pod_name(SIM, "n1", TOKEN) and meta["namespace"] == NS
    assert meta["annotations"][TOKEN_ANNOTATION] == TOKEN
    assert meta["annotations"][DEVICES_ANNOTATION] == f"{GPU0},{GPU1}"
    assert meta["annotations"][ACTION_ANNOTATION] == "reset"
    assert meta["labels"]["sro.dev/simulated"] == "true"
    assert meta["labels"]["sro.dev/specialresource"] == "gpus"
    assert meta["ownerReferences"][0]["uid"] == "uid-gpus"
    assert spec["nodeName"] == "n1" and spec["restartPolicy"] == "Never"
    # a hung reset fails its pod before the machine's step times out, with the pod's log to read
    assert 60 <= spec["activeDeadlineSeconds"] < TIMEOUT_SECONDS[RESETTING]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {"operator": "Exists"} in spec["tolerations"]  # the cordon and any NoExecute taint
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "sro-driver"
    assert "hostPID" not in spec and "hostNetwork" not in spec
    assert c["command"] == [
        "sro",
        "driver",
        "reset",
        "--recipe=simulated-gpu",
        "--driver-root=/driver-root",
        "--dev-root=/host/dev",  # the reset makes the devices' nodes again, as a real one does
        f"--device={GPU0}",
        f"--device={GPU1}",
        f"--token={TOKEN}",
        "--ledger=/var/lib/sro/remediation",
    ]
    sc = c["securityContext"]
    # making device nodes takes CAP_MKNOD alone, as the simulated driver's own pod holds
    assert "privileged" not in sc and sc["capabilities"] == {"drop": ["ALL"], "add": ["MKNOD"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert _volumes(pod) == {"driver-root": "/var/lib/sro/driver/simulated-gpu", "dev": "/dev"}
    assert _mounts(pod)["driver-root"]["readOnly"] is False  # it clears the fault state there
    assert pod_token(pod) == TOKEN and pod_devices(pod) == (GPU0, GPU1)


def test_simulated_reboot_pod_writes_only_the_driver_root() -> None:
    pod = action_pod(SIM, "n1", "reboot", [GPU0], TOKEN)
    c = _container(pod)
    assert c["command"] == [
        "sro",
        "driver",
        "reboot",
        "--recipe=simulated-gpu",
        "--driver-root=/driver-root",
        f"--token={TOKEN}",
        "--ledger=/var/lib/sro/remediation",
    ]
    assert pod["metadata"]["annotations"][DEVICES_ANNOTATION] == ""  # a reboot resets no named device
    assert _volumes(pod) == {"driver-root": "/var/lib/sro/driver/simulated-gpu"}
    assert "privileged" not in c["securityContext"]


def test_real_reset_is_privileged_and_reads_the_driver_root() -> None:
    pod = action_pod(REAL, "n1", "reset", [GPU0], TOKEN)
    c = _container(pod)
    assert c["securityContext"] == {"privileged": True}  # /dev/nvidia* and chroot (see the template)
    assert "--recipe=nvidia-gpu" in c["command"] and f"--device={GPU0}" in c["command"]
    assert _volumes(pod) == {"driver-root": "/"}
    assert _mounts(pod)["driver-root"]["readOnly"] is True
    assert "sro.dev/simulated" not in pod["metadata"]["labels"]


def test_real_reboot_writes_the_sentinel_directory_only() -> None:
    pod = action_pod(REAL, "n1", "reboot", (), TOKEN)
    c = _container(pod)
    assert c["command"][:4] == ["sro", "driver", "reboot", "--recipe=nvidia-gpu"]
    assert "--host-root=/host" in c["command"] and not any("--driver-root" in a for a in c["command"])
    assert _volumes(pod) == {"host-run": "/var/run"}
    assert _mounts(pod)["host-run"]["mountPath"] == "/host/var/run"
    sc = c["securityContext"]
    assert "privileged" not in sc and sc["capabilities"] == {"drop": ["ALL"]}


def test_simulated_nvidia_driver_needs_no_privilege() -> None:
    pod = action_pod(SIM_NVIDIA, "n1", "reset", [GPU0], TOKEN)
    c = _container(pod)
    assert "privileged" not in c["securityContext"]
    assert _volumes(pod) == {"driver-root": "/run/nvidia/driver", "dev": "/dev"}
    assert pod["metadata"]["labels"]["sro.dev/simulated"] == "true"
    reboot = action_pod(SIM_NVIDIA, "n1", "reboot", (), TOKEN)
    assert _volumes(reboot) == {"driver-root": "/run/nvidia/driver"}  # a simulated reboot: no sentinel


@pytest.mark.parametrize("action", ["reset", "reboot"])
def test_custom_recipe_is_mounted_as_the_other_agents_have_it(action: str) -> None:
    the_sr = custom_sr()
    ctx = ctx_for(the_sr.spec, FPGA, name=the_sr.name)
    pod = action_pod(ctx, "n1", action, ["fpga-0"], TOKEN)
    c = _container(pod)
    assert f"--recipe-file={RECIPE_FILE}" in c["command"]
    assert not any(a.startswith("--recipe=") for a in c["command"])
    assert _mounts(pod)["recipe"]["readOnly"] is True
    (cm,) = [v for v in pod["spec"]["volumes"] if v["name"] == "recipe"]
    assert cm["configMap"]["name"] == config_map_name(the_sr.name)
    assert pod["metadata"]["annotations"]["sro.dev/recipe-hash"]
    assert "privileged" not in c["securityContext"]  # a simulated class: files under its root


def test_a_devnodes_reset_gets_no_privilege() -> None:
    """`sro driver reset` refuses a devnodes recipe; its pod must not be privileged for nothing."""
    the_sr = custom_sr(NIC_RULE_RECIPE, name="nic")
    ctx = ctx_for({**the_sr.spec, "driver": {}}, NIC_RULE_RECIPE, name="nic")
    assert ctx.recipe.backend == "devnodes"
    pod = action_pod(ctx, "n1", "reset", ["0000:3b:00.2"], TOKEN)
    assert "privileged" not in _container(pod)["securityContext"]


def test_devices_and_token_stay_data() -> None:
    """A device id or token from a node's report cannot add YAML: each stays one argument."""
    evil = 'x"\n  hostPID: true\n  y: "'
    pod = action_pod(SIM, "n1", "reset", [evil, "ok,{{ 7*7 }}"], "t: 1 # {x}")
    c = _container(pod)
    assert f"--device={evil}" in c["command"] and "--device=ok,{{ 7*7 }}" in c["command"]
    assert "--token=t: 1 # {x}" in c["command"]
    assert "hostPID" not in pod["spec"]
    assert pod_token(pod) == "t: 1 # {x}"


def test_bad_requests_are_refused() -> None:
    with pytest.raises(ValueError, match="action"):
        action_pod(SIM, "n1", "drain", [GPU0], TOKEN)
    with pytest.raises(ValueError, match="token"):
        action_pod(SIM, "n1", "reset", [GPU0], "")
    with pytest.raises(ValueError, match="device"):
        action_pod(SIM, "n1", "reset", [], TOKEN)


def test_readers_of_a_foreign_pod() -> None:
    assert pod_token({}) == "" and pod_devices({"metadata": {"annotations": None}}) == ()
