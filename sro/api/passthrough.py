"""The pass-through launcher: what stands at RUNTIME_LAUNCHER while no recipe is installed.

Why: containerd's runtime handler `sro` names RUNTIME_LAUNCHER as its runc BinaryName for good, and
calls it for `state`, `kill` and `delete` of every container started through the handler, long after
`create`. With no binary there, those containers could never be stopped (pods hang Terminating) and
new ones fail while the runtime state's pod restarts. So `sro runtime uninstall` replaces the full
launcher with this one instead of removing it, and `sro local up` writes it where there is none; it
only execs runc. Here in `api` (text only, no I/O) because both the node side and `sro.local` write it.
"""

from __future__ import annotations

import shlex
from typing import Final

# The first lines of every pass-through launcher: how `uninstall --purge` knows the file is ours.
HEADER: Final = """#!/bin/sh
# sro's pass-through launcher for the containerd runtime handler "sro" (sro.api.passthrough).
"""

_TEMPLATE = (
    HEADER
    + """# A placeholder, left so that containers started through the handler can still be stopped and
# deleted while no recipe is installed here: it only runs runc. `sro runtime install` replaces it;
# `sro runtime uninstall --purge` removes it (only once no container of the handler remains).
exec {runc} "$@"
"""
)


def render(runc: str) -> str:
    """The launcher's text: exec `runc` (an absolute path on the host) with every argument."""
    if not runc.startswith("/"):
        raise ValueError(f"runc must be an absolute path, got {runc!r}")
    return _TEMPLATE.format(runc=shlex.quote(runc))


def is_passthrough(data: bytes) -> bool:
    """Whether `data` (a launcher's bytes) is a pass-through launcher some `render` wrote."""
    return data.startswith(HEADER.encode()) and len(data) < 4096
