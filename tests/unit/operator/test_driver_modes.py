"""Every object the operator renders per driver mode, against golden files (tests/golden/operator/).

Why goldens: `spec.driver.mode: simulated` (sro's simulated driver standing in for nvidia-gpu's) was
added beside `container` and `host`; the goldens of those two modes and of simulated-gpu were written
by the code from before it, so any change to what they render shows here as a diff to review
(SRO_UPDATE_GOLDEN=1 rewrites them). simulated-gpu with `mode: simulated` must render exactly what
its `container` does: its driver is simulated in every mode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.operator.admission import Admitted, admit
from sro.operator.observed import NodeInfo, Observed, SpecialResourceInfo
from sro.operator.reconcile import reconcile
from sro.operator.rendering import Context
from sro.operator.states import KERNEL_LABEL, OS_ID_LABEL, OS_VERSION_LABEL, STATES, ValidationState
from sro.operator.upgrade.scan import scan_pod
from tests.golden_files import update_goldens

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "operator"
NS = "sro-system"
IMAGE = "localhost/sro:test"
NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
# One node every case selects: discovery's NVIDIA PCI label, the simulated recipe's opt-in and the
# simulated NVIDIA driver's opt-in.
NODE = NodeInfo(
    name="gpu-1",
    labels={
        "kubernetes.io/hostname": "gpu-1",
        KERNEL_LABEL: "6.1.0-13-amd64",
        OS_ID_LABEL: "debian",
        OS_VERSION_LABEL: "12",
        "feature.node.kubernetes.io/pci-0302_10de.present": "true",
        "sro.dev/simulated-gpu.enabled": "true",
        "sro.dev/nvidia-gpu.simulated": "true",
    },
)
NVIDIA_DRIVER = {
    "version": "550.90.07",
    "imageTemplate": "registry.example/driver:{version}-{os_id}{os_version}",
}
CASES: Mapping[str, Mapping[str, Any]] = {
    "nvidia-gpu-container": {"recipe": "nvidia-gpu", "driver": {"mode": "container", **NVIDIA_DRIVER}},
    "nvidia-gpu-host": {"recipe": "nvidia-gpu", "driver": {"mode": "host", "version": "550.90.07"}},
    "simulated-gpu": {"recipe": "simulated-gpu", "driver": {"version": "550.0-sim"}},
    "nvidia-gpu-simulated": {
        "recipe": "nvidia-gpu",
        "driver": {
            "mode": "simulated",
            "version": "550.90.07",
            "devicesConfig": "personality: nvidia\ncount: 2\n",
        },
    },
}


def rendered(spec: Mapping[str, Any]) -> str:
    """Everything rendered for `spec` on NODE, as one YAML stream: the applied objects, each
    validation pod and the holder-scan pod (their inputs annotation fixed: it hashes the recipe)."""
    sr = SpecialResourceInfo(name="gpus", uid="uid-gpus", spec=dict(spec), created="2026-11-22T10:00:00Z")
    obs = Observed(sr=sr, nodes=(NODE,), pods=(), image=IMAGE)
    plan = reconcile(obs, NS, NOW)
    admitted = admit(obs, NS)
    assert isinstance(admitted, Admitted), plan.status
    ctx = Context(sr.name, sr.uid, admitted.spec, admitted.recipe, NS, IMAGE)
    pods = [s.pod(ctx, NODE.name, "inputs") for s in STATES if isinstance(s, ValidationState)]
    objects = [_digested(o) for o in (*plan.apply, *pods, scan_pod(ctx, NODE.name, "inputs"))]
    return yaml.safe_dump_all(objects, sort_keys=True, width=120)


def _digested(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` with each long ConfigMap value (the Grafana dashboard) as its digest: a change still
    shows, and the goldens stay readable."""
    out = dict(obj)
    if obj["kind"] == "ConfigMap":
        out["data"] = {
            k: v
            if len(v) < 2000
            else f"sha256:{hashlib.sha256(v.encode()).hexdigest()} ({len(v)} characters)"
            for k, v in (obj.get("data") or {}).items()
        }
    return out


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.yaml"
    if update_goldens():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with SRO_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{path} differs (SRO_UPDATE_GOLDEN=1 rewrites it; review the diff)"


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_objects_match_the_golden(case: str) -> None:
    check_golden(case, rendered(CASES[case]))


def test_simulated_gpu_renders_the_same_in_simulated_mode() -> None:
    base = CASES["simulated-gpu"]
    simulated = {**base, "driver": {**base["driver"], "mode": "simulated"}}
    assert rendered(simulated) == rendered(base)


def test_container_and_host_modes_say_nothing_simulated() -> None:
    for case in ("nvidia-gpu-container", "nvidia-gpu-host"):
        text = rendered(CASES[case])
        for word in ("sro.dev/simulated", "--simulated-driver", "--personality", "/run/nvidia/driver"):
            assert word not in text, (case, word)
    assert "sro.dev/simulated: 'true'" in rendered(CASES["nvidia-gpu-simulated"])
