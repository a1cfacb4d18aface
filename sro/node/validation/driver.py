"""Driver validation: the driver on this node works, seen by two independent paths.

The device backend's inventory (NVML, or the simulated driver's device list) and the recipe's own
tool (`nvidia-smi -L`, `simgpu-smi -L`) must report the same devices (count and UUIDs), and every
device's node must be a character device with the device's minor (one major for all). This is the
check of the operator's `driver-validation` state; it runs in a pod that mounts the host's driver
root and /dev read-only, or straight on a node.

On sro's simulated NVIDIA driver (`spec.driver.mode: simulated`, or its NVML state file found under
the driver root) the same checks run through the real clients: NVML (nvidia-ml-py over the driver
root's libnvidia-ml.so.1) and the driver root's nvidia-smi, run in place (the sro image is glibc, and
the driver root holds no libc to chroot into), both told where the node's /dev is seen.

`observe` gathers the facts (backend, tool run, stat() of the nodes); `evaluate` is pure.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sro.api.builtin_recipes import SIMNVML_STATE_DIR
from sro.api.recipes import Recipe
from sro.devices import open_backend
from sro.devices.driverstate import DriverStateError, read_inventory
from sro.devices.model import Backend, Inventory
from sro.host import devnodes
from sro.host.root import HostRoot
from sro.node.validation import tools
from sro.node.validation.report import Report, Result

BackendOpener = Callable[[Recipe, Path], Backend]


@dataclass(frozen=True)
class DriverFacts:
    recipe: Recipe
    driver_root: str
    dev_root: str
    inventory: Inventory | None
    inventory_error: str = ""
    tool: tools.ToolRun | None = None  # None: the tool was not found (`tool_searched` says where)
    tool_searched: str = ""
    nodes: tuple[devnodes.NodeStat, ...] = ()  # the inventory's device nodes, then its control nodes
    simulated_driver: bool = False  # sro's simulated driver stands in for the recipe's real one
    # the simulated driver's own device list (its devices.json), or why it could not be read
    made: tuple[str, ...] = ()
    made_error: str = ""


def _default_opener(recipe: Recipe, driver_root: Path) -> Backend:
    return open_backend(recipe, driver_root)


def tool_argv(recipe: Recipe, driver_root: Path, tool: Path, simulated_driver: bool = False) -> list[str]:
    """How to run the driver's tool: in place for the simulated driver (a shell script that finds its
    root next to itself; the NVIDIA personality's nvidia-smi finds its libnvidia-ml.so.1 by its
    rpath, next to itself, and libc in this image); chrooted into a mounted driver root for real
    drivers, so the host's binary runs against the host's own libraries rather than the image's
    (NVIDIA's validator does the same)."""
    if recipe.simulated or simulated_driver or driver_root.resolve() == Path("/"):
        return [str(tool), "-L"]
    return ["chroot", str(driver_root), "/" + str(tool.relative_to(driver_root)), "-L"]


def observe(
    recipe: Recipe,
    driver_root: Path,
    host: HostRoot,
    opener: BackendOpener = _default_opener,
    simulated_driver: bool = False,
) -> DriverFacts:
    """The facts; with `simulated_driver` the tool is told (SRO_SIMNVML_DEV_ROOT) that the node's
    /dev is `host.dev` (the in-process NVML reads the same variable: `sro validate driver` sets it)."""
    inventory, error = None, ""
    try:
        backend = opener(recipe, driver_root)
        try:
            inventory = backend.inventory()
        finally:
            backend.close()
    except DriverStateError as e:
        error = str(e)
    except Exception as e:  # NVMLError, a missing library, an unloaded module: all mean "no inventory"
        error = f"{type(e).__name__}: {e}"
    run, searched = None, ""
    name = tools.tool_name(recipe)
    path = tools.find_in_root(driver_root, name) if name else None
    if path is not None:
        env = {k: v for k, v in os.environ.items() if k != recipe.visible_devices_env}  # list them all
        if simulated_driver:
            env[tools.SIMNVML_DEV_ROOT_ENV] = str(host.dev)
        run = tools.run(tool_argv(recipe, driver_root, path, simulated_driver), env)
    else:
        searched = tools.searched(driver_root, name) if name else "the recipe names no binaries"
    nodes: tuple[devnodes.NodeStat, ...] = ()
    if inventory is not None:
        wanted = [d.device_node for d in inventory.devices] + list(inventory.control_nodes)
        nodes = tuple(devnodes.stat_node(host, n) for n in wanted)
    made: tuple[str, ...] = ()
    made_error = ""
    if simulated_driver:
        try:
            made = tuple(str(d.uuid) for d in read_inventory(driver_root).devices)
        except DriverStateError as e:
            made_error = str(e)
    return DriverFacts(
        recipe,
        str(driver_root),
        str(host.dev),
        inventory,
        error,
        run,
        searched,
        nodes,
        simulated_driver,
        made,
        made_error,
    )


# -- pure ----------------------------------------------------------------------------------------


def _driver_hint(facts: DriverFacts) -> str:
    if facts.simulated_driver:
        return (
            "check the simulated driver's pod on the node (`sro driver simulate --personality nvidia`: its "
            f"log, and {facts.driver_root}/{SIMNVML_STATE_DIR}/state) and that --dev-root is the node's /dev"
        )
    if facts.recipe.simulated:
        return (
            "check that the simulated driver is installed on the node (the driver state, or `sro driver "
            f"simulate`) and that its driver root is the one this check reads ({facts.driver_root})"
        )
    return (
        "check that the kernel module is loaded (`lsmod | grep nvidia`, `dmesg | grep -i nvrm`) and that "
        f"the driver's user-space files are under the driver root ({facts.driver_root})"
    )


def check_inventory(facts: DriverFacts) -> Result:
    name = "inventory"
    inv, backend = facts.inventory, facts.recipe.backend
    if inv is None:
        return Result.failed(
            name,
            f"the {backend} backend cannot list the devices",
            f"the {backend} backend cannot list the devices ({facts.inventory_error}); {_driver_hint(facts)}",
        )
    if not inv.devices:
        return Result.failed(
            name,
            f"the {backend} backend reports no devices",
            f"the {backend} backend reports no devices; {_driver_hint(facts)}",
        )
    sim = " (SIMULATED, not real hardware)" if inv.simulated or facts.simulated_driver else ""
    version = f", driver {inv.driver_version}" if inv.driver_version else ""
    return Result.passed(
        name,
        f"{backend} backend: {len(inv.devices)} devices{version}{sim}",
        [f"{d.index}: {d.uuid} {d.device_node} {d.product}" for d in inv.devices],
    )


def check_tool(facts: DriverFacts) -> Result:
    name = "tool"
    tool = tools.tool_name(facts.recipe) or "the recipe's tool"
    if facts.tool is None:
        return Result.failed(
            name,
            f"{tool} not found",
            f"{tool} not found (looked at {facts.tool_searched}): the driver's files are incomplete or "
            f"not where the check looks; {_driver_hint(facts)}",
        )
    run = facts.tool
    if not run.ok:
        return Result.failed(
            name,
            f"`{run.command}` failed",
            f"`{run.command}` failed ({run.failure()}); {_driver_hint(facts)}",
        )
    listed = tools.parse_listing(run.stdout)
    if not listed:
        return Result.failed(
            name,
            f"`{run.command}` lists no devices",
            f"`{run.command}` ran but lists no devices; {_driver_hint(facts)}",
        )
    return Result.passed(name, f"`{run.command}` lists {len(listed)} devices")


def check_agreement(facts: DriverFacts) -> Result:
    name = "tool vs inventory"
    tool = tools.tool_name(facts.recipe) or "tool"
    if facts.inventory is None or facts.tool is None or not facts.tool.ok:
        return Result.skipped(name, "needs both the inventory and the tool's listing")
    listed = [x.uuid for x in tools.parse_listing(facts.tool.stdout)]
    known = [str(d.uuid) for d in facts.inventory.devices]
    if len(listed) == len(known) and set(listed) == set(known):
        return Result.passed(name, f"same {len(known)} devices (UUIDs match)")
    problems = []
    if len(listed) != len(known):
        problems.append(
            f"{tool} lists {len(listed)} devices, the {facts.recipe.backend} backend {len(known)}"
        )
    if missing := sorted(set(known) - set(listed)):
        problems.append(f"not listed by {tool}: {', '.join(missing)}")
    if extra := sorted(set(listed) - set(known)):
        problems.append(f"unknown to the backend: {', '.join(extra)}")
    return Result.failed(
        name,
        "the tool and the backend disagree",
        "; ".join(problems)
        + " — the driver's state is inconsistent (a device lost, a stale device list); "
        + _driver_hint(facts),
    )


def check_nodes(facts: DriverFacts) -> Result:
    name = "device nodes"
    inv = facts.inventory
    if inv is None or not inv.devices:
        return Result.skipped(name, "needs the inventory")
    by_node = {n.path: n for n in facts.nodes}
    problems: list[str] = []
    majors: set[int] = set()
    expected = [(d.device_node, f"device {d.index} ({d.uuid})", d.minor) for d in inv.devices]
    expected += [(c, "control node", -1) for c in inv.control_nodes]
    for node, what, minor in expected:
        st = by_node.get(node) or devnodes.NodeStat(node, node, "absent")
        if st.kind == "absent":
            problems.append(f"{node} of {what} is missing (looked at {st.host_path})")
        elif st.kind != "char":
            problems.append(f"{node} of {what} is not a character device ({st.detail}, at {st.host_path})")
        elif minor >= 0 and st.minor != minor:
            problems.append(f"{node} of {what} has minor {st.minor}, the driver says {minor}")
        else:
            majors.add(st.major)
    if len(majors) > 1 and not problems:
        problems.append(f"the nodes have different majors ({', '.join(map(str, sorted(majors)))})")
    if problems:
        hint = (
            "re-run `sro driver simulate` on the node"
            if facts.recipe.simulated or facts.simulated_driver
            else "check that the driver created its nodes (nvidia-modprobe, or the driver container)"
        )
        return Result.failed(
            name,
            f"{len(problems)} of {len(expected)} nodes wrong",
            f"{problems[0]}; check that {facts.dev_root} is the node's /dev (--dev-root) and {hint}",
            problems,
        )
    major = f" (major {majors.pop()})" if len(majors) == 1 else ""
    return Result.passed(
        name,
        f"{len(inv.devices)} device and {len(inv.control_nodes)} control nodes are character devices{major}",
    )


def check_made(facts: DriverFacts) -> Result:
    """On the simulated driver: NVML sees every GPU the driver made. Its NVML hides a GPU whose
    /dev/nvidia<minor> is missing, which the tool (the same library) would not tell."""
    name = "simulated devices"
    if facts.made_error:
        return Result.failed(name, "no device list", f"{facts.made_error}; {_driver_hint(facts)}")
    if facts.inventory is None:
        return Result.skipped(name, "needs the inventory")
    seen = {str(d.uuid) for d in facts.inventory.devices}
    hidden = [u for u in facts.made if u not in seen]
    if hidden or len(seen) != len(facts.made):
        return Result.failed(
            name,
            f"NVML sees {len(seen)} of the {len(facts.made)} GPUs the driver made",
            f"NVML does not see {', '.join(hidden) or 'the same GPUs'} that the simulated driver made: their "
            f"/dev/nvidia<minor> under {facts.dev_root} is missing or wrong; {_driver_hint(facts)}",
        )
    return Result.passed(name, f"NVML sees the {len(facts.made)} GPUs the simulated driver made")


def evaluate(facts: DriverFacts) -> tuple[Result, ...]:
    checks = (check_inventory(facts), check_tool(facts), check_agreement(facts), check_nodes(facts))
    return (*checks, check_made(facts)) if facts.simulated_driver else checks


def validate(
    recipe: Recipe,
    driver_root: Path,
    host: HostRoot,
    opener: BackendOpener = _default_opener,
    simulated_driver: bool = False,
) -> Report:
    facts = observe(recipe, driver_root, host, opener, simulated_driver)
    sim = ", SIMULATED driver" if simulated_driver else ""
    header = f"recipe {recipe.name}{sim}, driver root {driver_root}, dev root {host.dev}"
    return Report("driver", header, evaluate(facts))
