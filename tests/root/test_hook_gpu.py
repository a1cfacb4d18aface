"""The hook with an NVIDIA driver: this machine's (driver root `/`; the `gpu` variant, skipped without
one) or the simulated NVIDIA driver (its temp driver and dev roots, tests/simnvml_driver.py). GPU 0's
node and nvidiactl get through the device cgroup, nvidia-smi and NVML are in the container's linker
cache; libcuda only with a real driver (the simulated one has no CUDA), NVML's state directory only
with the simulated one."""

from __future__ import annotations

import pytest

from tests.root.conftest import PYTHON, Bundle
from tests.simnvml_driver import (  # noqa: F401  (fixtures: the gpu and simulated NVML variants)
    NvmlTarget,
    nvml_target,
    simnvml_build,
    simnvml_driver,
)

pytestmark = pytest.mark.root


def test_nvidia_gpu_is_injected(bundle: Bundle, nvml_target: NvmlTarget) -> None:  # noqa: F811
    from sro.node.runtime.specedits import HookCommand

    roots = (
        [*nvml_target.driver_args(), "--dev-root", str(nvml_target.dev_root)] if nvml_target.simulated else []
    )
    # this runc container is unprivileged and names its GPU by env var: believed only with this flag
    options = ("--recipe", "nvidia-gpu", *roots, "--accept-envvar-unprivileged", "true")
    bundle.add_hook("prestart", HookCommand(PYTHON, options).entry("prestart"))
    res = bundle.run(
        "ls /dev | grep nvidia | tr '\\n' ' '; echo; cat /dev/nvidiactl 2>&1 | head -1; "
        "test -s /usr/bin/nvidia-smi && echo HAS-SMI; test -s /run/sro-simnvml/state && echo HAS-STATE; "
        "ldconfig -p | grep -E 'libnvidia-ml|libcuda'",
        env=["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
    )
    out = res.stdout + res.stderr
    devs = out.splitlines()[0].split()
    assert "nvidia0" in devs and "nvidiactl" in devs and "nvidia1" not in devs, out
    assert "Operation not permitted" not in out, out  # the device cgroup lets it through
    assert "HAS-SMI" in out and "libnvidia-ml.so.1" in out, out
    assert ("libcuda.so" in out) == (not nvml_target.simulated), out
    assert ("HAS-STATE" in out) == nvml_target.simulated, out
