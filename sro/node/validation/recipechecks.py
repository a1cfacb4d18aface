"""The checks of a custom recipe's hardware: what its file declares is there, and its commands work.

Why apart from the GPU checks: a built-in recipe has a listing tool (`nvidia-smi -L`, `simgpu-smi
-L`) whose output is compared with the backend's inventory; a custom recipe (an FPGA, a SmartNIC)
declares instead what must be there and what to run, and that is what is checked:
  driver validation (`sro validate driver`, on the node, reading the driver root and /dev):
    - every device's companion nodes are character devices, none shared with another node;
    - each default-capability group's libraries (file-name globs) and binaries are found under the
      driver root (its usual library and binary folders);
    - each `validation.commands` argv runs, argv[0] resolved among the driver root's binaries
      (in place for a simulated driver or driver root `/`, chrooted into a mounted real one, as the
      GPU tool is), and exits 0; the first line it printed goes in the report;
  workload validation (`sro validate workload`, in a pod given one device through the device plugin):
    - the granted device's companion nodes are usable too, and no other device's are;
    - each `validation.commands` argv runs from PATH (the hook put the binaries there) and exits 0.
The device nodes, control nodes, device cgroup and libraries are checked by the GPU checks' own
code, which reads the recipe. A simulated recipe's results say SIMULATED, as the GPU ones do.

`observe_*` gather facts (stat, open, runs); `check_*` are pure.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sro.api.builtin_recipes import DRIVER_LIB_DIRS
from sro.api.recipes import Recipe
from sro.devices.model import Inventory, node_path
from sro.host import devnodes
from sro.host.root import HostRoot
from sro.node.validation import tools
from sro.node.validation.report import Result

LIB_DIRS = DRIVER_LIB_DIRS  # where a driver root keeps libraries, as the runtime looks for them
USABLE = (0, errno.ENXIO)  # opened, or granted with no kernel driver behind it (a simulated node)


@dataclass(frozen=True)
class Found:
    """One library glob or binary name of a capability group and the files it found."""

    capability: str
    kind: str  # "library" | "binary"
    name: str
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Command:
    """One validation command: the argv as the recipe wrote it, and its run (None: not run, `note`)."""

    argv: tuple[str, ...]
    run: tools.ToolRun | None
    note: str = ""


def groups(recipe: Recipe, capabilities: Sequence[str] | None = None) -> tuple[str, ...]:
    """The capability groups to check: `capabilities` (the container's) or the recipe's defaults."""
    wanted = list(recipe.default_capabilities if capabilities is None else capabilities)
    known = sorted(set(recipe.libraries) | set(recipe.binaries))
    return tuple(known) if "all" in wanted else tuple(c for c in dict.fromkeys(wanted) if c in known)


def in_place(recipe: Recipe, driver_root: Path) -> bool:
    """A simulated driver's scripts (and anything under `/`) run where they are; a real driver's
    binaries run chrooted into its root, against its own libraries."""
    return recipe.simulated or driver_root.resolve() == Path("/")


# -- observing -----------------------------------------------------------------------------------


def observe_files(recipe: Recipe, driver_root: Path) -> tuple[Found, ...]:
    out = []
    for cap in groups(recipe):
        for pattern in recipe.libraries.get(cap, ()):
            paths = []
            for d in LIB_DIRS:
                try:
                    names = sorted(os.listdir(driver_root / d))
                except OSError:
                    continue
                paths += [str(driver_root / d / n) for n in names if fnmatch.fnmatchcase(n, pattern)]
            out.append(Found(cap, "library", pattern, tuple(paths)))
        for name in recipe.binaries.get(cap, ()):
            path = tools.find_in_root(driver_root, name)
            out.append(Found(cap, "binary", name, (str(path),) if path is not None else ()))
    return tuple(out)


def observe_driver_commands(recipe: Recipe, driver_root: Path, env: Mapping[str, str]) -> tuple[Command, ...]:
    """Run each validation command with argv[0] from the driver root (every device visible)."""
    env = {k: v for k, v in env.items() if k != recipe.visible_devices_env}
    out = []
    for argv in recipe.validation_commands:
        path = tools.find_in_root(driver_root, argv[0])
        if path is None:
            out.append(
                Command(argv, None, f"{argv[0]} not found (looked at {tools.searched(driver_root, argv[0])})")
            )
            continue
        if in_place(recipe, driver_root):
            run = [str(path), *argv[1:]]
        else:
            run = ["chroot", str(driver_root), "/" + str(path.relative_to(driver_root)), *argv[1:]]
        out.append(Command(argv, tools.run(run, env)))
    return tuple(out)


def observe_workload_commands(recipe: Recipe, env: Mapping[str, str]) -> tuple[Command, ...]:
    """Run each validation command from PATH, as the container's own programs would."""
    out = []
    for argv in recipe.validation_commands:
        path = shutil.which(argv[0], path=env.get("PATH", ""))
        if path is None:
            out.append(Command(argv, None, f"{argv[0]} is not on PATH ({env.get('PATH', '')})"))
            continue
        out.append(Command(argv, tools.run([path, *argv[1:]], env)))
    return tuple(out)


def observe_companions(host: HostRoot, inventory: Inventory | None) -> tuple[devnodes.NodeStat, ...]:
    if inventory is None:
        return ()
    return tuple(devnodes.stat_node(host, n) for d in inventory.devices for n in d.companion_nodes)


def companion_listing(recipe: Recipe) -> tuple[str, ...]:
    """Each companion pattern with its `{index+N}` made `{index}`: for listing what is in /dev."""
    out = []
    for pattern in recipe.companion_nodes:
        head, _, rest = pattern.partition("{index")
        out.append(f"{head}{{index}}{rest.partition('}')[2]}" if rest else pattern)
    return tuple(out)


def observe_workload_companions(recipe: Recipe, host: HostRoot) -> tuple[devnodes.OpenResult, ...]:
    """Every node in the container's /dev that looks like a companion node of the recipe, opened."""
    found: dict[str, None] = {}
    for pattern in companion_listing(recipe):
        try:
            found.update(dict.fromkeys(devnodes.matching_nodes(host, pattern)))
        except ValueError:
            continue
    return tuple(devnodes.open_node(host, n) for n in found)


# -- pure ----------------------------------------------------------------------------------------


def _sim(recipe: Recipe) -> str:
    return " (SIMULATED, not real hardware)" if recipe.simulated else ""


def check_driver_companions(
    recipe: Recipe, inventory: Inventory | None, stats: Sequence[devnodes.NodeStat], dev_root: str
) -> Result:
    name = "companion nodes"
    if not recipe.companion_nodes:
        return Result.skipped(name, "the recipe declares none")
    if inventory is None or not inventory.devices:
        return Result.skipped(name, "needs the inventory")
    expected = [(d, n) for d in inventory.devices for n in d.companion_nodes]
    by_node = {s.path: s for s in stats}
    problems = []
    seen: dict[tuple[int, int], str] = {}
    for d, node in expected:
        st = by_node.get(node) or devnodes.NodeStat(node, node, "absent")
        if st.kind == "absent":
            problems.append(f"{node} of device {d.index} ({d.uuid}) is missing (looked at {st.host_path})")
        elif st.kind != "char":
            problems.append(f"{node} of device {d.index} is not a character device ({st.detail})")
        elif (st.major, st.minor) in seen:
            problems.append(
                f"{node} of device {d.index} is c {st.major}:{st.minor}, as {seen[st.major, st.minor]}"
            )
        else:
            seen[st.major, st.minor] = node
    if not expected:
        problems.append(
            f"the driver lists no companion node for any device (the recipe has {', '.join(recipe.companion_nodes)})"
        )
    if problems:
        return Result.failed(
            name,
            f"{len(problems)} of {len(expected)} companion nodes wrong",
            f"{problems[0]}; check that {dev_root} is the node's /dev and that the driver made every node",
            problems,
        )
    return Result.passed(name, f"{len(expected)} companion nodes are character devices{_sim(recipe)}")


def check_files(recipe: Recipe, found: Sequence[Found], driver_root: str) -> Result:
    name = "driver files"
    if not found:
        return Result.skipped(name, "the recipe's default capabilities name no libraries or binaries")
    missing = [f for f in found if not f.paths]
    details = [f"{f.capability} {f.kind} {f.name}: {', '.join(f.paths) or 'not found'}" for f in found]
    if missing:
        what = ", ".join(f"{f.kind} {f.name} ({f.capability})" for f in missing)
        return Result.failed(
            name,
            f"{len(missing)} of {len(found)} not found",
            f"not under the driver root {driver_root}: {what}; the driver's files are incomplete or the "
            "recipe's driverRoot is not where they are",
            details,
        )
    return Result.passed(name, f"{len(found)} libraries and binaries found under {driver_root}", details)


def _first_line(run: tools.ToolRun) -> str:
    lines = (run.stdout.strip() or run.stderr.strip()).splitlines()
    return lines[0][:200] if lines else "(no output)"


def check_commands(recipe: Recipe, commands: Sequence[Command], hint: str) -> Result:
    name = "validation commands"
    if not commands:
        return Result.skipped(name, "the recipe declares none")
    details = []
    problems = []
    for c in commands:
        shown = " ".join(c.argv)
        if c.run is None:
            problems.append(f"`{shown}` did not run: {c.note}; {hint}")
            details.append(f"{shown}: not run ({c.note})")
        elif not c.run.ok:
            problems.append(f"`{shown}` failed ({c.run.failure()}); {hint}")
            details.append(f"{shown}: {c.run.failure()}")
        else:
            details.append(f"{shown}: {_first_line(c.run)}")
    if problems:
        return Result.failed(name, f"{len(problems)} of {len(commands)} failed", problems[0], details)
    first = commands[0]
    assert first.run is not None
    return Result.passed(
        name, f"{len(commands)} ran, exit 0{_sim(recipe)}: {_first_line(first.run)}", details
    )


def index_of(recipe: Recipe, node: str) -> int | None:
    """The device index in a primary node's name (`/dev/xclmgmt1` -> 1); None for `{minor}` patterns."""
    if "{index}" not in recipe.device_node:
        return None
    head, _, tail = recipe.device_node.partition("{index}")
    digits = node[len(head) : len(node) - len(tail) if tail else None]
    return int(digits) if node.startswith(head) and node.endswith(tail) and digits.isdigit() else None


def check_workload_companions(
    recipe: Recipe, usable_primary: Sequence[str], companions: Sequence[devnodes.OpenResult], hint: str
) -> Result:
    """The granted device's companions usable, every other companion node refused or absent."""
    name = "companion nodes"
    if not recipe.companion_nodes:
        return Result.skipped(name, "the recipe declares none")
    if len(usable_primary) != 1:
        return Result.skipped(name, "needs exactly one usable device node")
    index = index_of(recipe, usable_primary[0])
    if index is None:
        return Result.skipped(name, f"the device node pattern {recipe.device_node} does not number by index")
    want = {node_path(p, index) for p in recipe.companion_nodes}
    by_node = {r.node.path: r for r in companions}
    details = [f"{r.node.path}: {r.error_name}" for r in companions]
    problems = []
    for node in sorted(want):
        r = by_node.get(node)
        if r is None or r.errno not in USABLE:
            state = "absent" if r is None or r.node.kind == "absent" else r.error_name
            problems.append(f"the granted device's companion node {node} is {state}: {hint}")
    for r in companions:
        if r.node.path not in want and r.errno in USABLE:
            problems.append(
                f"{r.node.path} is usable but belongs to another device: the container can use a device it "
                "was not given; check the device cgroup (is the pod privileged?)"
            )
    if problems:
        return Result.failed(name, f"{len(problems)} problem(s)", problems[0], details)
    return Result.passed(name, f"{', '.join(sorted(want))} usable, no other device's{_sim(recipe)}", details)
