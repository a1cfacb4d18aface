"""The hook and the runc wrapper inject a device without importing `os` (issue 26: every container
that gets a device pays for what they import; `os` with os.path and _collections_abc is ~1.3 ms of
it). `leanpath` stands in for os.path there; this checks the real paths, with real runc: the
container really gets its device and library, and the module list is read from the very process
that injected them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sro.node.runtime.specedits import package_root
from tests.root.conftest import Bundle, Driver, hook_entry
from tests.root.test_device_isolation_runc import allocate

pytestmark = pytest.mark.root

EXIT = "import posix;posix._exit(r)"  # how the bootstrap of every hook entry ends (specedits)
LOOK = "test -s /lib/libsimgpu.so.1 && echo HAS-LIB; ls /dev | grep sro-simgpu"


def _modules_written_to(entry: dict[str, object], out: Path) -> dict[str, object]:
    """The entry's bootstrap, writing the hook process's sys.modules to `out` just before it exits."""
    args = [str(a) for a in entry["args"]]  # type: ignore[attr-defined]
    assert EXIT in args[4], args[4]
    args[4] = args[4].replace(EXIT, f"open({str(out)!r},'w').write(' '.join(sys.modules));{EXIT}")
    return {**entry, "args": args}


@pytest.mark.parametrize("stage", ["prestart", "createContainer"])
def test_the_hook_injects_an_allocated_device_without_os(
    bundle: Bundle, driver: Driver, tmp_path: Path, stage: str
) -> None:
    out = tmp_path / "modules"
    bundle.add_hook(stage, _modules_written_to(hook_entry(driver, stage, accept_env=False), out))
    allocate(bundle.spec, driver, "sro-simgpu1")
    allocate(bundle.spec, driver, "sro-simgpuctl")
    res = bundle.run(LOOK, env=["SRO_VISIBLE_DEVICES=all"])
    assert res.returncode == 0, res.stderr
    assert "HAS-LIB" in res.stdout and "sro-simgpu1" in res.stdout, res.stdout
    modules = set(out.read_text().split())
    assert {"sro.node.runtime.inject", "sro.node.runtime.driverfiles", "sro.node.runtime.mounting"} <= modules
    assert not {"os", "posixpath", "_collections_abc"} & modules, sorted(modules)


def test_the_wrapper_writes_an_allocated_device_into_the_spec_without_os(
    bundle: Bundle, driver: Driver, tmp_path: Path
) -> None:
    """Mode cdi: the wrapper finds the driver's files, checks the host ldconfig and writes the spec."""
    allocate(bundle.spec, driver, "sro-simgpu1")
    bundle.spec["process"]["env"] = ["PATH=/bin"]
    bundle.write()
    runc = tmp_path / "runc"
    runc.write_text("#!/bin/sh\nexit 0\n")
    runc.chmod(0o755)
    code = (
        f"import sys; sys.path.insert(0, {package_root()!r});"
        "from sro.node.runtime import wrapper;"
        "import posix; real = posix.execv;"
        "posix.execv = lambda p, a: (print(' '.join(sys.modules)), sys.stdout.flush(), real(p, a));"
        "wrapper.main(sys.argv[1:])"
    )
    argv = ["--runc", str(runc), "--mode", "cdi", *driver.hook_options(accept_env=False)]
    argv += ["--", "create", "--bundle", str(bundle.path), "c1"]
    res = subprocess.run([sys.executable, "-I", "-S", "-c", code, *argv], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    spec = json.loads((bundle.path / "config.json").read_text())
    assert any(m["destination"] == "/lib/libsimgpu.so.1" for m in spec["mounts"]), spec["mounts"]
    modules = set(res.stdout.split())
    assert {
        "sro.node.runtime.driverfiles",
        "sro.node.runtime.specedits",
        "sro.node.runtime.hostldconfig",
    } <= modules
    assert not {"os", "posixpath", "_collections_abc"} & modules, sorted(modules)
