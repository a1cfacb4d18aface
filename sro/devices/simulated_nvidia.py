"""The simulated driver's NVIDIA personality: NVIDIA's device nodes and a real libnvidia-ml.so.1.

Why: the `nvidia-gpu` recipe, the `nvml` backend (pynvml), NVIDIA's device-node layout and every
NVML client had never run without a GPU. With this personality `sro driver simulate` lays a driver
root out as a real driver container's (`/run/nvidia/driver`: the compiled NVML library and
nvidia-smi, /proc/driver/nvidia/version) and makes NVIDIA's character nodes (`/dev/nvidia<minor>`
on major 195, nvidiactl 195:255, nvidia-modeset 195:254, nvidia-uvm and -uvm-tools on a free
major, `/dev/nvidia-caps/nvidia-cap<N>` for MIG devices on another), so the real client stack runs
on top: the library answers from the state file `sro.devices.simnvml_state` renders from the same
devices.json / faults.json / loads.json as the `simgpu` personality (so `sro simulate fault` and
`load` work unchanged). Everything says it is simulated: product names end in " (simulated)",
the version file and nvidia-smi say so.

It refuses to go where a real NVIDIA driver is loaded (its nodes and /run/nvidia/driver would
shadow the real ones). The library and nvidia-smi are compiled elsewhere (the sro image carries
them under /opt/sro/share/simnvml; `sro.local.native` builds them); nothing compiles on a node.
devices.json keeps sro's format, plus `personality`, the `majors` used and every node made (`nodes`:
path, major, minor), so `remove` takes away exactly those nodes and nothing another driver made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sro.api.builtin_recipes import SIMNVML_STATE_DIR
from sro.api.recipes import NVIDIA_GPU, SIMULATED_DEVICE_LIST, SIMULATED_FAULTS
from sro.devices import driverstate, simconfig, simnvml_state
from sro.devices.model import Inventory
from sro.devices.simulated_driver import Installed, SimulatedDriverError, _host_path, _mknod, pick_major

PERSONALITY = "nvidia"
NVIDIA_MAJOR = 195
DEVICE_NODE = "/dev/nvidia{minor}"
CAP_NODE = "/dev/nvidia-caps/nvidia-cap{minor}"
# control node -> (which major, minor): NVIDIA's numbers on 195; uvm gets a major of its own
CONTROL_NODES: Mapping[str, tuple[str, int]] = {
    "/dev/nvidiactl": ("nvidia", 255),
    "/dev/nvidia-uvm": ("uvm", 0),
    "/dev/nvidia-uvm-tools": ("uvm", 1),
    "/dev/nvidia-modeset": ("nvidia", 254),
}
MAX_NVLINKS = 18  # links per GPU (NVML_NVLINK_MAX_LINKS)
DEFAULT_DRIVER_VERSION = "550.90.07"
SIMULATED_SUFFIX = " (simulated)"
DEFAULT_PRODUCT = "NVIDIA A100-SXM4-40GB"
# NVIDIA product names nvidia-smi prints -> (framebuffer MiB, compute capability): the defaults a
# device of that product gets when the config names only the product
PRODUCTS: Mapping[str, tuple[int, str]] = {
    "NVIDIA A100-SXM4-40GB": (40960, "8.0"),
    "NVIDIA A100-SXM4-80GB": (81920, "8.0"),
    "NVIDIA A100-PCIE-40GB": (40960, "8.0"),
    "NVIDIA A100 80GB PCIe": (81920, "8.0"),
    "NVIDIA H100 80GB HBM3": (81920, "9.0"),
    "NVIDIA H100 PCIe": (81920, "9.0"),
    "NVIDIA H200": (143360, "9.0"),
    "NVIDIA L4": (23040, "8.9"),
    "NVIDIA L40S": (46080, "8.9"),
    "Tesla T4": (15360, "7.5"),
    "Tesla V100-SXM2-16GB": (16384, "7.0"),
}
LIB_DIR = "usr/lib/x86_64-linux-gnu"
BIN_DIR = "usr/bin"
LIBRARY = "libnvidia-ml.so.1"
SMI = "nvidia-smi"
VERSION_FILE = "proc/driver/nvidia/version"
DEFAULT_NATIVE_DIR = Path("/opt/sro/share/simnvml")
NATIVE_DIR_ENV = "SRO_SIMNVML_DIR"


def _product_defaults(product: Any) -> dict[str, Any]:
    known = PRODUCTS.get(str(product)) if isinstance(product, str) else None
    return {} if known is None else {"memoryMiB": known[0], "computeCapability": known[1]}


def config_doc(doc: Any) -> Any:
    """The devices YAML with NVIDIA's defaults (pure): driver 550.90.07, an A100-SXM4-40GB, and
    for a product of `PRODUCTS` its memory and compute capability unless given."""
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        return doc  # simconfig.parse says what is wrong
    out = {k: v for k, v in doc.items() if k != "personality"}
    out.setdefault("driverVersion", DEFAULT_DRIVER_VERSION)
    user = doc.get("defaults", {})
    if isinstance(user, Mapping):
        product = user.get("product", DEFAULT_PRODUCT)
        out["defaults"] = {"product": product, **_product_defaults(product), **user}
    entries = doc.get("devices")
    if isinstance(entries, list):
        out["devices"] = [
            {**_product_defaults(e.get("product")), **e} if isinstance(e, Mapping) else e for e in entries
        ]
    return out


def nvidia_inventory(inv: Inventory) -> Inventory:
    """`inv` as the NVIDIA personality shows it (pure): products end in " (simulated)", MIG devices
    get their capability nodes; SimConfigError for what NVIDIA's numbering cannot hold."""
    devices = []
    for d in inv.devices:
        links = sum(d.nvlinks.values())
        if links > MAX_NVLINKS:
            raise simconfig.SimConfigError(
                f"devices[{d.index}]: {links} NVLinks; an NVIDIA GPU has at most {MAX_NVLINKS}"
            )
        migs = []
        for m in d.mig_devices:
            try:
                minor = simnvml_state.mig_cap_minor(d.minor, m.gi_id, m.ci_id)
            except ValueError as e:
                raise simconfig.SimConfigError(f"devices[{d.index}].mig[{m.index}]: {e}") from e
            migs.append(dataclasses.replace(m, device_node=CAP_NODE.format(minor=minor)))
        product = d.product if d.product.endswith(SIMULATED_SUFFIX) else d.product + SIMULATED_SUFFIX
        devices.append(dataclasses.replace(d, product=product, mig_devices=tuple(migs)))
    return dataclasses.replace(inv, devices=tuple(devices), control_nodes=NVIDIA_GPU.control_nodes)


