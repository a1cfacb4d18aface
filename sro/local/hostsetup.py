"""What `sro local up` sets on this machine besides its daemons: IP forwarding for pod traffic, and a
launcher where containerd's `sro` runtime handler expects its runc.

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
