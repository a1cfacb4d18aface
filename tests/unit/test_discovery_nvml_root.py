"""Discovery asks NVML under a containerized driver root (/run/nvidia/driver) and publishes GPU
feature discovery's labels: the pure labelling (versions, MIG strategies, a simulated product), the
source with a fake NVML backend on a fake host tree, and (root, gcc) the real simulated NVIDIA
driver's libnvidia-ml.so.1 installed in a temp host, read by `discover` in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices import simulated_nvidia
from sro.devices.model import Device, DeviceUUID, Inventory, MigDevice
from sro.host.root import HostRoot
from sro.local.native import SimNvmlBuild
from sro.node.discovery import accelerators
from sro.node.discovery.accelerators import gfd_labels, mig_labels, mig_strategy, version_labels
from sro.node.discovery.commands import discover
from sro.node.discovery.config import Config
from tests.simnvml import simnvml_build  # noqa: F401

PRODUCT = "NVIDIA A100-SXM4-40GB (simulated)"


def gpu(i: int, migs: tuple[str, ...] = (), product: str = PRODUCT) -> Device:
    uuid = DeviceUUID(f"GPU-{i:08d}-0000-0000-0000-000000000000")
    mig = tuple(
        MigDevice(DeviceUUID(f"MIG-{i}-{j}"), uuid, j, p, {"1g.5gb": 4864, "3g.20gb": 19968}[p], j + 1, 0)
        for j, p in enumerate(migs)
    )
    return Device(uuid, i, i, f"/dev/nvidia{i}", f"0000:{0x10 + i:02x}:00.0", product, 40960, "8.0",
                  mig_enabled=bool(migs), mig_devices=mig)  # fmt: skip


def test_a_simulated_product_keeps_nvidia_keys_and_says_simulated() -> None:
    labels = gfd_labels([gpu(0), gpu(1)], NVIDIA_GPU, driver_version="550.90.07", cuda="12.4")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-simulated"
    assert labels["sro.dev/simulated"] == "true" and labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"
    assert labels["nvidia.com/cuda.runtime.major"] == "12" and labels["nvidia.com/cuda.runtime.minor"] == "4"
    assert labels["nvidia.com/cuda.driver.rev"] == labels["nvidia.com/cuda.driver-version.revision"] == "07"
    assert labels["nvidia.com/mps.capable"] == "false" and labels["nvidia.com/gpu.family"] == "ampere"
    assert "nvidia.com/mig.strategy" not in labels  # strategy none: GFD writes none
    real = gfd_labels([gpu(0, product="NVIDIA A100-SXM4-40GB")], NVIDIA_GPU)
    assert "sro.dev/simulated" not in real


def test_version_labels() -> None:
    assert version_labels("535.104", "") == {
        "cuda.driver-version.full": "535.104", "cuda.driver-version.major": "535",
        "cuda.driver-version.minor": "104", "cuda.driver-version.revision": "",
        "cuda.driver.major": "535", "cuda.driver.minor": "104", "cuda.driver.rev": "",
    }  # fmt: skip
    assert version_labels("550.0-sim", "x") == {} and version_labels("1.2.3.4") == {}
    assert set(version_labels("1.0.0", "12.4", deprecated=False)) == {
        "cuda.driver-version.full", "cuda.driver-version.major", "cuda.driver-version.minor",
        "cuda.driver-version.revision", "cuda.runtime-version.full", "cuda.runtime-version.major",
        "cuda.runtime-version.minor",
    }  # fmt: skip
    assert accelerators.cuda_version(12040) == "12.4" and accelerators.cuda_version(13000) == "13.0"


def test_mig_single_strategy() -> None:
    same = [gpu(0, ("1g.5gb",) * 7), gpu(1, ("1g.5gb",) * 7)]
    labels = gfd_labels(same, NVIDIA_GPU, mig_strategy="single")
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-simulated-MIG-1g.5gb"
    assert labels["nvidia.com/gpu.count"] == "14" and labels["nvidia.com/gpu.memory"] == "4864"
    assert labels["nvidia.com/gpu.slices.gi"] == labels["nvidia.com/gpu.slices.ci"] == "1"
    # two profiles, or a GPU out of MIG mode: GFD's INVALID labels
    for bad in ([gpu(0, ("1g.5gb", "3g.20gb"))], [gpu(0, ("1g.5gb",)), gpu(1)]):
        invalid = mig_labels(bad, "single")
        assert invalid["gpu.product"].endswith("-MIG-INVALID") and invalid["gpu.count"] == "0"
        assert invalid["gpu.memory"] == invalid["gpu.replicas"] == "0"
    assert mig_labels([gpu(0), gpu(1)], "single") == {"mig.strategy": "single"}  # no MIG: GPUs stand


def test_mig_mixed_strategy() -> None:
    labels = gfd_labels([gpu(0, ("1g.5gb", "1g.5gb", "3g.20gb")), gpu(1)], NVIDIA_GPU, mig_strategy="mixed")
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.5gb.count"] == "2" and labels["nvidia.com/mig-3g.20gb.count"] == "1"
    assert (
        labels["nvidia.com/mig-3g.20gb.memory"] == "19968"
        and labels["nvidia.com/mig-3g.20gb.slices.gi"] == "3"
    )
    assert labels["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-simulated-MIG-1g.5gb"
    assert labels["nvidia.com/gpu.count"] == "2"  # the full GPUs' labels stay
    sim = gfd_labels([gpu(0, ("1g.5gb",))], SIMULATED_GPU, mig_strategy="mixed")
    assert sim["sro.dev/simulated-gpu.mig-1g.5gb.count"] == "1" and "sro.dev/simulated" not in sim


def test_mig_strategy_from_gfd_environment() -> None:
    assert mig_strategy([]) == "none" and mig_strategy([("MIG_STRATEGY", "Mixed")]) == "mixed"
    assert mig_strategy([("MIG_STRATEGY", "single"), ("GFD_MIG_STRATEGY", "mixed")]) == "mixed"
    assert mig_strategy([("MIG_STRATEGY", "bogus")]) == "none"


# --- the source on a fake host tree, with a fake NVML backend ------------------------------------


class FakeBackend:
    """Stands in for NvmlBackend: records where it was told to load NVML from."""

    opened: ClassVar[list[Path | None]] = []

    def __init__(self, sys_root: Path, driver_root: Path | None = None) -> None:
        FakeBackend.opened.append(driver_root)
        self.nvml = self

    NVMLError = RuntimeError

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def inventory(self) -> Inventory:
        return Inventory("nvml", (gpu(0, ("1g.5gb", "1g.5gb")), gpu(1)), driver_version="550.90.07")

    def close(self) -> None: ...


def fake_host(tmp_path: Path, library: bool) -> Path:
    host = tmp_path / "host"
    lib = host / "run/nvidia/driver/usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    if library:
        (lib / "libnvidia-ml.so.1").write_bytes(b"\x7fELF")
    (host / "dev").mkdir()
    return host


def test_nvml_is_asked_under_the_driver_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeBackend.opened = []
    monkeypatch.setattr(accelerators, "NvmlBackend", FakeBackend)
    monkeypatch.setenv("MIG_STRATEGY", "mixed")
    host = fake_host(tmp_path, library=True)
    labeling = discover(HostRoot.at(host), Config())
    assert FakeBackend.opened == [host / "run/nvidia/driver"]
    labels = labeling.labels
    assert labels["nvidia.com/gpu.count"] == "2" and labels["sro.dev/simulated"] == "true"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.90.07"
    assert labels["nvidia.com/mig.strategy"] == "mixed" and labels["nvidia.com/mig-1g.5gb.count"] == "2"
    assert not [p for p in labeling.problems if "nvidia" in p.path]


def test_no_library_no_control_node_no_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeBackend.opened = []
    monkeypatch.setattr(accelerators, "NvmlBackend", FakeBackend)
    labels = discover(HostRoot.at(fake_host(tmp_path, library=False)), Config()).labels
    assert FakeBackend.opened == [] and not any(k.startswith("nvidia.com/") for k in labels)


# --- the real simulated NVIDIA driver (root: device nodes; gcc: the library) ---------------------

CONFIG = {
    "personality": "nvidia",
    "count": 2,
    "nvlinks": [{"between": [0, 1], "links": 4}],
    "devices": [{"mig": [{"profile": "1g.5gb"}, {"profile": "1g.5gb"}]}],
}


def install_simulated_nvidia(host: Path, build: SimNvmlBuild) -> Inventory:
    """The simulated NVIDIA driver in `host`/run/nvidia/driver, its nodes in `host`/dev."""
    native = host.parent / "native"
    native.mkdir()
    assert build.smi is not None
    for src in (build.library, build.smi):
        (native / src.name).write_bytes(src.read_bytes())
        (native / src.name).chmod(0o755)
    inv = simulated_nvidia.parse(CONFIG)
    simulated_nvidia.install(
        inv, host / "run/nvidia/driver", host / "dev", Path("/proc/devices").read_text(), "",
        simulated_nvidia.find_native(native),
    )  # fmt: skip
    return inv


DISCOVER = """
import json, sys
from sro.host.root import HostRoot
from sro.node.discovery.commands import discover
from sro.node.discovery.config import Config
labeling = discover(HostRoot.at(sys.argv[1]), Config())
print(json.dumps({"labels": labeling.labels, "problems": [p.path for p in labeling.problems]}))
"""


@pytest.mark.root
def test_real_simulated_driver_labels(tmp_path: Path, simnvml_build: SimNvmlBuild) -> None:  # noqa: F811
    modules = Path("/proc/modules")
    reason = simulated_nvidia.refusal(
        modules.read_text() if modules.exists() else "", Path("/proc/devices").read_text()
    )
    if reason is not None:
        pytest.skip(f"a real NVIDIA driver is loaded here: {reason}")
    host = tmp_path / "host"
    inv = install_simulated_nvidia(host, simnvml_build)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SRO_SIMNVML", "MIG_STRATEGY", "GFD_"))}
    env |= {"SRO_SIMNVML_DEV_ROOT": str(host / "dev"), "MIG_STRATEGY": "mixed"}  # as the DaemonSet sets it
    r = subprocess.run(
        [sys.executable, "-c", DISCOVER, str(host)], capture_output=True, text=True, env=env, timeout=120
    )  # fmt: skip  (NVML is process-global: a child each time)
    assert r.returncode == 0, r.stderr
    got: dict[str, Any] = json.loads(r.stdout)
    labels = got["labels"]
    assert not [p for p in got["problems"] if "nvidia" in p], got["problems"]
    assert labels["nvidia.com/gpu.count"] == "2" and labels["sro.dev/simulated"] == "true"
    assert labels["nvidia.com/gpu.product"] == accelerators.sanitise(inv.devices[0].product)
    assert labels["nvidia.com/gpu.product"].endswith("-simulated")
    assert labels["nvidia.com/gpu.memory"] == str(inv.devices[0].memory_mib)
    assert labels["nvidia.com/cuda.driver-version.full"] == inv.driver_version
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"  # the 550 branch's CUDA
    assert labels["nvidia.com/mig.capable"] == "true" and labels["nvidia.com/mig-1g.5gb.count"] == "2"
    # a GPU whose node this container does not see is not counted
    (host / "dev/nvidia1").unlink()
    r = subprocess.run([sys.executable, "-c", DISCOVER, str(host)], capture_output=True, text=True,
                       env=env, timeout=120)  # fmt: skip
    assert json.loads(r.stdout)["labels"]["nvidia.com/gpu.count"] == "1"


def test_the_daemonset_sees_the_driver_root_and_the_nodes() -> None:
    from sro.api.names import NAMESPACE
    from sro.manifests import render

    docs = render("discovery", namespace=NAMESPACE, image="localhost/sro:test", pull_policy="Never")
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    run_nvidia = mounts["/host/run/nvidia"]  # HostRoot.at("/host").run / "nvidia/driver" is under it
    assert host_paths[run_nvidia["name"]] == "/run/nvidia" and run_nvidia["readOnly"] is True
    assert run_nvidia["mountPropagation"] == "HostToContainer"  # a driver container's later mount shows
    assert host_paths[mounts["/host/dev"]["name"]] == "/dev" and mounts["/host/dev"]["readOnly"] is True
    assert {"name": "SRO_SIMNVML_DEV_ROOT", "value": "/host/dev"} in container["env"]
    assert pod["securityContext"]["runAsNonRoot"] is True  # still nobody, no capabilities
