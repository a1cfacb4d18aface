"""Find a recipe's driver files on the host: device nodes, libraries, binaries, directories, firmware.

Why its own module: this is the only place the runtime code reads the host's driver, and it takes the
driver root and the dev root as parameters (the real `/` and the recipe's root on a node; temporary
trees in tests), so nothing here ever reaches for a fixed host path by itself.

Device nodes: `dev_root` stands for the container's /dev (default /dev; the simulated driver's
`--dev-root` means the same). Container paths of files are host paths with the driver root stripped (NVIDIA's toolkit does the same for a
driver container's root): `<root>/lib/libsimgpu.so.1` is `/lib/libsimgpu.so.1` inside.
Library matches that are symlinks to another match collapse into the real file; the soname links
are made again inside the container by ldconfig. A file (library, binary, directory, firmware) whose
real path is not under the driver root's own real path is never offered: a custom recipe names file
globs, and a symlink in its driver root must not carry a host file (/etc/shadow) into a container.

Companion nodes: a device may have more nodes than its primary one (an FPGA card's render node,
`/dev/dri/renderD{index+128}`); they follow their primary node in `find_devices`, with its device id.
"""

from __future__ import annotations

import posix
import stat

from sro.api.builtin_recipes import DRIVER_LIB_DIRS
from sro.node.runtime.hookrecipes import SIMULATED_DEVICE_LIST
from sro.node.runtime.inventory import DeviceNode, DriverInventory, FileMount
from sro.node.runtime.leanpath import basename, dirname, isdir, isfile, join, realpath, relpath
from sro.node.runtime.namematch import filter_names, glob_in

TYPE_CHECKING = False  # no typing/re/fnmatch/glob at run time: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Iterable

    from sro.node.runtime.hookrecipes import AnyRecipe as Recipe

LIB_DIRS = DRIVER_LIB_DIRS  # shared with driver validation (sro.node.validation.recipechecks)
BIN_DIRS = ("usr/bin", "bin", "usr/sbin", "sbin")


def dev_path(dev_root: str, node: str) -> str:
    """Host path of container node `/dev/x`: `dev_root` stands for /dev (as in `sro driver simulate`)."""
    if node != "/dev" and not node.startswith("/dev/"):
        raise ValueError(f"device node {node!r} is not under /dev")
    return dev_root.rstrip("/") + node[len("/dev") :]


def container_path(driver_root: str, host_path: str) -> str:
    """`host_path` as the container sees it: relative to the driver root, made absolute."""
    rel = relpath(host_path, driver_root)
    if rel == ".." or rel.startswith("../"):
        raise ValueError(f"{host_path} is not under the driver root {driver_root}")
    return "/" + rel if rel != "." else "/"


def _char_node(host_path: str, path: str, device_id: str = "", companion: bool = False) -> DeviceNode | None:
    try:
        st = posix.stat(host_path)
    except FileNotFoundError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return DeviceNode(
        path=path,
        host_path=host_path,
        major=posix.major(st.st_rdev),
        minor=posix.minor(st.st_rdev),
        file_mode=stat.S_IMODE(st.st_mode),
        device_id=device_id,
        companion=companion,
    )


def _pattern_parts(pattern: str) -> tuple[str, str]:
    """(prefix, suffix) around the one `{index}`/`{minor}` of a device node pattern's file name."""
    name = basename(pattern)
    parts = name.replace("{minor}", "{index}").split("{index}")
    if len(parts) != 2:
        raise ValueError(f"device node pattern {pattern!r} must hold exactly one {{index}} or {{minor}}")
    return parts[0], parts[1]


def _node_number(name: str, prefix: str, suffix: str) -> int | None:
    """The decimal number in `name` between `prefix` and `suffix` (ASCII digits only), else None."""
    if len(name) <= len(prefix) + len(suffix) or not name.startswith(prefix) or not name.endswith(suffix):
        return None
    digits = name[len(prefix) : len(name) - len(suffix)]
    if not digits.isascii() or not digits.isdigit():
        return None
    return int(digits)


def companion_path(pattern: str, number: int) -> str:
    """A companion node pattern's `{index}` or `{index+N}` filled from its primary node's number."""
    start = pattern.find("{index")
    end = pattern.find("}", start)
    offset = pattern[start + 6 : end] if start >= 0 and end >= 0 else "?"
    if offset and (offset[0] != "+" or not offset[1:].isascii() or not offset[1:].isdigit()):
        raise ValueError(f"companion node pattern {pattern!r} must hold one {{index}} or {{index+N}}")
    return pattern[:start] + str(number + int(offset[1:] or 0)) + pattern[end + 1 :]


def find_devices(recipe: Recipe, dev_root: str) -> tuple[DeviceNode, ...]:
    """Per-device nodes matching the recipe's pattern, in index order, each followed by those of its
    companion nodes that exist (same device id); a companion missing on the host is left out."""
    prefix, suffix = _pattern_parts(recipe.device_node)
    container_dir = dirname(recipe.device_node)
    host_dir = dev_path(dev_root, container_dir)
    try:
        names = posix.listdir(host_dir)
    except FileNotFoundError:
        return ()
    found: list[tuple[int, DeviceNode]] = []
    for name in names:
        number = _node_number(name, prefix, suffix)
        if number is None:
            continue
        node = _char_node(join(host_dir, name), f"{container_dir}/{name}", str(number))
        if node is not None:
            found.append((number, node))
    out: list[DeviceNode] = []
    for number, node in sorted(found, key=lambda t: t[0]):
        out.append(node)
        for pattern in recipe.companion_nodes:
            path = companion_path(pattern, number)
            companion = _char_node(dev_path(dev_root, path), path, node.device_id, companion=True)
            if companion is not None:
                out.append(companion)
    return tuple(out)


