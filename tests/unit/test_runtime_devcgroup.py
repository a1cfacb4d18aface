"""The device cgroup: v1 opened through devices.allow, v2 detected and warned about (fake proc trees)."""

from __future__ import annotations

import os
import posix
from pathlib import Path
from typing import Any

import pytest

from sro.node.runtime import devcgroup
from sro.node.runtime.inject import InjectError
from sro.node.runtime.inventory import DeviceNode, InjectionPlan

GPU0 = DeviceNode("/dev/nvidia0", "/dev/nvidia0", 195, 0, 0o666, "0")
CTL = DeviceNode("/dev/nvidiactl", "/dev/nvidiactl", 195, 255)
PLAN = InjectionPlan(device_nodes=(GPU0, CTL))
V1 = "12:devices:/kubepods/pod1/abc\n11:memory:/kubepods/pod1/abc\n0::/kubepods/pod1/abc\n"
V2 = "0::/kubepods.slice/pod1/cri-containerd-abc.scope\n"


def _proc(tmp_path: Path, cgroup: str, mountinfo: str = "") -> Path:
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "42" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    return proc


def _rule(major: int | None, minor: int | None, access: str = "rwm", allow: bool = True) -> dict[str, Any]:
    return {"allow": allow, "type": "c", "major": major, "minor": minor, "access": access}


@pytest.mark.parametrize(
    ("cgroup", "v2"),
    [(V2, True), ("0::/\n", True), (V1, False), ("1:name=systemd:/x\n0::/x\n", False), ("", False)],
)
def test_v2_only_is_the_single_unified_line(tmp_path: Path, cgroup: str, v2: bool) -> None:
    assert devcgroup.v2_only(42, str(_proc(tmp_path, cgroup))) is v2


@pytest.mark.parametrize(
    ("rules", "allowed"),
    [
        ([], False),  # default deny
        ([_rule(195, 0)], True),
        ([_rule(195, None)], True),  # any minor
        ([{"allow": True, "access": "rwm"}], True),  # a privileged container's allow-all
        ([{"allow": True}], True),  # no access: rwm
        ([_rule(-1, -1)], True),
        ([_rule(195, 0, "m")], False),  # mknod only (containerd's default for some nodes)
        ([_rule(195, 0, "r")], False),  # opening it read-write needs w too
        ([_rule(195, 0), _rule(195, None, "rwm", allow=False)], False),  # the last match decides
        ([_rule(195, None, allow=False), _rule(195, 0)], True),
        ([_rule(195, 0), _rule(195, 0, "w", allow=False)], False),  # per access letter
        ([{"allow": True, "type": "b", "major": 195, "minor": 0, "access": "rwm"}], False),
        ([_rule(195, 1)], False),
    ],
)
def test_spec_allows_as_runc_applies_the_rules(rules: list[dict[str, Any]], allowed: bool) -> None:
    assert devcgroup.spec_allows(rules, 195, 0) is allowed


def test_v2_warns_once_naming_the_closed_nodes_and_the_remedies(tmp_path: Path) -> None:
    proc = str(_proc(tmp_path, V2))
    line = devcgroup.open_for(42, PLAN, {"linux": {"resources": {"devices": [_rule(195, 0)]}}}, proc)
    assert line is not None and "\n" not in line
    assert line.startswith("warning: cgroup v2 host")
    assert "/dev/nvidiactl (c 195:255)" in line and "/dev/nvidia0" not in line  # that one is allowed
    assert "device-specs" in line and "CDI" in line and "sro runtime class" in line
    everything = devcgroup.open_for(42, PLAN, {}, proc)
    assert everything is not None and "/dev/nvidia0 (c 195:0), /dev/nvidiactl (c 195:255)" in everything


def test_v2_with_the_kubelets_rules_is_silent(tmp_path: Path) -> None:
    config = {
        "linux": {"resources": {"devices": [_rule(None, None, allow=False), _rule(195, 0), _rule(195, 255)]}}
    }
    assert devcgroup.open_for(42, PLAN, config, str(_proc(tmp_path, V2))) is None


@pytest.mark.parametrize(
    "config", [{"linux": []}, {"linux": {"resources": {"devices": "x"}}}, {"linux": None}]
)
def test_malformed_spec_rules_read_as_none(config: dict[str, Any]) -> None:
    assert devcgroup.not_allowed(PLAN.device_nodes, config) == (GPU0, CTL)


def test_v1_appends_the_rules_and_warns_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cg = tmp_path / "cg" / "kubepods" / "pod1" / "abc"
    cg.mkdir(parents=True)
    (cg / "devices.allow").write_text("")
    mountinfo = f"30 25 0:26 / {tmp_path / 'cg'} rw,nosuid - cgroup cgroup rw,devices\n"
    proc = str(_proc(tmp_path, V1, mountinfo))
    written: list[tuple[str, str]] = []
    real_write = posix.write

    def record(fd: int, data: bytes) -> int:  # one write(2) per rule, as the kernel wants them
        written.append((os.readlink(f"/proc/self/fd/{fd}"), data.decode()))
        return int(real_write(fd, data))

    monkeypatch.setattr(posix, "write", record)  # the module devcgroup writes through (not `os`)
    assert devcgroup.open_for(42, PLAN, {}, proc) is None
    monkeypatch.undo()
    allow = str(cg / "devices.allow")
    assert written == [(allow, "c 195:0 rwm"), (allow, "c 195:255 rwm")]


def test_v1_hidden_by_a_cgroup_namespace_is_left_alone(tmp_path: Path) -> None:
    assert devcgroup.open_for(42, PLAN, {}, str(_proc(tmp_path, "12:devices:/\n0::/\n"))) is None


def test_v1_path_with_dotdot_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InjectError, match="with '\\.\\.'"):
        devcgroup.devices_cgroup_dir(42, str(_proc(tmp_path, "12:devices:/a/../../x\n")))
