"""`sro validate workload` inside a real runc container that the OCI hook gave one simulated device.

The bundle's rootfs is the busybox one plus read-only binds of this machine's /usr, its multiarch
library folder, the Python installation and this checkout, so the container can run
`python -m sro validate workload`. Like containerd's default, the device cgroup allows mknod of any
node (not opening it) and the process keeps CAP_MKNOD, so the check's probe node shows that the
cgroup refuses a device nobody granted. With the hook: every check passes; asked for two devices it
fails with the reason first on stderr; without the hook nothing was injected and it says so.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from sro.api.recipes import SIMULATED_DEVICE_LIST
from sro.node.runtime import devcgroup
from sro.node.runtime.driverfiles import dev_path
from sro.node.runtime.hookrecipes import BUILTIN
from tests.root.conftest import PYTHON, Bundle, Driver, allow_as_the_kubelet_would, hook_entry
from tests.simnvml_driver import (  # noqa: F401  (fixtures: the gpu and simulated NVML variants)
    NvmlTarget,
    nvml_target,
    simnvml_build,
    simnvml_driver,
)

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
MULTIARCH = "/usr/lib/x86_64-linux-gnu"
# A CUDA program on the host (absolute path) the `gpu` variant runs inside the container, through the
# libcuda the hook mounted: set by scripts/gpu-check, which builds one with nvcc.
CUDA_SAMPLE_ENV = "SRO_TEST_CUDA_SAMPLE"
COMMAND = f"PYTHONDONTWRITEBYTECODE=1 {PYTHON} -m sro validate workload --recipe simulated-gpu"


def _bind(source: str) -> dict[str, Any]:
    return {"destination": source, "source": source, "type": "bind", "options": ["rbind", "ro"]}


@pytest.fixture
def python_bundle(bundle: Bundle) -> Bundle:
    if not os.path.isdir(MULTIARCH):
        pytest.skip(f"expects a Debian-style multiarch {MULTIARCH}")
    (bundle.rootfs / "lib64").symlink_to("usr/lib64")
    mounts = bundle.spec["mounts"]
    mounts.append(_bind("/usr"))
    mounts.append({**_bind(MULTIARCH), "destination": "/lib/x86_64-linux-gnu"})
    # the interpreter's installation and, where it runs from a virtual environment (a GPU machine's
    # image keeps its Python in one under /opt), that environment too; a PYTHONPATH the tests run
    # with (sro from the checkout, packages unpacked beside the image's) goes into the container
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(":") if os.path.isdir(p)]
    for path in {str(Path(sys.base_prefix).resolve()), str(Path(sys.prefix)), str(REPO), *extra}:
        if not path.startswith("/usr/"):
            mounts.append(_bind(path))
    process = bundle.spec["process"]
    if extra:
        process["env"] = [*process.get("env", []), "PYTHONPATH=" + ":".join(extra)]
    for kind in ("bounding", "effective", "permitted"):
        process["capabilities"][kind] = [*process["capabilities"].get(kind, []), "CAP_MKNOD"]
    bundle.spec["linux"]["resources"]["devices"].append({"allow": True, "type": "c", "access": "m"})
    return bundle


def _uuids(driver: Driver) -> list[str]:
    doc = json.loads((driver.driver_root / SIMULATED_DEVICE_LIST).read_text())
    return [d["uuid"] for d in doc["devices"]]


def test_one_granted_device_passes(python_bundle: Bundle, driver: Driver) -> None:
    python_bundle.add_hook("prestart", hook_entry(driver))
    uuid = _uuids(driver)[1]
    res = python_bundle.run(COMMAND, env=[f"SRO_VISIBLE_DEVICES={uuid}"], timeout=120)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert res.stderr == ""
    assert f"PASS visible devices: SRO_VISIBLE_DEVICES names one device: {uuid}" in out
    assert "PASS tool: `/bin/simgpu-smi -L` lists the device: GPU 1" in out
    assert "PASS device nodes: only /dev/sro-simgpu1 is usable" in out
    assert "/dev/sro-simgpu1: usable (ENXIO: allowed, no kernel driver behind it)" in out
    assert "PASS device cgroup: a device nobody granted (c " in out
    assert "libsimgpu.so.1 -> /lib/libsimgpu.so.1: loads" in out
    assert "libsimgpu-ml.so.1 -> /lib/libsimgpu-ml.so.1: loads" in out
    assert "SKIP cuda sample" in out
    assert out.splitlines()[-1].startswith("workload validation passed (5 checks)")


def test_two_devices_fail_with_the_reason_first(python_bundle: Bundle, driver: Driver) -> None:
    python_bundle.add_hook("prestart", hook_entry(driver))
    res = python_bundle.run(COMMAND, env=["SRO_VISIBLE_DEVICES=0,1"], timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.splitlines()[0].startswith(
        "visible devices: SRO_VISIBLE_DEVICES=0,1 names 2 devices, expected exactly one"
    )
    assert "2 device nodes are usable (/dev/sro-simgpu0, /dev/sro-simgpu1)" in res.stderr
    assert res.stdout.splitlines()[-1].startswith("workload validation FAILED (3 of 5 checks)")


def test_without_the_hook_nothing_is_there(python_bundle: Bundle, driver: Driver) -> None:
    res = python_bundle.run(COMMAND, env=["SRO_VISIBLE_DEVICES=0"], timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    reasons = res.stderr
    assert "tool: simgpu-smi is not on PATH" in reasons
    assert "device nodes: the granted device's node /dev/sro-simgpu0 is absent" in reasons
    assert (
        "libraries: no library of the 'utility' group (libsimgpu-ml.so.*) is in the linker cache" in reasons
    )


def _writable_usr(bundle: Bundle) -> None:
    """The container's /usr as an overlay over the host's: the hook's mount targets land in a temp
    upper dir, the host's /usr is never written."""
    upper, work = bundle.path.parent / "usr-upper", bundle.path.parent / "usr-work"
    upper.mkdir()
    work.mkdir()
    overlay: dict[str, Any] = {"destination": "/usr", "type": "overlay", "source": "overlay"}
    overlay["options"] = [f"lowerdir=/usr,upperdir={upper},workdir={work}"]
    mounts = bundle.spec["mounts"]
    mounts[:] = [overlay if m["destination"] == "/usr" else m for m in mounts]


