"""The host's Python interpreter, which runs the OCI hook and the runc wrapper: is it there, which
version its files say it is (without running it), and does it run the hook's self-check.

Why apart: the hook runs with the host's python3, not sro's; an interpreter that cannot run it would
fail container starts, so the installer checks before writing anything that names it.
"""

from __future__ import annotations

import os
import re
import subprocess

from sro.node.runtime.hostpaths import on_host
from sro.node.runtime.rootmanifest import HOOKS_D_NAME, InstallError, Settings

MIN_HOOK_PYTHON = (3, 11)


def check_python(settings: Settings, host_root: str) -> str:
    """Where the host's interpreter is as we see it; InstallError if the host has none there."""
    seen = on_host(host_root, settings.python)
    where = "" if host_root == "/" else f" (looked at {seen}, the host's / being {host_root})"
    if not os.path.isfile(seen) or not os.stat(seen).st_mode & 0o111:
        raise InstallError(
            f"this node has no Python interpreter at {settings.python}{where}: the OCI hook and the "
            "runc wrapper run with the host's python3 (3.11 or later); install it (Debian/Ubuntu: "
            "apt-get install python3-minimal) or name another with --python"
        )
    return seen


_PYTHON_NAME = re.compile(r"python(\d+)\.(\d+)$")
_PYTHON_LIB = re.compile(r"python(\d+)\.(\d+)")


def host_python_version(host_root: str, python: str) -> tuple[int, int] | None:
    """The version of the host's interpreter read from its files, without running it (it may be
    another distribution's, linked against another libc): the name it resolves to (python3 ->
    python3.11), else the one python3.N library directory next to it; None when that does not say."""
    seen = on_host(host_root, python)
    if not os.path.isfile(seen):
        return None
    m = _PYTHON_NAME.search(os.path.basename(seen))
    if m:
        return int(m.group(1)), int(m.group(2))
    prefix = os.path.dirname(os.path.dirname(seen))
    found = set()
    for lib in ("lib", "lib64"):
        try:
            names = os.listdir(os.path.join(prefix, lib))
        except OSError:
            continue
        for name in names:
            m = _PYTHON_LIB.fullmatch(name)
            if m and os.path.isfile(os.path.join(prefix, lib, name, "os.py")):
                found.add((int(m.group(1)), int(m.group(2))))
    return found.pop() if len(found) == 1 else None


def check_live_hook_python(settings: Settings, host_root: str) -> None:
    """Before a hooks.d entry goes where CRI-O runs it for every container: the interpreter must be
    known to run the hook (InstallError otherwise, with what to do)."""
    version = host_python_version(host_root, settings.python)
    need = ".".join(map(str, MIN_HOOK_PYTHON))
    where = f"{settings.crio_hooks_dir}/{HOOKS_D_NAME}"
    if version is None:
        raise InstallError(
            f"cannot tell the version of {settings.python} from its files, and {where} would run it for "
            f"every container on this node (it needs {need} or later): nothing was written; name an "
            "interpreter whose file name says its version (e.g. --python=/usr/bin/python3.11)"
        )
    if version < MIN_HOOK_PYTHON:
        raise InstallError(
            f"{settings.python} is Python {version[0]}.{version[1]}; the OCI hook needs {need} or later, "
            f"and {where} would run it for every container on this node: nothing was written. RHCOS "
            f"ships none ({version[0]}.{version[1]} at most): layer python{need} onto the node and name it "
            f"with --python (the SpecialResource's spec.runtime.args), or run without --crio-hooks-dir"
        )


def try_python(python: str, archive: str) -> str:
    """Run the zipapp's self-check with `python` (only where the host's programs run here)."""
    argv = [python, "-I", "-S", archive, "check"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/", env={})
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InstallError(f"{python} could not run the hook's self-check: {e}") from None
    if out.returncode != 0 or not out.stdout.startswith("ok "):
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        raise InstallError(f"{python} cannot run the hook (needs 3.11 or later): {' / '.join(tail)}")
    return out.stdout.split()[1]  # its cache tag, e.g. cpython-311