def find_control_nodes(recipe: Recipe, dev_root: str) -> tuple[DeviceNode, ...]:
    nodes = (_char_node(dev_path(dev_root, p), p) for p in recipe.control_nodes)
    return tuple(n for n in nodes if n is not None)


def _listdir(path: str) -> list[str]:
    try:
        return sorted(posix.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _inside(real: str, top: str) -> bool:
    """Is the real path `real` the driver root's real path `top` or under it (no symlink out of it)?"""
    return real == top or real.startswith(top.rstrip("/") + "/")


def find_libraries(
    driver_root: str, patterns: Iterable[str], seen: set[str], listings: dict[str, list[str]] | None = None
) -> tuple[FileMount, ...]:
    """Regular files matching `patterns` in the usual library folders; symlinks collapse to their file
    (one that leads out of the driver root is left out). `listings` keeps each folder's names between
    the calls of one discovery (one per capability), so each folder is listed once."""
    listings = {} if listings is None else listings
    out: list[FileMount] = []
    top = realpath(driver_root)
    for rel_dir in LIB_DIRS:
        host_dir = join(driver_root, rel_dir)
        names = listings.get(host_dir)
        if names is None:
            names = listings[host_dir] = _listdir(host_dir)
        for pattern in patterns:
            for name in filter_names(names, pattern):
                real = realpath(join(host_dir, name))
                if real in seen or not isfile(real) or not _inside(real, top):
                    continue
                seen.add(real)
                # Mount the real file under its own name, in the folder where the match was found.
                where = join(host_dir, basename(real))
                if realpath(where) != real:
                    where = join(host_dir, name)
                out.append(FileMount(real, container_path(driver_root, where)))
    return tuple(out)


def find_binaries(driver_root: str, names: Iterable[str], seen: set[str]) -> tuple[FileMount, ...]:
    out: list[FileMount] = []
    top = realpath(driver_root)
    for name in names:
        for rel_dir in BIN_DIRS:
            path = join(driver_root, rel_dir, name)
            real = realpath(path)
            if isfile(real) and real not in seen and _inside(real, top):
                seen.add(real)
                out.append(FileMount(real, container_path(driver_root, path)))
                break
    return tuple(out)


def find_directories(driver_root: str, rel_dirs: Iterable[str]) -> tuple[FileMount, ...]:
    out: list[FileMount] = []
    top = realpath(driver_root)
    for rel in rel_dirs:
        path = join(driver_root, rel)
        real = realpath(path)
        if isdir(real) and _inside(real, top):
            out.append(FileMount(real, container_path(driver_root, path), "dir"))
    return tuple(out)


def find_firmware(driver_root: str, patterns: Iterable[str]) -> tuple[FileMount, ...]:
    out: list[FileMount] = []
    top = realpath(driver_root)
    for pattern in patterns:
        for rel in sorted(glob_in(driver_root, pattern)):
            path = join(driver_root, rel)
            real = realpath(path)
            if isfile(real) and _inside(real, top):
                out.append(FileMount(real, container_path(driver_root, path)))
    return tuple(out)


def device_aliases(recipe: Recipe, driver_root: str) -> dict[str, str]:
    """UUID -> index from the simulated driver's device list (`devices.json`), if it has one.

    The device plugin hands out UUIDs; users and this hook name devices by index. Read as plain
    JSON here (not through sro.devices) to keep the hook's import graph small.
    """
    if not recipe.simulated:
        return {}
    from sro.node.runtime.leanjson import loads

    try:
        with open(join(driver_root, SIMULATED_DEVICE_LIST), "rb") as f:
            doc = loads(f.read(4 << 20))
        return {str(d["uuid"]): str(int(d["index"])) for d in doc["devices"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def discover_devices(
    recipe: Recipe, driver_root: str | None = None, dev_root: str = "/dev"
) -> DriverInventory:
    """Only the recipe's device and control nodes (and device aliases): what the device cgroup rules
    and the refusal of an unknown device id need, without globbing the driver's files."""
    root = driver_root if driver_root is not None else recipe.driver_root
    return DriverInventory(
        recipe=recipe.name,
        devices=find_devices(recipe, dev_root),
        control_nodes=find_control_nodes(recipe, dev_root),
        aliases=device_aliases(recipe, root),
    )


def discover(recipe: Recipe, driver_root: str | None = None, dev_root: str = "/dev") -> DriverInventory:
    """Everything the recipe's driver offers on this host (empty groups where files are missing)."""
    root = driver_root if driver_root is not None else recipe.driver_root
    seen_libs: set[str] = set()
    listings: dict[str, list[str]] = {}
    seen_bins: set[str] = set()
    return DriverInventory(
        recipe=recipe.name,
        devices=find_devices(recipe, dev_root),
        control_nodes=find_control_nodes(recipe, dev_root),
        libraries={
            cap: find_libraries(root, pats, seen_libs, listings) for cap, pats in recipe.libraries.items()
        },
        binaries={cap: find_binaries(root, names, seen_bins) for cap, names in recipe.binaries.items()},
        directories={cap: find_directories(root, dirs) for cap, dirs in recipe.directories.items()},
        firmware=find_firmware(root, recipe.firmware),
        aliases=device_aliases(recipe, root),
    )
