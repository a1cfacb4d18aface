"""The root mount's propagation, read from /proc/self/mountinfo's text: `sro local up` makes / shared
where it is not (containerd refuses HostToContainer and Bidirectional mounts of paths on a private
mount, which is what this machine has without systemd)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sro.local import hostsetup

PRIVATE = (
    "22 27 0:21 / /proc rw,relatime shared:5 - proc proc rw\n"
    "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n"
    "30 27 0:5 / /dev rw,nosuid - devtmpfs devtmpfs rw\n"
)
SHARED = "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n30 27 0:5 / /dev rw - devtmpfs udev rw\n"


def test_the_root_mounts_propagation() -> None:
    assert not hostsetup.root_is_shared(PRIVATE)  # /proc's shared:5 is not the root's
    assert hostsetup.root_is_shared(SHARED)
    assert not hostsetup.root_is_shared("27 1 254:0 / / rw master:3 - ext4 /dev/vda rw\n")  # slave only
    # a chroot's / mounted over the first one: the last line for / is the one on top
    assert not hostsetup.root_is_shared(SHARED + "40 27 254:1 / / rw - ext4 /dev/vdb rw\n")
    assert hostsetup.root_is_shared("")  # nothing listed for /: nothing to change


def test_share_root_mount_runs_mount_only_where_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(hostsetup.subprocess, "run", lambda argv, **kw: ran.append(argv))
    info = tmp_path / "mountinfo"
    info.write_text(SHARED)
    assert hostsetup.share_root_mount(info) is False and ran == []
    info.write_text(PRIVATE)
    assert hostsetup.share_root_mount(info) is True
    assert ran == [["mount", "--make-rshared", "/"]]
