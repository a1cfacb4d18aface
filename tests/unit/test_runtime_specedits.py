"""Hook entries, hooks.d documents, spec edits, the wrapper's argv handling and the launcher."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.node.runtime import hook, inject, launcher, specedits, wrapper
from sro.node.runtime.inventory import DeviceNode, FileMount, InjectionPlan
from sro.node.runtime.specedits import bootstrap, package_root

CMD = specedits.HookCommand("/opt/venv/bin/python", ("--recipe", "simulated-gpu"))
PLAN = InjectionPlan(
    device_nodes=(DeviceNode("/dev/sro-simgpu0", "/dev/sro-simgpu0", 120, 0, 0o666, "0"),),
    mounts=(
        FileMount("/d/lib/libsimgpu.so.1", "/lib/libsimgpu.so.1"),
        FileMount("/d/share", "/usr/share/x", "dir"),
    ),
    ld_folders=("/lib",),
)


def test_every_entry_has_an_explicit_env_and_isolated_python() -> None:
    e = CMD.entry("createContainer", ["--x"])
    assert e["path"] == e["args"][0] == "/opt/venv/bin/python"
    assert e["args"][1:4] == ["-I", "-S", "-c"]
    assert "from sro.node.runtime.hook import main" in e["args"][4]
    assert e["args"][5:] == ["createContainer", "--recipe", "simulated-gpu", "--x"]
    assert e["env"] == ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"]
    assert e["timeout"] == 30
    with pytest.raises(ValueError, match="absolute"):
        specedits.HookCommand("python3")


def test_hooks_d_document() -> None:
    doc = specedits.hooks_d(CMD)
    assert doc["version"] == "1.0.0" and doc["when"] == {"always": True} and doc["stages"] == ["prestart"]
    assert doc["hook"]["env"]


def test_add_hook_copies_and_is_idempotent() -> None:
    spec: dict[str, Any] = {"process": {}}
    once = specedits.add_hook(spec, "prestart", CMD.entry("prestart"))
    twice = specedits.add_hook(once, "prestart", CMD.entry("prestart"))
    assert spec == {"process": {}}
    assert twice == once and len(once["hooks"]["prestart"]) == 1
    with pytest.raises(ValueError, match="hooks"):
        specedits.add_hook({"hooks": []}, "prestart", {})


def test_apply_plan_cdi_style() -> None:
    spec = {"linux": {"devices": [{"path": "/dev/sro-simgpu0"}]}, "mounts": [{"destination": "/proc"}]}
    out = specedits.apply_plan(spec, PLAN, CMD)
    assert out["linux"]["devices"] == [{"path": "/dev/sro-simgpu0"}]  # already there: not doubled
    assert out["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 120, "minor": 0, "access": "rwm"}
    ]
    assert out["mounts"][1:] == [
        {
            "destination": "/lib/libsimgpu.so.1",
            "source": "/d/lib/libsimgpu.so.1",
            "type": "bind",
            "options": ["ro", "nosuid", "nodev", "bind"],
        },
        {
            "destination": "/usr/share/x",
            "source": "/d/share",
            "type": "bind",
            "options": ["ro", "nosuid", "nodev", "rbind"],
        },
    ]
    (entry,) = out["hooks"]["createContainer"]
    assert entry["args"][5:] == ["update-ldcache", "--recipe", "simulated-gpu", "--folder", "/lib"]
    assert entry["env"]


def test_apply_plan_cdi_style_with_the_hosts_ldconfig_as_its_hook() -> None:
    """Mode cdi's one-Python ldcache: the host's ldconfig is the hook, the folders' file a runc mount."""
    direct = specedits.DirectLdcache("/sbin/ldconfig.real", "/b/rootfs", "/b/sro-ld.so.conf")
    out = specedits.apply_plan({"mounts": []}, PLAN, direct)
    assert out["mounts"][-1] == {
        "destination": "/etc/ld.so.conf.d/000-sro.conf",
        "source": "/b/sro-ld.so.conf",
        "type": "bind",
        "options": ["ro", "nosuid", "nodev", "bind"],
    }
    (entry,) = out["hooks"]["createContainer"]
    assert entry == {
        "path": "/sbin/ldconfig.real",
        "args": ["/sbin/ldconfig.real", "-r", "/b/rootfs", "/lib"],
        "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"],
        "timeout": 30,
    }
    assert specedits.LD_CONF == inject.LD_CONF
    with pytest.raises(ValueError, match="absolute"):
        specedits.ldconfig_entry(specedits.DirectLdcache("ldconfig", "/r", "/c"), ["/lib"])


