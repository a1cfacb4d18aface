"""The recipe's device-listing tool (`simgpu-smi`, `nvidia-smi`): finding it, running it, reading it.

Why both checks use it: the tool is what users and support run first, and it talks to the driver by
another path than the device backend (a shell script over the simulated driver's files; NVML through
a different binary). Its `-L` listing agrees with the backend's inventory only when the driver works.
Both tools print `GPU <i>: <product> (UUID: <uuid>)` per device (nvidia-smi adds indented MIG lines).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sro.api.builtin_recipes import SIMNVML_STATE_DIR
from sro.api.recipes import BUILTIN, Recipe

BIN_DIRS = ("bin", "usr/bin", "sbin", "usr/sbin")
TIMEOUT_S = 60.0
_GPU_LINE = re.compile(r"^GPU (\d+): (.*?) \(UUID: ([^)\s]+)\)")
# The simulated NVIDIA driver's NVML (native/simnvml) lists the GPUs whose /dev/nvidia<minor> it
# sees, under this dev root when set: a check reading the node's /dev elsewhere (--dev-root) sets it.
SIMNVML_DEV_ROOT_ENV = "SRO_SIMNVML_DEV_ROOT"
NO_CUDA = "no CUDA on a simulated driver"


def simulated_nvidia(root: Path) -> bool:
    """The driver under `root` (a driver root, or `/` in a container the hook gave its files) is sro's
    simulated NVIDIA driver: its NVML state file is there, which no real driver has."""
    return (root / SIMNVML_STATE_DIR / "state").is_file()


@dataclass(frozen=True)
class Listed:
    index: int
    product: str
    uuid: str


@dataclass(frozen=True)
class ToolRun:
    """One run of a command; `rc` None means it could not be started (`error` says why)."""

    argv: tuple[str, ...]
    rc: int | None
    stdout: str = ""
    stderr: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def command(self) -> str:
        return " ".join(self.argv)

    def failure(self) -> str:
        """Why it did not succeed, in one line (with the last line it printed)."""
        if self.rc is None:
            return self.error
        said = (self.stderr.strip() or self.stdout.strip()).splitlines()
        tail = f": {said[-1][:300]}" if said else ""
        return f"exit status {self.rc}{tail}" if self.rc >= 0 else f"killed by signal {-self.rc}{tail}"


def builtin(recipe: Recipe) -> bool:
    """A built-in GPU recipe (by name: no custom recipe may take one; nvidia-gpu on the simulated
    driver has another driver root): only these have a `-L` listing tool, NVML and CUDA."""
    return recipe.name in BUILTIN


def tool_name(recipe: Recipe) -> str | None:
    """The recipe's listing tool: the first binary of its `utility` group (or of any group); a custom
    recipe has none (its `validation.commands` are run instead: `recipechecks`)."""
    if not builtin(recipe):
        return None
    for name in (*recipe.binaries.get("utility", ()), *(b for g in recipe.binaries.values() for b in g)):
        return name
    return None


def parse_listing(text: str) -> tuple[Listed, ...]:
    """Devices of a `-L` listing (MIG lines and anything else skipped)."""
    out = []
    for line in text.splitlines():
        m = _GPU_LINE.match(line)
        if m:
            out.append(Listed(int(m.group(1)), m.group(2), m.group(3)))
    return tuple(out)


def find_in_root(root: Path, name: str) -> Path | None:
    """`name` in the usual binary folders under a driver root."""
    for d in BIN_DIRS:
        path = root / d / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def searched(root: Path, name: str) -> str:
    return ", ".join(str(root / d / name) for d in BIN_DIRS)


def run(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S) -> ToolRun:
    """Run a command to its end (killed after `timeout`); never raises for the command's failures."""
    try:
        done = subprocess.run(
            argv,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        return ToolRun(tuple(argv), None, error=f"{argv[0]}: not found")
    except PermissionError as e:
        return ToolRun(tuple(argv), None, error=f"{argv[0]}: cannot execute ({e.strerror})")
    except subprocess.TimeoutExpired:
        return ToolRun(tuple(argv), None, error=f"{' '.join(argv)}: no answer within {timeout:.0f} s")
    except OSError as e:
        return ToolRun(tuple(argv), None, error=f"{argv[0]}: {e.strerror or e}")
    return ToolRun(tuple(argv), done.returncode, done.stdout, done.stderr)
