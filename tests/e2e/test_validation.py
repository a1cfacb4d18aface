"""The driver-validation pod on the real local cluster, as the operator renders and runs it.

The simulated driver is on the host (installed here from the 8-GPU example when absent, removed
again if this module installed it). The pod is `sro/manifests/validation` with check=driver: pinned
to the node, the driver root and /dev mounted read-only, run as nobody with no capabilities. It must
run to Succeeded with the verdict as its last log line and its termination message; pointed at an
empty driver root it must fail with the reason in the termination message.

The workload check is not run here: it needs the device plugin and the runtime class's files, which
are changing under other work (and this cluster's containerd config may predate `sro runtime
install`); tests/root/test_validation_runc.py runs it in a real runc container given one device by
the hook instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import sro.devices
from sro.api.recipes import SIMULATED_DEVICE_LIST, SIMULATED_GPU
from sro.local.cluster import LocalCluster
from sro.manifests import render_text

pytestmark = [pytest.mark.e2e, pytest.mark.root]

SRO = [sys.executable, "-m", "sro"]
DRIVER_ROOT = Path(SIMULATED_GPU.driver_root)
EXAMPLE = Path(sro.devices.__file__).parent / "examples" / "8gpu-nvlink.yaml"


@pytest.fixture(scope="module")
def driver() -> Iterator[dict[str, Any]]:
    existing = (DRIVER_ROOT / SIMULATED_DEVICE_LIST).exists()
    if not existing:
        subprocess.run(
            [*SRO, "driver", "simulate", "--config", str(EXAMPLE)], check=True, capture_output=True
        )
    yield json.loads((DRIVER_ROOT / SIMULATED_DEVICE_LIST).read_text())
    if not existing:
        subprocess.run([*SRO, "driver", "simulate", "--remove"], check=False, capture_output=True)


@pytest.fixture(scope="module")
def namespace(cluster: LocalCluster) -> Iterator[str]:
    name = f"sro-e2e-validation-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false", check=False)


def run_validation(
    cluster: LocalCluster, image: str, namespace: str, timeout: float = 120, **values: Any
) -> tuple[dict[str, Any], str]:
    """Apply the rendered validation objects, wait for the pod's end; its status and log."""
    name = f"sro-validate-{values['check']}-{uuid.uuid4().hex[:6]}"
    text = render_text(
        "validation",
        name=name,
        namespace=namespace,
        node=cluster.node_name,
        sr="e2e",
        image=image,
        pull_policy="Never",
        recipe=SIMULATED_GPU.name,
        **values,
    )
    cluster.kubectl("apply", "-f", "-", input=text)
    deadline = time.monotonic() + timeout
    try:
        while True:
            pod = json.loads(cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json").stdout)
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} did not finish: {json.dumps(pod.get('status'))[:2000]}")
            time.sleep(0.5)
        logs = cluster.kubectl("logs", name, "-n", namespace, check=False)
        return pod, logs.stdout + logs.stderr
    finally:
        docs = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Pod"]
        cluster.kubectl(
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-f",
            "-",
            input=yaml.safe_dump_all(docs),
            check=False,
        )


def _terminated(pod: dict[str, Any]) -> dict[str, Any]:
    (status,) = pod["status"]["containerStatuses"]
    return status["state"]["terminated"]  # type: ignore[no-any-return]


def test_driver_validation_pod_succeeds(
    cluster: LocalCluster, sro_image: str, namespace: str, driver: dict[str, Any]
) -> None:
    pod, logs = run_validation(cluster, sro_image, namespace, check="driver")
    count = len(driver["devices"])
    assert pod["status"]["phase"] == "Succeeded", logs
    assert f"PASS inventory: simulated backend: {count} devices" in logs, logs
    assert f"PASS tool vs inventory: same {count} devices (UUIDs match)" in logs, logs
    assert f"PASS device nodes: {count} device and 1 control nodes are character devices" in logs, logs
    last = logs.strip().splitlines()[-1]
    assert last.startswith("driver validation passed (4 checks)"), logs
    assert _terminated(pod)["message"].strip() == last


def test_driver_validation_pod_fails_with_the_reason(
    cluster: LocalCluster, sro_image: str, namespace: str
) -> None:
    with tempfile.TemporaryDirectory(prefix="sro-e2e-empty-driver-") as empty:
        Path(empty).chmod(0o755)  # the pod runs as nobody
        pod, logs = run_validation(cluster, sro_image, namespace, check="driver", driver_root=empty)
    assert pod["status"]["phase"] == "Failed", logs
    message = _terminated(pod)["message"]
    assert message.startswith(
        "driver validation FAILED (2 of 2 checks): the simulated backend cannot list"
    ), message
    assert "no simulated driver here (run `sro driver simulate --config FILE`)" in message
    assert "inventory: the simulated backend cannot list the devices" in logs
    assert "tool: simgpu-smi not found (looked at /driver-root/bin/simgpu-smi" in logs
