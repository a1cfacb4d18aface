"""The simulated driver runs with exactly the capabilities its DaemonSet grants (CAP_MKNOD), not
privileged: `sro driver simulate` under a bounding set of only the manifest's `capabilities.add`
installs the driver, and without CAP_MKNOD it is refused (so the capability is needed, not spare)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sro.manifests import render

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]

SRO = [sys.executable, "-m", "sro"]
SETPRIV = shutil.which("setpriv")


def _granted() -> list[str]:
    (ds,) = [
        o
        for o in render("driver", namespace="n", image="i", pull_policy="Never", recipe="simulated-gpu")
        if o["kind"] == "DaemonSet"
    ]
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    ctx = c["securityContext"]
    assert not ctx.get("privileged") and ctx["capabilities"]["drop"] == ["ALL"]
    return [str(cap).lower() for cap in ctx["capabilities"]["add"]]


def _simulate(tmp_path: Path, caps: list[str]) -> subprocess.CompletedProcess[str]:
    assert SETPRIV, "setpriv (util-linux) is part of the host setup"
    config = tmp_path / "devices.yaml"
    config.write_text('driverVersion: "1.0-sim"\ncount: 2\n')
    root, dev = tmp_path / "root", tmp_path / "dev"
    root.mkdir()
    dev.mkdir()
    bounding = ",".join(["-all", *(f"+{c}" for c in caps)])
    return subprocess.run(
        [SETPRIV, f"--bounding-set={bounding}", "--inh-caps=-all", "--", *SRO, "driver", "simulate",
         f"--config={config}", f"--driver-root={root}", f"--dev-root={dev}"],
        capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip


def test_the_simulated_driver_installs_with_the_manifests_capabilities_alone(tmp_path: Path) -> None:
    caps = _granted()
    assert caps == ["mknod"]
    r = _simulate(tmp_path, caps)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "dev" / "sro-simgpu0").is_char_device()
    assert (tmp_path / "root" / "devices.json").is_file()


def test_without_cap_mknod_it_is_refused(tmp_path: Path) -> None:
    r = _simulate(tmp_path, [])
    assert r.returncode != 0 and "CAP_MKNOD" in r.stderr + r.stdout
    assert not (tmp_path / "dev" / "sro-simgpu0").exists()