def parse(doc: Any) -> Inventory:
    """A devices YAML document as the NVIDIA personality's inventory (pure)."""
    return nvidia_inventory(simconfig.parse(config_doc(doc), device_node=DEVICE_NODE))


def refusal(proc_modules: str, proc_devices: str) -> str | None:
    """Why a real NVIDIA driver is in the way, from the texts of /proc/modules and /proc/devices
    (pure); None when there is none."""
    for text in proc_modules.splitlines():
        if text.split(maxsplit=1)[:1] == [PERSONALITY]:
            return "a real NVIDIA driver is loaded (/proc/modules lists the nvidia module)"
    char = True
    for text in proc_devices.splitlines():
        if text.strip().startswith("Block devices"):
            char = False
        parts = text.split()
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        if char and int(parts[0]) == NVIDIA_MAJOR:
            return f"character major {NVIDIA_MAJOR} belongs to a real driver ({parts[1]} in /proc/devices)"
        if parts[1].startswith("nvidia"):
            return f"a real NVIDIA driver is loaded ({parts[1]}, major {parts[0]}, in /proc/devices)"
    return None


def check_host(proc_modules: str, proc_devices: str) -> None:
    reason = refusal(proc_modules, proc_devices)
    if reason is not None:
        raise SimulatedDriverError(f"not installing the simulated NVIDIA driver: {reason}")


@dataclass(frozen=True)
class NativeBuild:
    """The compiled simulated NVML: the library (SONAME libnvidia-ml.so.1) and nvidia-smi."""

    library: Path
    smi: Path