def test_the_wrapper_checks_the_hosts_ldconfig_and_writes_the_folders(tmp_path: Path) -> None:
    spec = {"root": {"path": "rootfs"}}
    (tmp_path / "rootfs").mkdir()
    if not Path("/sbin/ldconfig").exists():
        pytest.skip("no /sbin/ldconfig on this machine")
    good = inject.real_ldconfig("/sbin/ldconfig")  # the host's: root's, not writable
    direct = wrapper.direct_ldcache(spec, str(tmp_path), "/sbin/ldconfig", ("/lib", "/usr/lib64"))
    assert direct == specedits.DirectLdcache(good, str(tmp_path / "rootfs"), str(tmp_path / "sro-ld.so.conf"))
    assert (tmp_path / "sro-ld.so.conf").read_text() == "/lib\n/usr/lib64\n"
    writable = tmp_path / "ldconfig"
    writable.write_bytes(b"\x7fELF")
    writable.chmod(0o757)  # world-writable: anyone could replace what runs as root
    with pytest.raises(wrapper.WrapperError, match="not a root-owned, non-writable"):
        wrapper.direct_ldcache(spec, str(tmp_path), str(writable), ("/lib",))
    planted = tmp_path / "rootfs" / "ldconfig"  # the image's own: CVE-2024-0136
    planted.write_bytes(b"\x7fELF")
    with pytest.raises(wrapper.WrapperError, match="inside the container's rootfs"):
        wrapper.direct_ldcache(spec, str(tmp_path), str(planted), ("/lib",))
    with pytest.raises(wrapper.WrapperError, match=r"root\.path"):
        wrapper.direct_ldcache({}, str(tmp_path), "/sbin/ldconfig", ("/lib",))


@pytest.mark.parametrize(
    ("argv", "bundle"),
    [
        (["create", "--bundle", "/b", "id"], "/b"),
        (["--root", "/run/x", "--log", "/l.json", "--log-format", "json", "create", "-b", "/b", "id"], "/b"),
        (["--systemd-cgroup", "create", "--bundle=/b", "--pid-file", "/p", "id"], "/b"),
        (["run", "--bundle", "/b", "id"], "/b"),
        (["--root", "create", "start", "id"], None),  # "create" is --root's value here
        (["state", "id"], None),
        (["delete", "--force", "id"], None),
        ([], None),
    ],
)
def test_find_create_bundle(argv: list[str], bundle: str | None) -> None:
    assert wrapper.find_create_bundle(argv) == bundle


def test_edit_spec_modes(tmp_path: Path) -> None:
    args = hook.parse_args(
        ["prestart", "--recipe", "simulated-gpu", "--driver-root", str(tmp_path), "--dev-root", str(tmp_path)]
    )
    privileged = {"bounding": ["CAP_SYS_ADMIN"]}  # what the container's own env is believed for
    asking = {"process": {"env": ["SRO_VISIBLE_DEVICES=none"], "capabilities": privileged}}
    assert wrapper.edit_spec({"process": {"env": ["A=1"]}}, args, "hook", CMD) is None
    unprivileged = {"process": {"env": ["SRO_VISIBLE_DEVICES=3"]}}
    assert wrapper.edit_spec(unprivileged, args, "cdi", CMD) is None  # not believed: nothing, no lookup
    hooked = wrapper.edit_spec(asking, args, "hook", CMD)
    assert hooked is not None and hooked["hooks"]["prestart"][0]["args"][5] == "prestart"
    cdi = wrapper.edit_spec(asking, args, "cdi", CMD)
    assert cdi is not None and cdi["linux"]["devices"] == [] and "hooks" not in cdi  # nothing found
    with pytest.raises(wrapper.WrapperError, match="unknown device id '3'"):
        wrapper.edit_spec(
            {"process": {**unprivileged["process"], "capabilities": privileged}}, args, "cdi", CMD
        )
    with pytest.raises(wrapper.WrapperError, match="usage"):
        wrapper.parse(["create"])
    with pytest.raises(wrapper.WrapperError, match="--mode"):
        wrapper.parse(["--mode", "x", "--", "state"])


