"""The hook with an NVIDIA driver: this machine's (driver root `/`; the `gpu` variant, skipped without
one) or the simulated NVIDIA driver (its temp driver and dev roots, tests/simnvml_driver.py). GPU 0's
node and nvidiactl get through the device cgroup (on a cgroup v2 host only through the spec's rules,
which the test writes as the kubelet would: the hook then has nothing to warn about), nvidia-smi and NVML are in the container's linker
cache; libcuda only with a real driver (the simulated one has no CUDA), NVML's state directory only
with the simulated one."""

from __future__ import annotations

import pytest

from sro.node.runtime import devcgroup
from sro.node.runtime.driverfiles import dev_path
from sro.node.runtime.hookrecipes import BUILTIN
from tests.root.conftest import PYTHON, Bundle, allow_as_the_kubelet_would, capture_stderr
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
    entry = HookCommand(PYTHON, options).entry("prestart")
    v2 = devcgroup.v2_only("self")
    log = bundle.path.parent / "hook-stderr.log"
    if v2:  # no hook can open a v2 device cgroup: the spec gets the rules, as the kubelet does
        dev_root = str(nvml_target.dev_root or "/dev")
        nodes = ["/dev/nvidia0", *BUILTIN["nvidia-gpu"].control_nodes]
        assert allow_as_the_kubelet_would(bundle, [dev_path(dev_root, n) for n in nodes])
        entry = capture_stderr(entry, log)
    bundle.add_hook("prestart", entry)
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
    if v2:  # the spec allows every node the hook made: no warning
        assert "warning" not in log.read_text(), log.read_text()


def test_v2_host_warns_when_the_spec_keeps_the_nodes_closed(
    bundle: Bundle,
    nvml_target: NvmlTarget,  # noqa: F811
) -> None:
    """The bare hook's env-var path on a cgroup v2 host, no rules in the spec: the nodes are made but
    do not open, and the hook says so in one line (and still lets the container start)."""
    from sro.node.runtime.specedits import HookCommand

    if not devcgroup.v2_only("self"):
        pytest.skip("a cgroup v1 host: the hook opens the device cgroup itself")
    roots = (
        [*nvml_target.driver_args(), "--dev-root", str(nvml_target.dev_root)] if nvml_target.simulated else []
    )
    options = ("--recipe", "nvidia-gpu", *roots, "--accept-envvar-unprivileged", "true")
    log = bundle.path.parent / "hook-stderr.log"
    bundle.add_hook("prestart", capture_stderr(HookCommand(PYTHON, options).entry("prestart"), log))
    res = bundle.run("cat /dev/nvidiactl 2>&1 | head -1", env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert res.returncode == 0 and "Operation not permitted" in res.stdout, res.stdout + res.stderr
    (line,) = [x for x in log.read_text().splitlines() if "warning" in x]
    assert line.startswith("sro hook: warning: cgroup v2 host") and "/dev/nvidiactl (c " in line, line
    assert "device-specs" in line and "sro runtime class" in line, line
