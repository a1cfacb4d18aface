"""The agents' readiness probes wait for their ready file instead of failing at once.

Why it matters: the kubelet probes as a container starts, then every periodSeconds, so a `test -f`
probe saw an agent's ready file up to a whole period after it was written, and that delay was paid
once per state on every node (issue 26: node to validated). The probe now looks every 0.1 s for up
to 2 s; these tests render each agent's DaemonSet, check that its probe waits for the very file the
agent writes, and run the probe's shell loop for real.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sro.manifests import render

COMMON = {"image": "localhost/sro:test", "namespace": "sro-system", "pull_policy": "Never"}
# component -> how the agent is told where its ready file is
AGENTS = {
    "driver": None,  # `driver simulate --hold` writes <driver root>/.ready
    "runtime": "--ready-file=",
    "device-plugin": "--ready-file=",
    "monitoring": "--ready-file=",
}


def _container(component: str) -> dict[str, Any]:
    docs = render(component, recipe="simulated-gpu", **COMMON)
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return dict(ds["spec"]["template"]["spec"]["containers"][0])


def _probe_file(container: dict[str, Any]) -> str:
    return str(container["readinessProbe"]["exec"]["command"][-1])


@pytest.mark.parametrize("component", sorted(AGENTS))
def test_the_probe_waits_for_the_file_the_agent_writes(component: str) -> None:
    c = _container(component)
    probe = c["readinessProbe"]
    assert probe["exec"]["command"][:2] == ["sh", "-c"]
    flag = AGENTS[component]
    if flag is None:
        root = next(a.split("=", 1)[1] for a in c["command"] if a.startswith("--driver-root="))
        assert _probe_file(c) == f"{root}/.ready"
    else:
        assert f"{flag}{_probe_file(c)}" in c["command"]
    # the loop (20 looks, 0.1 s apart) ends well within the probe's timeout, and covers its period
    assert probe["periodSeconds"] <= 2 < probe["timeoutSeconds"]


def _run_probe(command: list[str], path: Path) -> tuple[int, float]:
    t0 = time.monotonic()
    rc = subprocess.run([*command[:-1], str(path)], timeout=10, check=False).returncode
    return rc, time.monotonic() - t0


def test_the_probe_passes_at_once_when_ready_and_soon_after_the_file_appears(tmp_path: Path) -> None:
    command = _container("device-plugin")["readinessProbe"]["exec"]["command"]
    ready = tmp_path / "ready"
    ready.write_text("ready\n")
    rc, took = _run_probe(command, ready)
    assert rc == 0 and took < 0.5
    ready.unlink()
    timer = threading.Timer(0.5, ready.write_text, ("ready\n",))
    timer.start()
    try:
        rc, took = _run_probe(command, ready)
    finally:
        timer.join()
    assert rc == 0 and 0.4 < took < 1.2, took


def test_the_probe_fails_when_the_file_never_comes(tmp_path: Path) -> None:
    command = _container("monitoring")["readinessProbe"]["exec"]["command"]
    rc, took = _run_probe(command, tmp_path / "never")
    assert rc != 0 and 1.5 < took < 4.5, took
