"""What differs between `sro demo` and `sro demo --nvidia`: the SpecialResource, its node opt-in, the
workload and what the tables show. The stages are one story told twice.

Why a record instead of branches in the stages: the default demo (the simulated-gpu recipe and its
simgpu-smi) must stay exactly as it is, while the NVIDIA flavour runs the same stages on the real
NVIDIA path (recipe nvidia-gpu, the `nvml` backend through pynvml) over sro's simulated NVIDIA driver:
NVIDIA's device nodes, a libnvidia-ml.so.1 serving the simulated GPUs and an nvidia-smi, all saying
SIMULATED. Everything the stages need to tell the two apart is a field here, so both read the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sro.api.builtin_recipes import SIMULATED_NVIDIA_DRIVER_ROOT
from sro.api.names import simulated_driver_opt_in_label
from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU, Recipe
from sro.local.layout import BUSYBOX_IMAGE, GLIBC_IMAGE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# examples/simulated-nvidia.yaml's SpecialResource, for an installed wheel (no examples/ beside it);
# a unit test keeps the two equal
NVIDIA_DEVICES = """\
personality: nvidia
defaults: {product: NVIDIA A100-SXM4-40GB, memoryMiB: 40960, computeCapability: "8.0"}
count: 4
numaNodes: [0, 0, 1, 1]
nvlinkIslands: [[0, 1], [2, 3]]
nvlinkLinks: 12
devices:
  - mig: [{profile: 3g.20gb}, {profile: 2g.10gb}, {profile: 1g.5gb}]
"""
NVIDIA_SPEC: dict[str, Any] = {
    "recipe": NVIDIA_GPU.name,
    "startupTaint": True,
    "driver": {"enabled": True, "mode": "simulated", "version": "550.90.07", "devicesConfig": NVIDIA_DEVICES},
    "driverValidation": {"enabled": True},
    "runtime": {"enabled": True},
    "devicePlugin": {"enabled": True, "config": "version: v1\nhealth: {recoverAfterSeconds: 10}\n"},
    "devicePluginValidation": {"enabled": True},
    "monitoring": {"enabled": True},
    "featureDiscovery": {"enabled": True},
}


@dataclass(frozen=True)
class Flavour:
    name: str  # the SpecialResource's
    recipe: Recipe
    example: Path
    built_in: dict[str, Any]  # the example's document where the file is not there
    opt_in: str  # node label (=true) the demo sets and takes away again; "" where `sro local up` sets it
    image: str  # the workload's image
    script: str  # what the workload runs: the env, its device nodes, the recipe's tool
    gpus_title: str  # the table of the node's labels for this hardware, capacity and allocatable
    driver_root: str  # where `sro simulate fault` finds the driver's state on the host

    def special_resource(self) -> dict[str, Any]:
        """The example's SpecialResource (a checkout), or the same document built in (a wheel)."""
        if self.example.exists():
            return dict(yaml.safe_load(self.example.read_text()))
        return self.built_in


SIMULATED = Flavour(
    name=SIMULATED_GPU.name,
    recipe=SIMULATED_GPU,
    example=EXAMPLES / "simulated-gpu.yaml",
    built_in={
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": SIMULATED_GPU.name},
        "spec": {"recipe": SIMULATED_GPU.name, "startupTaint": True},
    },
    opt_in="",
    image=BUSYBOX_IMAGE,
    script=(
        f'echo "{SIMULATED_GPU.visible_devices_env}=${SIMULATED_GPU.visible_devices_env}"; '
        "ls /dev | grep sro-simgpu | tr '\\n' ' '; echo; simgpu-smi"
    ),
    gpus_title="Simulated GPUs: labels, capacity and allocatable (no real hardware)",
    driver_root=SIMULATED_GPU.driver_root,
)

NVIDIA = Flavour(
    name="simulated-nvidia",
    recipe=NVIDIA_GPU,
    example=EXAMPLES / "simulated-nvidia.yaml",
    built_in={
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": "simulated-nvidia"},
        "spec": NVIDIA_SPEC,
    },
    opt_in=simulated_driver_opt_in_label(NVIDIA_GPU.name),
    image=GLIBC_IMAGE,  # nvidia-smi is linked against glibc, as in CUDA images
    script=(
        f'echo "{NVIDIA_GPU.visible_devices_env}=${NVIDIA_GPU.visible_devices_env}"; '
        "ls /dev | grep -E '^nvidia[0-9]+$' | tr '\\n' ' '; echo; nvidia-smi -L; nvidia-smi"
    ),
    gpus_title=(
        "Simulated NVIDIA GPUs (nvidia-gpu over NVML, sro's simulated driver): labels, capacity "
        "and allocatable (no real hardware)"
    ),
    driver_root=SIMULATED_NVIDIA_DRIVER_ROOT,
)
