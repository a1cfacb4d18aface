"""The glibc test image's layer, unpacked and run: the simulated NVIDIA driver's nvidia-smi works in it.

Why unpacked into a chroot and not only listed: what a pod needs is that the dynamic loader, libc and
the linker cache work together in that root — the ELF interpreter path resolves, ldconfig (Debian's,
in the image) finds a library put where the hook puts it, and the program runs. The library and
nvidia-smi are placed as the hook places them (/usr/lib/x86_64-linux-gnu, /usr/bin).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from sro.local.images import glibc_layer
from sro.local.native import SimNvmlBuild
from tests.simnvml import simnvml_build  # noqa: F401  (the session fixture)

pytestmark = pytest.mark.root

BUSYBOX = Path("/bin/busybox")
STATE = (
    "simnvml version=1 generation=1 driver=550.90.07 cuda=12040 nvml=12.550.90.07\n"
    "gpu index=0 minor=0 uuid=GPU-00000000-1111-5222-8333-444444444444 bus=00000000:3B:00.0 "
    "name=NVIDIA%20A100-SXM4-40GB%20(simulated) memory=40960 cc=8.0 arch=ampere numa=-1 serial=1 mig=0 "
    "power_limit=400000 max_sm_clock=1410 max_mem_clock=1215 pcie_gen=4 pcie_width=16 lost=0\n"
)


@pytest.mark.skipif(not BUSYBOX.exists(), reason="busybox-static is not installed")
def test_nvidia_smi_runs_in_the_glibc_image(simnvml_build: SimNvmlBuild, tmp_path: Path) -> None:  # noqa: F811
    if simnvml_build.smi is None:
        pytest.skip("native/simnvml/nvidia-smi.c is missing")
    root = tmp_path / "rootfs"
    root.mkdir()
    with tarfile.open(glibc_layer(tmp_path / "layer.tar", BUSYBOX)) as tar:
        tar.extractall(root, filter="fully_trusted")  # our own layer, symlinks to absolute targets
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    shutil.copy2(simnvml_build.library, libdir / "libnvidia-ml.so.1")
    shutil.copy2(simnvml_build.smi, root / "usr/bin/nvidia-smi")
    (root / "sim/dev").mkdir(parents=True)
    (root / "sim/state").write_text(STATE)
    os.mknod(root / "sim/dev/nvidia0", 0o666 | 0o020000, os.makedev(195, 0))

    script = "ldconfig && ldconfig -p | grep -c libnvidia-ml.so.1 && nvidia-smi -L"
    env = {
        "PATH": "/usr/bin:/bin:/sbin",
        "SRO_SIMNVML_STATE": "/sim/state",
        "SRO_SIMNVML_DEV_ROOT": "/sim/dev",
    }
    res = subprocess.run(
        ["chroot", str(root), "/bin/sh", "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == [
        "1",
        "GPU 0: NVIDIA A100-SXM4-40GB (simulated) (UUID: GPU-00000000-1111-5222-8333-444444444444)",
    ]
