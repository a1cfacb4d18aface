"""Where the node's filesystems are: an injected HostRoot, never a global path prefix.

Every reader of the node takes a HostRoot. On the node itself it is `HostRoot.at("/")`; in the
discovery DaemonSet the host's trees are mounted under `/host` (`HostRoot.at("/host")`); in tests it
is a fake tree of real files under `tests/hosts/<scenario>/`. Each well-known tree (sys, proc, dev,
etc, boot, lib/modules, run, var/lib) can also be pointed elsewhere on its own, the way NFD mounts
`/host-sys`, `/host-etc`, ... separately.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

# NFD's local feature files directory (relative to etc); existing feature files keep working.
FEATURES_D = Path("kubernetes/node-feature-discovery/features.d")


@dataclass(frozen=True)
class HostRoot:
    """The node's filesystem trees; `path("sys", "bus/pci")` joins inside one of them."""

    sys: Path
    proc: Path
    dev: Path
    etc: Path
    boot: Path
    lib_modules: Path
    usr_lib: Path
    run: Path
    var_lib: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> HostRoot:
        """All trees under one directory, as on the node (`/`) or in a container (`/host`)."""
        base = Path(root)
        return cls(
            sys=base / "sys",
            proc=base / "proc",
            dev=base / "dev",
            etc=base / "etc",
            boot=base / "boot",
            lib_modules=base / "lib" / "modules",
            usr_lib=base / "usr" / "lib",
            run=base / "run",
            var_lib=base / "var" / "lib",
        )

    def with_tree(self, **trees: str | os.PathLike[str]) -> HostRoot:
        """A copy with some trees moved, e.g. `with_tree(etc="/host-etc")`."""
        return replace(self, **{name: Path(p) for name, p in trees.items()})

    @property
    def features_d(self) -> Path:
        return self.etc / FEATURES_D

    def trees(self) -> dict[str, Path]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}
