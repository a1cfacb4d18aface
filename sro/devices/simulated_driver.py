"""The simulated GPU driver: real device nodes and real driver files on the host, no hardware.

Why real: containers must really receive device nodes and driver files, so the device plugin, the
OCI hook / CDI injection, the device cgroup and the scheduler are all exercised for real. The nodes
are character devices with a major number no kernel driver owns (a LOCAL/EXPERIMENTAL major not in
/proc/devices): opening one gives ENXIO where the device cgroup allows it and EPERM where it denies
it — a clean, GPU-free check that a container got exactly its devices. The driver root gets the
device list and fault state (see `driverstate`), two ELF shared libraries that ldconfig and dlopen
accept, and a busybox-compatible `simgpu-smi`. Every path comes from the `simulated-gpu` recipe and
the `sro.api.recipes` constants; the roots are parameters so tests use a temp dir.

A custom simulated recipe's device class (`simclass`: an FPGA, a SmartNIC's VFs) is installed the
same way: its primary, companion and control nodes on distinct minors, the class's libraries and
binaries, and a list of the files it made so that `remove` takes exactly those. Simulated majors
are in no kernel list, so the major is picked with the char nodes already under the dev root in
view (under a lock on it): two simulated drivers on one host never share one, as the runtime maps
a container's (major, minor) back to a device.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shlex
import shutil
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from sro.api.recipes import (
    SIMULATED_BIN_DIR,
    SIMULATED_DEVICE_LIST,
    SIMULATED_FAULTS,
    SIMULATED_GPU,
    SIMULATED_LIB_DIR,
    Recipe,
)
from sro.devices import driverstate, elf, simclass, simclass_script
from sro.devices.model import Inventory

log = logging.getLogger(__name__)

# Linux's devices.txt reserves char majors 60-63, 120-127 and 240-254 for local/experimental use;
# 234-254 is also where dynamic majors are handed out, so the driver takes one of 120-127.
CANDIDATE_MAJORS = tuple(range(120, 128))
CONTROL_MINOR = 255
LIBRARIES = {"libsimgpu.so.1": "simgpu", "libsimgpu-ml.so.1": "simgpu_ml"}
SMI = "simgpu-smi"


class SimulatedDriverError(RuntimeError):
    """The simulated driver cannot be installed or removed; the message says why and where."""


@dataclass(frozen=True)
class Installed:
    driver_root: Path
    major: int
    device_nodes: tuple[Path, ...]  # per-device nodes then control nodes, as created under dev_root
    libraries: tuple[Path, ...]
    binaries: tuple[Path, ...]
    inventory: Inventory


def used_majors(proc_devices_text: str) -> set[int]:
    """Character majors in use, from the text of /proc/devices."""
    used: set[int] = set()
    for line in proc_devices_text.splitlines():
        if line.strip().startswith("Block devices"):
            break
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            used.add(int(parts[0]))
    return used


def pick_major(proc_devices_text: str, previous: int | None = None, taken: Iterable[int] = ()) -> int:
    """A free LOCAL/EXPERIMENTAL major: not in /proc/devices, nor `taken` (the majors of char nodes
    other simulated drivers made: theirs are in no kernel list); `previous` when it is still free."""
    used = used_majors(proc_devices_text) | set(taken)
    if previous is not None and previous not in used:
        return previous
    for major in CANDIDATE_MAJORS:
        if major not in used:
            return major
    raise SimulatedDriverError(
        f"no free character major among {CANDIDATE_MAJORS} (in /proc/devices or used by device nodes "
        "of other simulated drivers)"
    )


def node_majors(dev_root: Path, exclude: Iterable[Path] = ()) -> set[int]:
    """The majors of the character nodes under `dev_root` (symlinks not followed), except the nodes
    at `exclude` (this driver's own). Two simulated drivers on one host must never share a major:
    the runtime maps a container's (major, minor) back to a device."""
    skip = {str(p) for p in exclude}
    majors: set[int] = set()
    stack = [str(dev_root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) and entry.path not in skip:
                majors.add(os.major(st.st_rdev))
    return majors


@contextlib.contextmanager
def _dev_lock(dev_root: Path) -> Iterator[None]:
    """Held while a driver picks its major and makes its nodes, so two simulated drivers installing
    at once on one host cannot both take the same free major (an flock on the directory itself)."""
    dev_root.mkdir(parents=True, exist_ok=True)
    fd = os.open(dev_root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _host_path(dev_root: Path, node: str) -> Path:
    """`node` is the path as containers and the plugin see it (/dev/x); dev_root replaces /dev."""
    rel = Path(node).relative_to("/dev")
    return dev_root / rel


def _mknod(path: Path, major: int, minor: int, fresh: bool = False) -> None:
    """A char node `major:minor` at `path`; an existing right one is kept unless `fresh`."""
    want = os.makedev(major, minor)
    try:
        st = path.lstat()
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == want and not fresh:
            os.chmod(path, 0o666)
            return
        path.unlink()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, want)
    except PermissionError as e:
        raise SimulatedDriverError(f"{path}: creating a device node needs root (CAP_MKNOD): {e}") from e
    os.chmod(path, 0o666)  # mknod applies the umask


def smi_script(inv: Inventory, recipe: Recipe, driver_root: str) -> str:
    """A busybox-sh `simgpu-smi` that lists the devices (filtered by the visible-devices env var).

    The driver version is written into the script (its header line, and `--version` in
    nvidia-smi's format): a container gets this file bind-mounted from the driver root, so what it
    prints is the version of the driver that was installed when the container started, which is
    what a workload running across an upgrade has to be able to tell.
    """
    env = recipe.visible_devices_env
    rows = "\n".join(
        f"show {d.index} {shlex.quote(d.uuid)} {d.memory_mib} {shlex.quote(d.pci_bus_id)} {shlex.quote(d.product)}"
        for d in inv.devices
    )
    return f"""#!/bin/sh
# simgpu-smi: device listing of the sro SIMULATED GPU driver {inv.driver_version} (not real hardware).
{simclass_script.locate("SIMGPU_DRIVER_ROOT", driver_root, env)}if [ "$1" = "--version" ]; then
  echo "simgpu-smi version : {inv.driver_version} (SIMULATED)"
  echo "DRIVER version     : {inv.driver_version}"
  exit 0
fi
list=0
[ "$1" = "-L" ] && list=1
[ "$list" = 1 ] || echo "simgpu-smi: SIMULATED devices, driver {inv.driver_version}"
[ "$list" = 1 ] || printf '%-4s %-40s %-9s %-13s %-6s %s\\n' IDX UUID MEM_MIB PCI_BUS_ID STATE PRODUCT
show() {{
  idx=$1; uuid=$2; mem=$3; bus=$4; product=$5
{simclass_script.SHOW_VISIBLE_STATE}  if [ "$list" = 1 ]; then
    echo "GPU $idx: $product (UUID: $uuid) [simulated]"
  else
    printf '%-4s %-40s %-9s %-13s %-6s %s\\n' "$idx" "$uuid" "$mem" "$bus" "$state" "$product"
  fi
}}
{rows}
"""


def node_plan(inv: Inventory) -> list[tuple[str, int]]:
    """Every node the driver makes, with its minor (pure): each device's node on its own minor,
    companion k of device i on (k + 1) * count + i, control node j on 255 - j; all distinct."""
    n = len(inv.devices)
    plan = [(d.device_node, d.minor) for d in inv.devices]
    plan += [(c, (k + 1) * n + d.index) for d in inv.devices for k, c in enumerate(d.companion_nodes)]
    plan += [(c, CONTROL_MINOR - j) for j, c in enumerate(inv.control_nodes)]
    minors = [m for _, m in plan]
    if len(set(minors)) != len(minors) or min(minors, default=0) < 0:
        raise SimulatedDriverError(f"too many device nodes for distinct minors in 0-{CONTROL_MINOR}: {plan}")
    return plan


@dataclass(frozen=True)
class _Made:
    """What an installed driver made, from its device list (nothing when there is none)."""

    major: int | None = None
    version: str | None = None
    nodes: tuple[str, ...] = ()  # /dev paths
    files: tuple[str, ...] = ()  # relative to the driver root (a device class's)
    directories: tuple[str, ...] = ()  # /dev paths of directories made for nodes (a device class's)


def _previous(driver_root: Path) -> _Made:
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError, AttributeError):
        doc = json.loads((driver_root / SIMULATED_DEVICE_LIST).read_text())
        nodes = [d["deviceNode"] for d in doc["devices"]]
        nodes += [c for d in doc["devices"] for c in d.get("companionNodes", [])]
        nodes += [c["path"] for c in doc.get("controlNodes", [])]
        return _Made(
            int(doc["major"]),
            doc.get("driverVersion"),
            tuple(str(n) for n in nodes),
            tuple(str(f) for f in doc.get("files", [])),
            tuple(str(d) for d in doc.get("devDirectories", [])),
        )
    return _Made()


def _missing_dirs(dev_root: Path, nodes: Iterable[str]) -> list[str]:
    """The /dev directories that making `nodes` creates (they do not exist yet), parents first."""
    out: list[str] = []
    for node in nodes:
        for parent in reversed(Path(node).parents):
            if parent in (Path("/"), Path("/dev")) or str(parent) in out:
                continue
            if not _host_path(dev_root, str(parent)).exists():
                out.append(str(parent))
    return out


def made_nodes(driver_root: Path) -> dict[str, tuple[int, int]]:
    """Every node the simulated GPU driver or device class installed at `driver_root` made: its /dev
    path -> (major, minor), from its device list and `node_plan` (the numbering `install` used);
    nothing when no driver is installed there."""
    made = _previous(driver_root)
    if made.major is None:
        return {}
    inv = driverstate.read_inventory(driver_root)
    return {node: (made.major, minor) for node, minor in node_plan(inv)}


def recreate_nodes(dev_root: Path, nodes: Iterable[tuple[str, int, int]]) -> list[Path]:
    """Remove and make again each (/dev path, major, minor) under `dev_root`, as `install` makes them
    (`_mknod`: mode 0666, same numbers): a device reset gives the device a new node, as a real
    driver's reset does (a process still holding the old inode keeps it). Under the dev root's lock,
    as a driver installing at once may be making nodes there."""
    out = []
    with _dev_lock(dev_root):
        for node, major, minor in nodes:
            path = _host_path(dev_root, node)
            _mknod(path, major, minor, fresh=True)
            out.append(path)
    return out


def _write_library(lib_dir: Path, soname: str, symbols: dict[str, str]) -> Path:
    path = lib_dir / soname
    tmp = path.with_name(f".{soname}.tmp")
    tmp.write_bytes(elf.shared_object(soname, symbols))
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path


def install(
    inv: Inventory,
    driver_root: Path,
    dev_root: Path,
    proc_devices_text: str,
    recipe: Recipe = SIMULATED_GPU,
    major: int | None = None,
    container_driver_root: str | None = None,
    sim: simclass.SimClass | None = None,
) -> Installed:
    """Create the device nodes under `dev_root` and the driver files under `driver_root`.

    `proc_devices_text` is the host's /proc/devices (to pick a major no driver owns);
    `container_driver_root` is where containers see the driver root (default: the recipe's).
    `sim` is a simulated device class (a custom simulated recipe): its devices (then `inv` is its
    inventory), libraries and binaries instead of the simulated GPU's.
    Idempotent: running it again with the same description keeps the same major and UUIDs.
    """
    made = _previous(driver_root)
    previous, previous_nodes = made.major, made.nodes
    if major is not None and major in used_majors(proc_devices_text):
        raise SimulatedDriverError(f"--major {major}: a kernel driver already owns it (see /proc/devices)")
    inv = sim.inventory if sim is not None else replace(inv, control_nodes=recipe.control_nodes)
    # Another version over an installed driver is a driver upgrade: like a module reload, it gives
    # new device nodes (new inodes; a process holding an old one keeps the old one) and new files.
    fresh = made.version is not None and made.version != inv.driver_version
    plan = node_plan(inv)

    nodes = []
    with _dev_lock(dev_root):
        own = [_host_path(dev_root, n) for n in previous_nodes] + [_host_path(dev_root, n) for n, _ in plan]
        others = node_majors(dev_root, exclude=own)
        if major is not None and major in others:
            raise SimulatedDriverError(
                f"--major {major}: device nodes of another driver under {dev_root} use it"
            )
        chosen = major if major is not None else pick_major(proc_devices_text, previous, others)
        dirs = [*made.directories, *_missing_dirs(dev_root, (n for n, _ in plan))]
        for node, minor in plan:
            path = _host_path(dev_root, node)
            _mknod(path, chosen, minor, fresh)
            nodes.append(path)
        for node in set(previous_nodes) - {n for n, _ in plan}:  # devices an earlier config had
            _unlink_node(_host_path(dev_root, node), previous)

    visible_root = container_driver_root or recipe.driver_root
    lib_dir = driver_root / SIMULATED_LIB_DIR
    bin_dir = driver_root / SIMULATED_BIN_DIR
    lib_dir.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    libs = []
    bins = []
    if sim is None:
        for soname, prefix in LIBRARIES.items():
            symbols = {
                f"{prefix}_version": inv.driver_version,
                f"{prefix}_driver": "sro simulated GPU driver (not real hardware)",
                f"{prefix}_device_count": str(len(inv.devices)),
            }
            libs.append(_write_library(lib_dir, soname, symbols))
        scripts = {SMI: smi_script(inv, recipe, visible_root)}
    else:
        for soname in sim.libraries:
            prefix = "".join(c if c.isalnum() else "_" for c in soname.split(".so")[0])
            symbols = {
                f"{prefix}_version": inv.driver_version,
                f"{prefix}_driver": f"sro simulated {sim.device_class} driver (not real hardware)",
                f"{prefix}_device_count": str(len(inv.devices)),
            }
            libs.append(_write_library(lib_dir, soname, symbols))
        scripts = {b: simclass_script.script(sim, recipe, b, visible_root) for b in sim.binaries}
    for name, text in scripts.items():
        driverstate.write_atomic(bin_dir / name, text)
        os.chmod(bin_dir / name, 0o755)
        bins.append(bin_dir / name)

    files = [str(p.relative_to(driver_root)) for p in (*libs, *bins)] if sim is not None else []
    for stale in set(made.files) - set(files):  # what an earlier class config had and this one drops
        with contextlib.suppress(FileNotFoundError, ValueError):
            _inside(driver_root, stale).unlink()
    minors = [m for _, m in plan[len(plan) - len(inv.control_nodes) :]]
    doc = driverstate.inventory_to_doc(
        inv, chosen, minors, sim.device_class if sim is not None else "", files
    )
    if sim is not None and dirs:
        doc["devDirectories"] = dirs
    driverstate.write_atomic(driver_root / SIMULATED_DEVICE_LIST, json.dumps(doc, indent=2) + "\n")
    if not (driver_root / SIMULATED_FAULTS).exists():
        driverstate.write_atomic(driver_root / SIMULATED_FAULTS, '{"faults": {}}\n')
    log.info("simulated driver: %d devices, major %d, files in %s", len(inv.devices), chosen, driver_root)
    return Installed(driver_root, chosen, tuple(nodes), tuple(libs), tuple(bins), inv)


def _unlink_node(path: Path, major: int | None) -> bool:
    """Remove `path` if it is a node this driver made (a char device with its major)."""
    try:
        st = path.lstat()
        if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == major:
            path.unlink()
            return True
    except FileNotFoundError:
        pass
    return False


def _inside(driver_root: Path, rel: str) -> Path:
    """`rel` under `driver_root`, or ValueError for a path that would leave it (a hand-edited list)."""
    path = driver_root / rel
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise ValueError(rel)
    return path


def remove(driver_root: Path, dev_root: Path, recipe: Recipe = SIMULATED_GPU) -> list[Path]:
    """Remove the device nodes and driver files `install` made; returns what was removed."""
    removed: list[Path] = []
    made = _previous(driver_root)
    major, files = made.major, made.files
    for node in made.nodes:
        with contextlib.suppress(ValueError):
            path = _host_path(dev_root, node)
            if _unlink_node(path, major):
                removed.append(path)
    for rel in files:  # a device class's: exactly the files it made
        with contextlib.suppress(FileNotFoundError, ValueError):
            path = _inside(driver_root, rel)
            path.unlink()
            removed.append(path)
    for name in (
        SIMULATED_DEVICE_LIST,
        SIMULATED_FAULTS,
        driverstate.SIMULATED_LOADS,
        driverstate.SIMULATED_RESETS,
        ".faults.lock",
    ):
        with contextlib.suppress(FileNotFoundError):
            (driver_root / name).unlink()
            removed.append(driver_root / name)
    for sub in (SIMULATED_LIB_DIR, SIMULATED_BIN_DIR):
        if not (driver_root / sub).is_dir():
            continue
        if files:  # a device class's directories go only when nothing else is left in them
            with contextlib.suppress(OSError):
                (driver_root / sub).rmdir()
                removed.append(driver_root / sub)
        else:
            shutil.rmtree(driver_root / sub)
            removed.append(driver_root / sub)
    for directory in reversed(made.directories):  # children first; only when nothing else is in them
        with contextlib.suppress(OSError, ValueError):
            _host_path(dev_root, directory).rmdir()
            removed.append(_host_path(dev_root, directory))
    with contextlib.suppress(OSError):
        driver_root.rmdir()
    return removed
