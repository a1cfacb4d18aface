"""The hook with a real NVIDIA GPU and driver (driver root `/`): skipped on machines without one."""

from __future__ import annotations

import pytest

from tests.root.conftest import PYTHON, Bundle

pytestmark = [pytest.mark.root, pytest.mark.gpu]


def test_nvidia_gpu_is_injected(bundle: Bundle) -> None:
    from sro.node.runtime.specedits import HookCommand

    bundle.add_hook("prestart", HookCommand(PYTHON, ("--recipe", "nvidia-gpu")).entry("prestart"))
    res = bundle.run(
        "ls /dev | grep nvidia | tr '\\n' ' '; echo; cat /dev/nvidiactl 2>&1 | head -1; "
        "test -s /usr/bin/nvidia-smi && echo HAS-SMI; ldconfig -p | grep -E 'libnvidia-ml|libcuda'",
        env=["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
    )
    out = res.stdout + res.stderr
    devs = out.splitlines()[0].split()
    assert "nvidia0" in devs and "nvidiactl" in devs, out
    assert "Operation not permitted" not in out, out  # the device cgroup lets it through
    assert "HAS-SMI" in out and "libnvidia-ml.so" in out and "libcuda.so" in out, out
