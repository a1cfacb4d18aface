"""Small helpers the e2e tests share: run the `sro` CLI against the local cluster, wait for a
condition with a useful message, read objects as JSON, print a FIGURE line, have the simulated
driver on the host for a module."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sro.api.recipes import SIMULATED_DEVICE_LIST, SIMULATED_GPU
from sro.local.cluster import LocalCluster


def figure(text: str) -> None:
    print(f"FIGURE {text}", file=sys.__stderr__, flush=True)


def sro(cluster: LocalCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "sro", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def simulated_driver_on_host(clear_faults: bool = False) -> Iterator[None]:
    """The simulated GPU driver on this host for a module's tests: installed with two devices when
    absent and removed again after; one already there (the cluster's) is used and left in place.
    `clear_faults`: its devices start healthy (`sro simulate fault --all --clear`)."""
    sro_cli = [sys.executable, "-m", "sro"]
    existing = (Path(SIMULATED_GPU.driver_root) / SIMULATED_DEVICE_LIST).exists()
    if not existing:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("count: 2\n")
            f.flush()
            subprocess.run(
                [*sro_cli, "driver", "simulate", "--config", f.name], check=True, capture_output=True
            )
    if clear_faults:
        subprocess.run([*sro_cli, "simulate", "fault", "--all", "--clear"], check=True, capture_output=True)
    try:
        yield
    finally:
        if not existing:
            subprocess.run([*sro_cli, "driver", "simulate", "--remove"], check=False, capture_output=True)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 180, every: float = 0.5, why: Callable[[], str] = str) -> float:  # fmt: skip
    start = time.monotonic()
    while True:
        if check():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{why()}")
        time.sleep(every)


def get_json(cluster: LocalCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def sr_doc(cluster: LocalCluster, name: str = "simulated-gpu") -> dict[str, Any]:
    """SpecialResource `name` as JSON ({} when absent); the default is the example's."""
    out = cluster.kubectl("get", "sr", name, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def condition(doc: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in doc.get("status", {}).get("conditions", []) if c["type"] == ctype), {})


def sleeping_pod(name: str, namespace: str, resource: str, image: str, count: int = 1) -> dict[str, Any]:
    """A pod that holds `count` devices of `resource` and sleeps (labelled as a test's)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "sro-e2e"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "work",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {resource: str(count)}},
                }
            ],
        },
    }
