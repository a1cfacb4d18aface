"""What `sro local up` sets on this machine besides its daemons: IP forwarding for pod traffic, a
launcher where containerd's `sro` runtime handler expects its runc, and a shared root mount (mount
propagation, as on every systemd node).

Why apart from `cluster.py`: these write the host's own files (/proc/sys, the launcher's path),
once per boot, whatever daemons run; `cluster.py` orders the daemons.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sro.api import passthrough
from sro.api.names import RUNTIME_LAUNCHER

RUNC = "/usr/sbin/runc"


def ensure_launcher(path: Path = Path(RUNTIME_LAUNCHER), runc: str = RUNC) -> bool:
    """Write the pass-through launcher at `path` unless something is there; whether it wrote.

    containerd's handler `sro` names `path` as its runc binary: with none there, no pod of the
    RuntimeClass could start, stop or be deleted until `sro runtime install` writes the real one.
    Linked into place, so a launcher an installer writes meanwhile is never overwritten."""
    if os.path.lexists(path):
        return False
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(passthrough.render(runc))
        tmp.chmod(0o755)
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def enable_forwarding() -> None:
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    # Bridged pod traffic through iptables (Service NAT between pods); absent module is tolerated:
    # pod -> Service traffic is routed via the bridge's gateway and does not need it.
    subprocess.run(["modprobe", "br_netfilter"], capture_output=True)
    nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
    if nf.exists():
        nf.write_text("1\n")


def root_is_shared(mountinfo: str) -> bool:
    """Whether the mount at / (the last one listed: it is on top) is shared, in /proc/self/mountinfo's
    text: `shared:N` among the optional fields between the mount options and the `-`."""
    shared = True  # no line for /: nothing to change
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[4] == "/" and "-" in fields[6:]:
            shared = any(f.startswith("shared:") for f in fields[6 : fields.index("-", 6)])
    return shared


def share_root_mount(mountinfo: Path = Path("/proc/self/mountinfo")) -> bool:
    """`mount --make-rshared /` unless / is shared already; whether it did.

    Why: the kubelet's mount propagation (`HostToContainer`: discovery's view of /run/nvidia, where a
    containerized driver mounts its root; `Bidirectional`: that driver's own mount) needs the host
    path on a shared mount, or containerd refuses the container ("path "/run/nvidia" is mounted on
    "/" but it is not a shared or slave mount"). systemd makes / shared on every node; a machine
    without it (this one, a container, kind's node image, which does the same at start) has it
    private. Idempotent and cheap: also run for a cluster that is already up."""
    if root_is_shared(mountinfo.read_text()):
        return False
    subprocess.run(["mount", "--make-rshared", "/"], check=True, capture_output=True)
    return True
