"""Which containerd the local cluster runs, from `containerd --version`: what its config may ask for.

Why it matters: containerd reads CDI specs (`enable_cdi`, `cdi_spec_dirs` of its CRI plugin) from
1.7 on. Debian 12 ships 1.6.20, `scripts/setup-host` installs Debian 13's 1.7.24 where it can. 1.6
would start with the CDI keys in its config (it silently drops keys it does not know, checked with
`containerd config dump` and a run of 1.6.20), but the config `up` writes says what the runtime does:
the keys are there exactly when the installed binary reads them.

Parsing is pure; `installed` runs the binary, once per binary file (its inode and mtime: a package
upgrade replaces the file, and the next call asks the new one).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

CONTAINERD = Path("/usr/bin/containerd")
CDI_SINCE = (1, 7)  # containerd 1.7.0: the CRI plugin's enable_cdi / cdi_spec_dirs

# "containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1" (Debian),
# "containerd containerd.io 1.7.24 88bf19b..." or "... v1.7.24 <commit>" (upstream builds).
_VERSION = re.compile(r"^containerd\s+\S+\s+v?(\d+)\.(\d+)(?:\.(\d+))?(\S*)")


@dataclass(frozen=True)
class ContainerdVersion:
    major: int
    minor: int
    patch: int
    text: str  # the version word as printed, e.g. "1.7.24~ds1"

    @property
    def reads_cdi(self) -> bool:
        return (self.major, self.minor) >= CDI_SINCE

    def __str__(self) -> str:
        return self.text


def parse(output: str) -> ContainerdVersion | None:
    """The version in `containerd --version`'s output; None when it says none."""
    m = _VERSION.match(output.strip())
    if m is None:
        return None
    major, minor, patch, rest = m.groups()
    text = f"{major}.{minor}" + (f".{patch}" if patch is not None else "") + rest
    return ContainerdVersion(int(major), int(minor), int(patch or 0), text)


_cache: dict[tuple[str, int, int], ContainerdVersion | None] = {}


def installed(binary: Path = CONTAINERD) -> ContainerdVersion | None:
    """The version of the containerd binary at `binary`; None when it is missing or says none."""
    try:
        st = os.stat(binary)
    except OSError:
        return None
    key = (str(binary), st.st_ino, st.st_mtime_ns)
    if key not in _cache:
        try:
            out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
            _cache[key] = parse(out.stdout) if out.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            _cache[key] = None
    return _cache[key]
