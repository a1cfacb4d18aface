"""The host's paths as this process sees them, and the driver's files named as the host names them.

Why: the runtime installer may run in a container that sees the host's `/` at `host_root`; the host
resolves its own symlinks (an absolute link starts again at the host's `/`, never at ours), and what
it writes for the host (CDI specs) must name host paths, not ours.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from sro.api.recipes import Recipe
from sro.node.runtime import driverfiles
from sro.node.runtime.inventory import DeviceNode, DriverInventory, FileMount
from sro.node.runtime.rootmanifest import InstallError


def on_host(host_root: str, path: str, max_links: int = 40) -> str:
    """`path` of the host as this process sees it (under `host_root`), the host's symlinks followed
    as the host would: an absolute link target starts again at `host_root`, never at our `/`."""
    todo = [p for p in path.split("/") if p and p != "."]
    done: list[str] = []
    links = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(host_root, *done, part)
        if os.path.islink(here):
            links += 1
            if links > max_links:
                raise OSError(f"too many levels of symbolic links in {path}")
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            todo = [p for p in target.split("/") if p and p != "."] + todo
            continue
        done.append(part)
    return os.path.join(host_root, *done)


def _strip(path: str, host_root: str) -> str:
    if host_root == "/":
        return path
    rel = os.path.relpath(path, host_root)
    if rel == ".." or rel.startswith("../"):
        raise InstallError(f"{path} resolves outside the host's / ({host_root}): an absolute link?")
    return "/" + rel if rel != "." else "/"


def _host_mount(m: FileMount, host_root: str) -> FileMount:
    return FileMount(_strip(m.host_path, host_root), m.container_path, m.kind)


def _host_node(d: DeviceNode, host_root: str) -> DeviceNode:
    host_path = _strip(d.host_path, host_root)
    return DeviceNode(d.path, host_path, d.major, d.minor, d.file_mode, d.device_id, d.companion)


def host_inventory(recipe: Recipe, driver_root: str | None, dev_root: str, host_root: str) -> DriverInventory:
    """The recipe's driver files found under `host_root`, named as the host names them."""
    root = driver_root or recipe.driver_root
    inv = driverfiles.discover(recipe, on_host(host_root, root), on_host(host_root, dev_root))

    def groups(g: Mapping[str, tuple[FileMount, ...]]) -> dict[str, tuple[FileMount, ...]]:
        return {cap: tuple(_host_mount(m, host_root) for m in ms) for cap, ms in g.items()}

    return DriverInventory(
        recipe=inv.recipe,
        devices=tuple(_host_node(d, host_root) for d in inv.devices),
        control_nodes=tuple(_host_node(d, host_root) for d in inv.control_nodes),
        libraries=groups(inv.libraries),
        binaries=groups(inv.binaries),
        directories=groups(inv.directories),
        firmware=tuple(_host_mount(m, host_root) for m in inv.firmware),
        aliases=dict(inv.aliases),
    )