@pytest.mark.parametrize("mode", ["hook", "cdi"])
def test_a_refusal_reaches_the_pod_status_through_runcs_log(tmp_path: Path, mode: str) -> None:
    """containerd's shim reads runc's last error from `--log`, never the runtime's stderr: a refused
    container (an unknown device) must say why there, or the pod shows only "unable to retrieve OCI
    runtime error (open .../log.json: no such file)" (found by the e2e runtime-class test)."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = {"process": {"env": ["SRO_VISIBLE_DEVICES=3"], "capabilities": {"bounding": ["CAP_SYS_ADMIN"]}}}
    (bundle / "config.json").write_text(json.dumps(spec))
    log = tmp_path / "log.json"
    opts = ["--recipe", "simulated-gpu", "--driver-root", str(tmp_path), "--dev-root", str(tmp_path)]
    runc_args = [
        "--root",
        "/run/x",
        "--log",
        str(log),
        "--log-format",
        "json",
        "create",
        "--bundle",
        str(bundle),
        "c1",
    ]
    with pytest.raises(SystemExit) as exit_:
        wrapper.main(["--runc", "/bin/false", "--mode", mode, *opts, "--", *runc_args])
    assert exit_.value.code == 1
    [line] = log.read_text().splitlines()
    entry = json.loads(line)
    assert entry["level"] == "error" and "unknown device id '3'" in entry["msg"]
    assert wrapper.runc_log_path(["--log=/x/log.json", "create"]) == "/x/log.json"
    assert wrapper.runc_log_path(["create", "--bundle", "b"]) is None


def test_launcher_passes_everything_but_create_straight_to_runc(tmp_path: Path) -> None:
    """Run the generated shell script with a fake runc and a fake python that record their argv."""
    runc = tmp_path / "runc"
    runc.write_text(f'#!/bin/sh\necho "runc $*" >> {tmp_path}/log\n')
    python = tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\necho "python $*" >> {tmp_path}/log\necho "env $(env | sort | tr "\\n" " ")" >> {tmp_path}/log\n'
    )
    for f in (runc, python):
        f.chmod(0o755)
    asking, plain = tmp_path / "asking", tmp_path / "plain"
    for b, spec_env in ((asking, ["SRO_VISIBLE_DEVICES=0"]), (plain, ["PATH=/bin"])):
        b.mkdir()
        (b / "config.json").write_text(json.dumps({"process": {"env": spec_env}, "annotations": {"x": "y"}}))
    script = tmp_path / "sro-runc"
    launcher.write(str(script), str(python), str(runc), "cdi", ["--driver-root", "/a b"])
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": "/evil.so"}
    for argv in (
        ["--root", "/r", "state", "c1"],
        ["--root", "create", "delete", "c1"],
        ["create", "--bundle", str(plain), "c1"],
        ["--log", "/l", "create", f"--bundle={plain}", "c1"],
        ["--log", "/l", "create", "-b", str(asking), "c1"],
    ):
        subprocess.run([str(script), *argv], check=True, env=env)
    log = (tmp_path / "log").read_text().splitlines()
    assert log[0] == "runc --root /r state c1"
    assert log[1] == "runc --root create delete c1"
    assert log[2] == f"runc create --bundle {plain} c1"  # asks for nothing: no Python at all
    assert log[3] == f"runc --log /l create --bundle={plain} c1"
    assert log[4] == (
        "python -I -S -c "
        + bootstrap("sro.node.runtime.wrapper", package_root())
        + f" --runc {runc} --mode cdi --driver-root /a b -- --log /l create -b {asking} c1"
    )
    assert "LD_PRELOAD" not in log[5]  # the wrapper starts from a clean environment
    with pytest.raises(ValueError, match="absolute"):
        launcher.render("python3")


@pytest.mark.parametrize(
    ("spec", "through_python"),
    [
        # a device plugin's allocation: containerd writes compact JSON, runc/podman indented
        ({"linux": {"devices": [{"path": "/dev/sro-simgpu1", "type": "c", "major": 240, "minor": 1}]}}, True),
        ({"process": {"env": ["SRO_MANAGEMENT_DEVICES=all"]}}, True),  # the management request
        (
            {
                "process": {"env": ["PATH=/bin"]},
                "linux": {"devices": [], "resources": {"devices": [{"allow": False}]}},
            },
            False,
        ),
        ({"root": {"path": "rootfs"}, "process": {"env": ["DEV=/dev/"]}}, False),
    ],
)
@pytest.mark.parametrize("indent", [None, 1])
def test_launcher_prefilter_lets_every_channel_through(
    tmp_path: Path, spec: dict[str, Any], through_python: bool, indent: int | None
) -> None:
    """What `activation` may honour must reach Python: the allocation in linux.devices (issue 21 §1)."""
    log = tmp_path / "log"
    runc, python = tmp_path / "runc", tmp_path / "python"
    runc.write_text(f"#!/bin/sh\necho runc >> {log}\n")
    python.write_text(f"#!/bin/sh\necho python >> {log}\n")
    for f in (runc, python):
        f.chmod(0o755)
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(spec, indent=indent))
    script = tmp_path / "sro-runc"
    launcher.write(str(script), str(python), str(runc), "hook", [])
    subprocess.run(
        [str(script), "create", "--bundle", str(bundle), "c1"], check=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert log.read_text().split() == (["python"] if through_python else ["runc"])


def test_hooks_d_through_the_cli(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sro.cli import cli

    res = CliRunner().invoke(
        cli,
        [
            "hook",
            "install-hooksd",
            "--dir",
            str(tmp_path),
            "--recipe",
            "simulated-gpu",
            "--python",
            "/opt/venv/bin/python",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "sro-hook.json").read_text())
    args = doc["hook"]["args"]
    assert args[:4] == ["/opt/venv/bin/python", "-I", "-S", "-c"] and args[5:7] == ["prestart", "--recipe"]
    assert SIMULATED_GPU.name in doc["hook"]["args"]


def test_precompile_writes_the_hooks_bytecode(tmp_path: Path) -> None:
    """A fresh copy of the package gets .pyc files for everything the hook imports."""
    import importlib.util
    import shutil
    import sys

    from sro.node.runtime.specedits import package_root, precompile

    src = Path(package_root()) / "sro"
    dst = tmp_path / "sro"
    (dst / "node").mkdir(parents=True)
    shutil.copy(src / "__init__.py", dst / "__init__.py")
    shutil.copy(src / "node" / "__init__.py", dst / "node" / "__init__.py")
    shutil.copytree(
        src / "node" / "runtime", dst / "node" / "runtime", ignore=shutil.ignore_patterns("__pycache__")
    )
    assert precompile(sys.executable, str(tmp_path))
    for rel in ("__init__.py", "node/__init__.py", "node/runtime/hook.py", "node/runtime/inject.py"):
        assert Path(importlib.util.cache_from_source(str(dst / rel))).is_file(), rel
    assert not precompile("/nonexistent/python", str(tmp_path))


def test_allow_devices_adds_each_rule_once_and_copies() -> None:
    kubelet = {"allow": True, "type": "c", "major": 120, "minor": 0, "access": "rwm"}
    spec: dict[str, Any] = {"linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}, kubelet]}}}
    two = InjectionPlan(device_nodes=(*PLAN.device_nodes, DeviceNode("/dev/ctl", "/dev/ctl", 120, 255)))
    out = specedits.allow_devices(spec, two)
    assert out["linux"]["resources"]["devices"] == [
        {"allow": False, "access": "rwm"},
        kubelet,  # already there: not doubled
        {"allow": True, "type": "c", "major": 120, "minor": 255, "access": "rwm"},
    ]
    assert len(spec["linux"]["resources"]["devices"]) == 2  # the input is not changed
    assert specedits.allow_devices({}, two)["linux"]["resources"]["devices"][0] == kubelet
    with pytest.raises(ValueError, match=r"linux\.resources"):
        specedits.allow_devices({"linux": {"resources": []}}, two)


def test_wrapper_hook_mode_writes_the_device_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On cgroup v2 runc builds the device cgroup from the spec before the hook runs: the wrapper puts
    the rules of the nodes the hook will make there (`c MAJ:MIN rwm`), beside the hook entry."""
    from sro.node.runtime import inventory

    monkeypatch.setattr(inventory, "plan_all", lambda requests, inventories: PLAN)
    args = hook.parse_args(["prestart", "--recipe", "simulated-gpu", "--driver-root", str(tmp_path)])
    asking = {"process": {"env": ["SRO_VISIBLE_DEVICES=0"], "capabilities": {"bounding": ["CAP_SYS_ADMIN"]}}}
    out = wrapper.edit_spec(asking, args, "hook", CMD)
    assert out is not None and out["hooks"]["prestart"][0]["args"][5] == "prestart"
    assert out["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 120, "minor": 0, "access": "rwm"}
    ]
    assert "devices" not in out["linux"] and "mounts" not in out  # the hook makes the nodes and mounts


def test_mode_hook_reads_only_the_device_nodes(tmp_path: Path) -> None:
    """The wrapper's mode hook writes only the device cgroup rules: discover_devices gives the same
    nodes and aliases as a full discovery, with none of the driver's files globbed."""
    from sro.node.runtime import driverfiles

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libsimgpu.so.1").write_bytes(b"")
    (tmp_path / "devices.json").write_text(json.dumps({"devices": [{"uuid": "GPU-x", "index": 0}]}))
    full = driverfiles.discover(SIMULATED_GPU, str(tmp_path), "/dev")
    only = driverfiles.discover_devices(SIMULATED_GPU, str(tmp_path), "/dev")
    assert (only.devices, only.control_nodes, only.aliases) == (
        full.devices,
        full.control_nodes,
        full.aliases,
    )
    assert any(full.libraries.values()) and full.aliases == {"GPU-x": "0"}
    assert only.libraries == {} and only.binaries == {} and only.firmware == ()