def find_native(native_dir: Path) -> NativeBuild:
    build = NativeBuild(native_dir / LIBRARY, native_dir / SMI)
    missing = [p.name for p in (build.library, build.smi) if not p.is_file()]
    if missing:
        raise SimulatedDriverError(
            f"{native_dir}: no {' or '.join(missing)} (the compiled simulated NVML; --native-dir or "
            f"${NATIVE_DIR_ENV} says where): the sro image has them (`sro local image` builds it); "
            f"elsewhere build them with `python -m sro.local.native {native_dir}`"
        )
    return build


def version_text(driver_version: str) -> str:
    return (
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver_version}  "
        "(SIMULATED by sro, not real hardware)\n"
    )


def _copy(src: Path, dst: Path, mode: int) -> None:
    """`src` to `dst` as a new file (a new inode: a container holding the old one keeps it)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, mode)
    os.replace(tmp, dst)


def _symlink(target: str, link: Path) -> None:
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, link)


def _unlink_node(path: Path, major: int, minor: int) -> bool:
    """Remove `path` only if it is the char node major:minor (one this driver made)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor):
        path.unlink()
        return True
    return False


def _read_doc(driver_root: Path) -> dict[str, Any]:
    with contextlib.suppress(FileNotFoundError, ValueError):
        doc = json.loads((driver_root / SIMULATED_DEVICE_LIST).read_text())
        if isinstance(doc, dict):
            return doc
    return {}


def personality_of(driver_root: Path) -> str:
    """The personality of the simulated driver installed at `driver_root` (simgpu if unsaid)."""
    return str(_read_doc(driver_root).get("personality", simconfig.PERSONALITIES[0]))