def test_nvidia_gpu_workload(python_bundle: Bundle, nvml_target: NvmlTarget) -> None:  # noqa: F811
    """The same container with an NVIDIA driver: this machine's (driver root `/`; the `gpu` variant)
    or the simulated NVIDIA driver (tests/simnvml_driver.py). GPU 0's node opens (ENXIO on the
    simulated one: no kernel side), nvidia-smi lists it and NVML loads; on real hardware libcuda
    loads and vectorAdd runs when it is on PATH, on the simulated driver both are skipped, saying so."""
    from sro.node.runtime.specedits import HookCommand

    sim = nvml_target.simulated
    roots = [*nvml_target.driver_args(), "--dev-root", str(nvml_target.dev_root)] if sim else []
    if sim:  # the hook mounts NVML into /usr/lib/x86_64-linux-gnu: a /usr it may write, over the host's
        _writable_usr(python_bundle)
    options = ("--recipe", "nvidia-gpu", *roots, "--accept-envvar-unprivileged", "true")
    python_bundle.add_hook("prestart", HookCommand(PYTHON, options).entry("prestart"))
    if devcgroup.v2_only("self"):  # no hook can open a v2 device cgroup: the rules the kubelet writes
        dev_root = str(nvml_target.dev_root or "/dev")
        nodes = ["/dev/nvidia0", *BUILTIN["nvidia-gpu"].control_nodes]
        assert allow_as_the_kubelet_would(python_bundle, [dev_path(dev_root, n) for n in nodes])
    command = COMMAND.replace("simulated-gpu", "nvidia-gpu")
    cuda_sample = os.environ.get(CUDA_SAMPLE_ENV, "") if not sim else ""
    if cuda_sample:  # a CUDA program built on this GPU machine (scripts/gpu-check): run in the container
        python_bundle.spec["mounts"].append(_bind(str(Path(cuda_sample).parent)))
        command += f" --cuda-sample {cuda_sample}"
    res = python_bundle.run(command, env=["NVIDIA_VISIBLE_DEVICES=0"], timeout=300)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "PASS device nodes: only /dev/nvidia0 is usable" in out, out
    assert ("(opened)" in out) != sim and ("libcuda.so.1" in out) != sim, out
    assert "libnvidia-ml.so.1" in out, out
    assert "PASS tool: `/usr/bin/nvidia-smi -L` lists the device: GPU 0" in out, out
    if sim:
        assert "SKIP cuda sample" in out, out
    if cuda_sample:
        assert f"PASS cuda sample: `{cuda_sample}` succeeded" in out, out
