"""Shared pytest set-up: markers that skip cleanly where their requirement is missing."""

from __future__ import annotations

import os

import pytest


def _has_nvidia_gpu() -> bool:
    """A real NVIDIA kernel driver is loaded (the simulated NVIDIA driver makes /dev/nvidiactl and an
    nvidia-smi too, under /run/nvidia/driver, but never /proc/driver/nvidia: that is the kernel's)."""
    return os.path.exists("/proc/driver/nvidia/version")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU and driver (none on this machine)")
    not_root = pytest.mark.skip(reason="needs root")
    for item in items:
        if "gpu" in item.keywords and not _has_nvidia_gpu():
            item.add_marker(no_gpu)
        if "root" in item.keywords and os.geteuid() != 0:
            item.add_marker(not_root)
