"""The built-in recipes as plain data: keyword arguments of `sro.api.recipes.Recipe`.

Why a module of its own, with no imports: the OCI hook sits on every container start and must not
pay for `dataclasses` and `typing` (about 12 ms); it builds its lean records from these same dicts
(`sro.node.runtime.hookrecipes`), while everything else gets typed `Recipe` objects from
`sro.api.recipes`. One source of truth, two views.
"""

from __future__ import annotations  # annotations stay strings: `typing` is never imported at run time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The simulated driver keeps its files (device-node list, libraries, binaries, fault state) here on
# the host; containers see its libraries and binaries at the same paths.
SIMULATED_DRIVER_ROOT = "/var/lib/sro/driver/simulated-gpu"
# Files of the simulated driver, relative to its driver root (written by `sro driver simulate`, read
# by the simulated device backend and by runtime injection): the device list, the fault state that
# `sro simulate fault` edits, and the library and binary directories a container gets.
SIMULATED_DEVICE_LIST = "devices.json"
SIMULATED_FAULTS = "faults.json"
SIMULATED_LIB_DIR = "lib"
SIMULATED_BIN_DIR = "bin"
# The simulated driver's NVIDIA personality (`sro driver simulate --personality nvidia`): a driver
# root laid out like a real driver container's, whose compiled libnvidia-ml.so.1 serves NVML from the
# state file under SIMNVML_STATE_DIR (relative to the driver root).
SIMULATED_NVIDIA_DRIVER_ROOT = "/run/nvidia/driver"
SIMNVML_STATE_DIR = "run/sro-simnvml"
# Where any driver root keeps its libraries, relative to it, in the order they are searched (the
# multiarch folders first, as the dynamic loader looks): the runtime injects a recipe's library
# globs from these folders and driver validation checks them there, so the two read this one list.
DRIVER_LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib64",
    "lib64",
    "usr/lib",
    "lib",
)

NVIDIA_GPU: dict[str, Any] = dict(
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
    directories={
        "graphics": ("etc/vulkan/icd.d", "usr/share/glvnd/egl_vendor.d"),
        # present only on the simulated NVIDIA driver: the state its libnvidia-ml.so.1 reads
        "utility": ("run/sro-simnvml",),
    },
    firmware=("lib/firmware/nvidia/*/gsp*.bin",),
)

SIMULATED_GPU: dict[str, Any] = dict(
    name="simulated-gpu",
    resource="sro.dev/simulated-gpu",
    backend="simulated",
    pci_vendor="1d0f",  # no real PCI device is matched: the simulated driver reports its own devices
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
