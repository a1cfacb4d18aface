"""The driver state's manifests: the simulated driver as `sro driver simulate --hold` in a pod with
CAP_MKNOD alone and its config, a driver container for real GPUs, and nothing when the driver is on the host."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import yaml

from sro.manifests import render, render_text

EXAMPLE = (resources.files("sro.devices") / "examples" / "8gpu-nvlink.yaml").read_text()


def _objects(**values: Any) -> dict[str, dict[str, Any]]:
    docs = render("driver", namespace="sro-system", image="localhost/sro:test", pull_policy="Never", **values)
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one object of each kind"
    return by_kind


def _pod(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return objs["DaemonSet"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_simulated_driver_holds_the_driver_with_cap_mknod_alone() -> None:
    objs = _objects(recipe="simulated-gpu")
    assert sorted(objs) == ["ConfigMap", "DaemonSet", "ServiceAccount"]
    sa, cm, ds = objs["ServiceAccount"], objs["ConfigMap"], objs["DaemonSet"]
    assert sa["metadata"]["name"] == "sro-driver" and sa["automountServiceAccountToken"] is False
    assert ds["metadata"]["name"] == cm["metadata"]["name"] == "sro-driver-simulated-gpu"
    assert ds["metadata"]["labels"]["sro.dev/simulated"] == "true"
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert (
        ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    )
    pod = _pod(objs)
    assert pod["serviceAccountName"] == "sro-driver" and pod["automountServiceAccountToken"] is False
    assert pod["hostPID"] is False and "hostNetwork" not in pod
    assert pod["terminationGracePeriodSeconds"] >= 10
    (c,) = pod["containers"]
    assert c["image"] == "localhost/sro:test" and c["imagePullPolicy"] == "Never"
    assert c["securityContext"] == {
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["MKNOD"]},
    }
    assert c["command"] == [
        "sro", "driver", "simulate", "--config=/etc/sro/driver/devices.yaml", "--hold",
        "--driver-root=/host/var/lib/sro/driver/simulated-gpu", "--dev-root=/host/dev",
    ]  # fmt: skip
    probe = c["readinessProbe"]["exec"]["command"]
    assert probe[:2] == ["sh", "-c"] and probe[-1] == "/host/var/lib/sro/driver/simulated-gpu/.ready"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["driver-root"]["hostPath"]["path"] == "/var/lib/sro/driver/simulated-gpu"
    assert mounts["driver-root"] == "/host/var/lib/sro/driver/simulated-gpu"
    assert (
        volumes["dev"]["hostPath"] == {"path": "/dev", "type": "Directory"} and mounts["dev"] == "/host/dev"
    )
    assert (
        volumes["config"]["configMap"]["name"] == cm["metadata"]["name"]
        and mounts["config"] == "/etc/sro/driver"
    )


def test_simulated_devices_default_to_the_8gpu_example_and_can_be_passed() -> None:
    cm = _objects(recipe="simulated-gpu")["ConfigMap"]
    assert cm["data"]["devices.yaml"] == EXAMPLE, "the template's default must stay the example file"
    mine = "count: 2\ndriverVersion: '1.0-sim'\n"
    cm = _objects(recipe="simulated-gpu", devices_config=mine)["ConfigMap"]
    assert yaml.safe_load(cm["data"]["devices.yaml"]) == {"count": 2, "driverVersion": "1.0-sim"}


def test_the_operator_names_the_daemonset_and_the_roots() -> None:
    objs = _objects(
        recipe="simulated-gpu",
        name="sro-gpus-driver-6-1-0-18-amd64-ab12c",
        driver_root="/var/lib/sro/driver/test",
        dev_root="/var/lib/sro/driver/test-dev",
    )
    ds, pod = objs["DaemonSet"], _pod(objs)
    assert (
        ds["metadata"]["name"]
        == objs["ConfigMap"]["metadata"]["name"]
        == "sro-gpus-driver-6-1-0-18-amd64-ab12c"
    )
    assert ds["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == ds["metadata"]["name"]
    assert "--driver-root=/host/var/lib/sro/driver/test" in pod["containers"][0]["command"]
    volumes = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    assert volumes == {
        "driver-root": {"path": "/var/lib/sro/driver/test", "type": "DirectoryOrCreate"},
        "dev": {"path": "/var/lib/sro/driver/test-dev", "type": "DirectoryOrCreate"},
    }


def test_nvidia_driver_container() -> None:
    image = "registry.example/nvidia/driver:550.54.15-6.1.0-18-amd64-debian12"
    objs = _objects(recipe="nvidia-gpu", driver_image=image, driver_root="/")
    assert sorted(objs) == ["DaemonSet", "ServiceAccount"], "no devices config for real hardware"
    ds, pod = objs["DaemonSet"], _pod(objs)
    assert (
        ds["metadata"]["name"] == "sro-driver-nvidia-gpu"
        and "sro.dev/simulated" not in ds["metadata"]["labels"]
    )
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    (c,) = pod["containers"]
    assert c["image"] == image and "command" not in c, "the driver image's own entrypoint"
    assert c["securityContext"] == {"privileged": True}
    assert c["readinessProbe"]["exec"]["command"] == ["nvidia-smi"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/run/nvidia"]["mountPropagation"] == "Bidirectional"
    assert mounts["/lib/modules"]["readOnly"] and "/dev" in mounts
    assert pod["terminationGracePeriodSeconds"] >= 60


def test_nvidia_needs_its_driver_image() -> None:
    with pytest.raises(ValueError, match="driver_image"):
        render("driver", namespace="sro-system", recipe="nvidia-gpu")


@pytest.mark.parametrize("recipe", ["nvidia-gpu", "simulated-gpu"])
def test_a_host_driver_renders_nothing(recipe: str) -> None:
    assert render("driver", namespace="sro-system", recipe=recipe, driver_mode="host") == []
    text = render_text("driver", namespace="sro-system", recipe=recipe, driver_mode="host")
    assert not [d for d in yaml.safe_load_all(text) if d]
