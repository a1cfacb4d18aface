"""The hook's path for a container that asks for nothing stays off `os` (issue 26: hook <= 1.5x one
Python start). `import os` costs ~1.5 ms of every start (os.path, _collections_abc); with hooks.d
`always` (podman, CRI-O) the hook runs for every container, and most ask for nothing. The string
helpers that stand in for os.path answer exactly as os.path does."""

from __future__ import annotations

import io
import json
import posixpath
import subprocess
import sys
from pathlib import Path

import pytest

from sro.node.runtime import hook
from sro.node.runtime.specedits import package_root


def _run_hook(stage: str, state: dict[str, object], *extra: str) -> tuple[int, list[str]]:
    code = (
        f"import sys; sys.path.insert(0, {package_root()!r});"
        "from sro.node.runtime.hook import main;"
        "rc = main(sys.argv[1:]);"
        "print(rc, ' '.join(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, stage, "--recipe", "simulated-gpu", *extra],
        input=json.dumps(state).encode(),
        capture_output=True,
        check=True,
    )
    rc, *modules = out.stdout.decode().split()
    return int(rc), modules


@pytest.mark.parametrize("stage", ["prestart", "createContainer", "poststop"])
def test_a_container_asking_for_nothing_never_imports_os(tmp_path: Path, stage: str) -> None:
    (tmp_path / "rootfs").mkdir()
    config = {"root": {"path": "rootfs"}, "process": {"env": ["PATH=/bin", "HOME=/root"]}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    rc, modules = _run_hook(stage, {"bundle": str(tmp_path), "pid": 1})
    assert rc == 0
    assert "os" not in modules and "posixpath" not in modules, modules
    assert "sro.node.runtime.hook" in modules


def test_a_container_asking_is_still_read_and_refused_on_bad_input(tmp_path: Path) -> None:
    (tmp_path / "rootfs").mkdir()
    config = {"root": {"path": "rootfs"}, "process": {"env": ["SRO_VISIBLE_DEVICES=zz"]}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    rc, modules = _run_hook(
        "prestart", {"bundle": str(tmp_path), "pid": 1}, "--accept-envvar-unprivileged", "true"
    )
    assert rc == 1  # the active path ran: device "zz" is refused before anything is changed
    assert "sro.node.runtime.activation" in modules


@pytest.mark.parametrize("a", ["", "/", "/a", "/a/", "a", "a/", "/a//"])
@pytest.mark.parametrize("b", ["", "x", "/x", "x/y", "rootfs", "../up"])
def test_join_is_posixpath_join(a: str, b: str) -> None:
    assert hook.path_join(a, b) == posixpath.join(a, b)


@pytest.mark.parametrize("path", ["", "/", "a", "/a", "./a", "//a"])
def test_isabs_is_posixpath_isabs(path: str) -> None:
    assert hook.path_isabs(path) == posixpath.isabs(path)


def test_relative_bundle_in_state_is_refused_as_before() -> None:
    with pytest.raises(hook.HookError, match="'bundle' must be an absolute path"):
        hook.read_state(io.BytesIO(b'{"bundle": "relative/dir", "pid": 1}'))


def test_an_image_env_var_not_believed_stops_before_os_and_the_injection_code(tmp_path: Path) -> None:
    """A CUDA image's NVIDIA_VISIBLE_DEVICES=all in an unprivileged container with no allocation:
    the hook decides "nothing" from activation alone."""
    (tmp_path / "rootfs").mkdir()
    config = {"root": {"path": "rootfs"}, "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    rc, modules = _run_hook("prestart", {"bundle": str(tmp_path), "pid": 1})
    assert rc == 0
    assert "sro.node.runtime.activation" in modules
    assert not {"os", "sro.node.runtime.inject", "sro.node.runtime.driverfiles"} & set(modules), modules


def test_the_wrapper_passes_such_a_container_to_runc_without_os(tmp_path: Path) -> None:
    config = {"root": {"path": "rootfs"}, "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    marker = tmp_path / "ran"
    runc = tmp_path / "runc"
    runc.write_text(f'#!/bin/sh\necho "$@" > {marker}\n')
    runc.chmod(0o755)
    code = (
        f"import sys; sys.path.insert(0, {package_root()!r});"
        "from sro.node.runtime import wrapper;"
        "import posix; real = posix.execv;"
        "posix.execv = lambda p, a: (print(' '.join(sorted(sys.modules))), sys.stdout.flush(), real(p, a));"
        "wrapper.main(sys.argv[1:])"
    )
    argv = ["--runc", str(runc), "--recipe", "nvidia-gpu", "--", "create", "--bundle", str(tmp_path), "c1"]
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, *argv], capture_output=True, check=True)
    modules = set(out.stdout.decode().split())
    assert "sro.node.runtime.activation" in modules
    assert not {"os", "sro.node.runtime.specedits", "sro.node.runtime.driverfiles"} & modules, modules
    assert marker.read_text().split() == ["create", "--bundle", str(tmp_path), "c1"]
    assert json.loads((tmp_path / "config.json").read_text()) == config  # untouched


def test_the_cdi_mode_ldcache_hook_imports_no_cgroup_or_mount_code(tmp_path: Path) -> None:
    """update-ldcache (mode cdi's createContainer hook, issue 26) writes one file and runs ldconfig:
    the device cgroup and mount modules are not its to import."""
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}, "process": {"env": []}}))
    rc, modules = _run_hook("update-ldcache", {"bundle": str(tmp_path), "pid": 1}, "--ldconfig", "none")
    assert rc == 0
    assert "sro.node.runtime.inject" in modules
    assert not {"sro.node.runtime.devcgroup", "sro.node.runtime.mounting"} & set(modules), modules
