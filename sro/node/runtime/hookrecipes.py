"""The built-in recipes as plain records, for the OCI hook and the runc wrapper.

Why a copy: `sro.api.recipes` builds `Recipe` with `dataclasses` and `typing`, and importing it costs
the hook ~12 ms of its 30 ms budget on every container start. This module holds the same built-in
recipes as lean frozen records (see `records`) with the very same field names and values, so the
hook's activation and driver-file code reads them exactly as it reads a `Recipe`.
`tests/unit/test_runtime_hookrecipes.py` checks every field of every built-in against
`sro.api.recipes.BUILTIN`, so the two cannot drift apart.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from dataclasses import dataclass, field
    from typing import TypeAlias

    from sro.api.recipes import Recipe

    AnyRecipe: TypeAlias = "Recipe | HookRecipe"
else:
    from sro.node.runtime.records import dataclass, field

# Equal to the constants of the same names in sro.api.recipes (checked by the test above).
SIMULATED_DRIVER_ROOT = "/var/lib/sro/driver/simulated-gpu"
SIMULATED_DEVICE_LIST = "devices.json"


@dataclass(frozen=True)
class HookRecipe:
    """The fields of `sro.api.recipes.Recipe`, same names, same meaning."""

    name: str
    resource: str
    backend: str
    pci_vendor: str
    pci_classes: tuple[str, ...]
    visible_devices_env: str
    capabilities_env: str
    default_capabilities: tuple[str, ...]
    cdi_kind: str
    driver_root: str
    device_node: str
    control_nodes: tuple[str, ...]
    libraries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    binaries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    simulated: bool = False
    directories: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    firmware: tuple[str, ...] = ()


NVIDIA_GPU = HookRecipe(
    name="nvidia-gpu",
    resource="nvidia.com/gpu",
    backend="nvml",
    pci_vendor="10de",
    pci_classes=("0300", "0302"),
    visible_devices_env="NVIDIA_VISIBLE_DEVICES",
    capabilities_env="NVIDIA_DRIVER_CAPABILITIES",
    default_capabilities=("utility", "compute"),
    cdi_kind="nvidia.com/gpu",
    driver_root="/",
    device_node="/dev/nvidia{minor}",
    control_nodes=("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"),
    libraries={
        "utility": ("libnvidia-ml.so.*", "libnvidia-cfg.so.*"),
        "compute": (
            "libcuda.so.*",
            "libnvidia-ptxjitcompiler.so.*",
            "libnvidia-nvvm.so.*",
            "libcudadebugger.so.*",
        ),
        "video": ("libnvcuvid.so.*", "libnvidia-encode.so.*", "libnvidia-opticalflow.so.*"),
        "graphics": (
            "libnvidia-eglcore.so.*",
            "libnvidia-glcore.so.*",
            "libnvidia-tls.so.*",
            "libEGL_nvidia.so.*",
        ),
    },
    binaries={
        "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"),
        "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
    },
    directories={"graphics": ("etc/vulkan/icd.d", "usr/share/glvnd/egl_vendor.d")},
    firmware=("lib/firmware/nvidia/*/gsp*.bin",),
)

SIMULATED_GPU = HookRecipe(
    name="simulated-gpu",
    resource="sro.dev/simulated-gpu",
    backend="simulated",
    pci_vendor="1d0f",
    pci_classes=("0302",),
    visible_devices_env="SRO_VISIBLE_DEVICES",
    capabilities_env="SRO_DRIVER_CAPABILITIES",
    default_capabilities=("utility", "compute"),
    cdi_kind="sro.dev/simulated-gpu",
    driver_root=SIMULATED_DRIVER_ROOT,
    device_node="/dev/sro-simgpu{index}",
    control_nodes=("/dev/sro-simgpuctl",),
    libraries={"compute": ("libsimgpu.so.*",), "utility": ("libsimgpu-ml.so.*",)},
    binaries={"utility": ("simgpu-smi",)},
    simulated=True,
)

BUILTIN: dict[str, HookRecipe] = {r.name: r for r in (NVIDIA_GPU, SIMULATED_GPU)}
