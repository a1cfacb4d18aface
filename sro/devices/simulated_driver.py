"""The simulated GPU driver: real device nodes and real driver files on the host, no hardware.

Why real: containers must really receive device nodes and driver files, so the device plugin, the
OCI hook / CDI injection, the device cgroup and the scheduler are all exercised for real. The nodes
are character devices with a major number no kernel driver owns (a LOCAL/EXPERIMENTAL major not in
/proc/devices): opening one gives ENXIO where the device cgroup allows it and EPERM where it denies
it — a clean, GPU-free check that a container got exactly its devices. The driver root gets the
device list and fault state (see `driverstate`), two ELF shared libraries that ldconfig and dlopen
accept, and a busybox-compatible `simgpu-smi`. Every path comes from the `simulated-gpu` recipe and
the `sro.api.recipes` constants; the roots are parameters so tests use a temp dir.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import stat
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
from sro.devices import driverstate, elf
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


def pick_major(proc_devices_text: str, previous: int | None = None) -> int:
    used = used_majors(proc_devices_text)
    if previous is not None and previous not in used:
        return previous
    for major in CANDIDATE_MAJORS:
        if major not in used:
            return major
    raise SimulatedDriverError(f"no free character major among {CANDIDATE_MAJORS} in /proc/devices")


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
root="${{SIMGPU_DRIVER_ROOT:-}}"
if [ -z "$root" ]; then
  here=$(dirname "$0")/..
  if [ -r "$here/{SIMULATED_DEVICE_LIST}" ]; then root=$here; else root={driver_root}; fi
fi
faults="$root/{SIMULATED_FAULTS}"
visible="${{{env}-all}}"
if [ "$1" = "--version" ]; then
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
  case "$visible" in
    all) ;;
    ""|none|void) return 0 ;;
    *) case ",$visible," in *",$idx,"*|*",$uuid,"*) ;; *) return 0 ;; esac ;;
  esac
  state=ok
  if [ -r "$faults" ] && grep -q "\\"$uuid\\"" "$faults"; then state=FAULT; fi
  if [ "$list" = 1 ]; then
    echo "GPU $idx: $product (UUID: $uuid) [simulated]"
  else
    printf '%-4s %-40s %-9s %-13s %-6s %s\\n' "$idx" "$uuid" "$mem" "$bus" "$state" "$product"
  fi
}}
{rows}
"""


def install(
    inv: Inventory,
    driver_root: Path,
    dev_root: Path,
    proc_devices_text: str,
    recipe: Recipe = SIMULATED_GPU,
    major: int | None = None,
    container_driver_root: str | None = None,
) -> Installed:
    """Create the device nodes under `dev_root` and the driver files under `driver_root`.

    `proc_devices_text` is the host's /proc/devices (to pick a major no driver owns);
    `container_driver_root` is where containers see the driver root (default: the recipe's).
    Idempotent: running it again with the same description keeps the same major and UUIDs.
    """
    previous = None
    previous_version = None
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
        before = json.loads((driver_root / SIMULATED_DEVICE_LIST).read_text())
        previous_version = before.get("driverVersion")
        previous = int(before["major"])
    chosen = major if major is not None else pick_major(proc_devices_text, previous)
    if major is not None and major in used_majors(proc_devices_text):
        raise SimulatedDriverError(f"--major {major}: a kernel driver already owns it (see /proc/devices)")
    inv = replace(inv, control_nodes=recipe.control_nodes)
    # Another version over an installed driver is a driver upgrade: like a module reload, it gives
    # new device nodes (new inodes; a process holding an old one keeps the old one) and new files.
    fresh = previous_version is not None and previous_version != inv.driver_version

    nodes = []
    for d in inv.devices:
        path = _host_path(dev_root, d.device_node)
        _mknod(path, chosen, d.minor, fresh)
        nodes.append(path)
    for ctl in recipe.control_nodes:
        path = _host_path(dev_root, ctl)
        _mknod(path, chosen, CONTROL_MINOR, fresh)
        nodes.append(path)

    visible_root = container_driver_root or recipe.driver_root
    lib_dir = driver_root / SIMULATED_LIB_DIR
    bin_dir = driver_root / SIMULATED_BIN_DIR
    lib_dir.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    libs = []
    for soname, prefix in LIBRARIES.items():
        blob = elf.shared_object(
            soname,
            {
                f"{prefix}_version": inv.driver_version,
                f"{prefix}_driver": "sro simulated GPU driver (not real hardware)",
                f"{prefix}_device_count": str(len(inv.devices)),
            },
        )
        path = lib_dir / soname
        tmp = path.with_name(f".{soname}.tmp")
        tmp.write_bytes(blob)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        libs.append(path)
    smi = bin_dir / SMI
    driverstate.write_atomic(smi, smi_script(inv, recipe, visible_root))
    os.chmod(smi, 0o755)

    doc = driverstate.inventory_to_doc(inv, chosen, CONTROL_MINOR)
    driverstate.write_atomic(driver_root / SIMULATED_DEVICE_LIST, json.dumps(doc, indent=2) + "\n")
    if not (driver_root / SIMULATED_FAULTS).exists():
        driverstate.write_atomic(driver_root / SIMULATED_FAULTS, '{"faults": {}}\n')
    log.info("simulated driver: %d devices, major %d, files in %s", len(inv.devices), chosen, driver_root)
    return Installed(driver_root, chosen, tuple(nodes), tuple(libs), (smi,), inv)


def remove(driver_root: Path, dev_root: Path, recipe: Recipe = SIMULATED_GPU) -> list[Path]:
    """Remove the device nodes and driver files `install` made; returns what was removed."""
    removed: list[Path] = []
    try:
        doc = json.loads((driver_root / SIMULATED_DEVICE_LIST).read_text())
        major = int(doc["major"])
        nodes = [d["deviceNode"] for d in doc["devices"]] + [c["path"] for c in doc.get("controlNodes", [])]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        major, nodes = -1, []
    for node in nodes:
        path = _host_path(dev_root, node)
        with contextlib.suppress(FileNotFoundError):
            st = path.lstat()
            # only nodes this driver made: a char device with its major
            if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == major:
                path.unlink()
                removed.append(path)
    for name in (SIMULATED_DEVICE_LIST, SIMULATED_FAULTS, driverstate.SIMULATED_LOADS, ".faults.lock"):
        with contextlib.suppress(FileNotFoundError):
            (driver_root / name).unlink()
            removed.append(driver_root / name)
    for sub in (SIMULATED_LIB_DIR, SIMULATED_BIN_DIR):
        if (driver_root / sub).is_dir():
            shutil.rmtree(driver_root / sub)
            removed.append(driver_root / sub)
    with contextlib.suppress(OSError):
        driver_root.rmdir()
    return removed
