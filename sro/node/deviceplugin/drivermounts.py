"""Find the driver's libraries and binaries a container gets with the `mounts` strategy.

Why here and once: Allocate must be fast and pure, so the globbing happens at start (and on a
config reload). The plugin may see the driver root at another path than the host does (a
container mounting the host's driver root at /driver-root), so files are found under `seen_root`
and named in mounts by their host path under the recipe's `driver_root`; containers get them at
the host path, the layout runtime injection uses too. (Runtime injection finds the driver's files
for the hook itself, stdlib only: `sro.node.runtime.driverfiles`.)
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from sro.api.recipes import Recipe
from sro.node.deviceplugin.allocation import MountSpec

LIB_DIRS = ("lib", "lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib")
BIN_DIRS = ("bin", "usr/bin", "usr/local/bin")


def find(recipe: Recipe, seen_root: Path, capabilities: tuple[str, ...] | None = None) -> list[MountSpec]:
    caps = capabilities if capabilities is not None else recipe.default_capabilities
    host_root = PurePosixPath(recipe.driver_root)
    found: dict[str, MountSpec] = {}

    def add(path: Path) -> None:
        rel = path.relative_to(seen_root)
        host = str(host_root / rel)
        found.setdefault(host, MountSpec(container_path=host, host_path=host, read_only=True))

    for cap in caps:
        for pattern in recipe.libraries.get(cap, ()):
            for d in LIB_DIRS:
                for path in sorted((seen_root / d).glob(pattern)):
                    if path.is_file():
                        add(path)
        for name in recipe.binaries.get(cap, ()):
            for d in BIN_DIRS:
                path = seen_root / d / name
                if path.is_file():
                    add(path)
                    break
    return list(found.values())