def _recorded_nodes(doc: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    try:
        return [(str(n["path"]), int(n["major"]), int(n["minor"])) for n in doc.get("nodes", [])]
    except (KeyError, TypeError, ValueError):
        return []


def made_nodes(driver_root: Path) -> dict[str, tuple[int, int]]:
    """Every node the NVIDIA personality installed at `driver_root` made: its /dev path -> (major,
    minor) as recorded in its device list (nothing when it is not this personality's)."""
    doc = _read_doc(driver_root)
    if doc.get("personality") != PERSONALITY:
        return {}
    return {path: (major, minor) for path, major, minor in _recorded_nodes(doc)}


def _lib_name(driver_version: str) -> str:
    return f"libnvidia-ml.so.{driver_version}"


def install(
    inv: Inventory,
    driver_root: Path,
    dev_root: Path,
    proc_devices_text: str,
    proc_modules_text: str,
    native: NativeBuild,
) -> Installed:
    """Make NVIDIA's device nodes under `dev_root` and the driver root's files, then the NVML state.

    `inv` is the personality's inventory (`parse`); `proc_*_text` are the host's /proc/devices (free
    majors for uvm and caps, and the refusal check) and /proc/modules. Idempotent; another driver
    version over an installed one is an upgrade: new nodes and files, the old library removed.
    """
    check_host(proc_modules_text, proc_devices_text)
    before = _read_doc(driver_root)
    majors = before.get("majors", {}) if isinstance(before.get("majors"), dict) else {}
    uvm = pick_major(proc_devices_text, majors.get("uvm"))
    caps = pick_major(f"{uvm} nvidia-uvm\n{proc_devices_text}", majors.get("caps"))  # before "Block devices"
    by_kind = {"nvidia": NVIDIA_MAJOR, "uvm": uvm, "caps": caps}
    previous_version = before.get("driverVersion")
    fresh = previous_version is not None and previous_version != inv.driver_version

    wanted = [(d.device_node, NVIDIA_MAJOR, d.minor) for d in inv.devices]
    wanted += [(path, by_kind[CONTROL_NODES[path][0]], CONTROL_NODES[path][1]) for path in inv.control_nodes]
    wanted += [
        (m.device_node, caps, simnvml_state.mig_cap_minor(d.minor, m.gi_id, m.ci_id))
        for d in inv.devices
        for m in d.mig_devices
    ]
    for path, major, minor in _recorded_nodes(before):  # nodes of a larger config before
        if (path, major, minor) not in wanted:
            _unlink_node(_host_path(dev_root, path), major, minor)
    nodes = []
    for path, major, minor in wanted:
        host = _host_path(dev_root, path)
        _mknod(host, major, minor, fresh)
        nodes.append(host)

    lib_dir, bin_dir = driver_root / LIB_DIR, driver_root / BIN_DIR
    library = lib_dir / _lib_name(inv.driver_version)
    _copy(native.library, library, 0o755)
    _symlink(library.name, lib_dir / LIBRARY)
    if isinstance(previous_version, str) and _lib_name(previous_version) != library.name:
        with contextlib.suppress(FileNotFoundError):
            (lib_dir / _lib_name(previous_version)).unlink()
    smi = bin_dir / SMI
    _copy(native.smi, smi, 0o755)
    driverstate.write_atomic(driver_root / VERSION_FILE, version_text(inv.driver_version))

    doc = driverstate.inventory_to_doc(inv, NVIDIA_MAJOR, CONTROL_NODES["/dev/nvidiactl"][1])
    doc["controlNodes"] = [
        {"path": p, "major": by_kind[CONTROL_NODES[p][0]], "minor": CONTROL_NODES[p][1]}
        for p in inv.control_nodes
    ]
    doc["personality"] = PERSONALITY
    doc["majors"] = by_kind
    doc["nodes"] = [{"path": p, "major": major, "minor": minor} for p, major, minor in wanted]
    driverstate.write_atomic(driver_root / SIMULATED_DEVICE_LIST, json.dumps(doc, indent=2) + "\n")
    if not (driver_root / SIMULATED_FAULTS).exists():
        driverstate.write_atomic(driver_root / SIMULATED_FAULTS, '{"faults": {}}\n')
    (driver_root / SIMNVML_STATE_DIR).mkdir(parents=True, exist_ok=True)
    simnvml_state.write_state(driver_root)
    return Installed(driver_root, NVIDIA_MAJOR, tuple(nodes), (library, lib_dir / LIBRARY), (smi,), inv)


# what `install` writes under the driver root besides the library (named by version)
_FILES = (
    SIMULATED_DEVICE_LIST,
    SIMULATED_FAULTS,
    driverstate.SIMULATED_LOADS,
    driverstate.SIMULATED_RESETS,
    ".faults.lock",
    simnvml_state.LOCK_FILE,
    f"{SIMNVML_STATE_DIR}/{simnvml_state.STATE_FILE}",
    f"{LIB_DIR}/{LIBRARY}",
    f"{BIN_DIR}/{SMI}",
    VERSION_FILE,
)
# directories `install` may have made, deepest first: removed when empty
_DIRS = (
    SIMNVML_STATE_DIR,
    "run",
    LIB_DIR,
    "usr/lib",
    BIN_DIR,
    "usr",
    "proc/driver/nvidia",
    "proc/driver",
    "proc",
)


def remove(driver_root: Path, dev_root: Path) -> list[Path]:
    """Remove what `install` made: the recorded nodes (only char nodes with their recorded
    major:minor) and its files; directories only when left empty. A driver root whose device list
    is not this personality's is left alone."""
    doc = _read_doc(driver_root)
    if doc.get("personality") != PERSONALITY:
        return []
    removed: list[Path] = []
    for path, major, minor in _recorded_nodes(doc):
        host = _host_path(dev_root, path)
        if _unlink_node(host, major, minor):
            removed.append(host)
    with contextlib.suppress(OSError):
        _host_path(dev_root, str(Path(CAP_NODE).parent)).rmdir()
    names = list(_FILES)
    if isinstance(doc.get("driverVersion"), str):
        names.append(f"{LIB_DIR}/{_lib_name(doc['driverVersion'])}")
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            (driver_root / name).unlink()
            removed.append(driver_root / name)
    for sub in (*_DIRS, "."):
        with contextlib.suppress(OSError):
            (driver_root / sub).rmdir()
    return removed
