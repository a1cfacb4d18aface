"""Shared pytest set-up: markers that skip cleanly where their requirement is missing."""

from __future__ import annotations

import os
import shutil

import pytest


def _has_nvidia_gpu() -> bool:
    return os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU and driver (none on this machine)")
    not_root = pytest.mark.skip(reason="needs root")
    for item in items:
        if "gpu" in item.keywords and not _has_nvidia_gpu():
            item.add_marker(no_gpu)
        if "root" in item.keywords and os.geteuid() != 0:
            item.add_marker(not_root)
