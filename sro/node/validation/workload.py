"""Workload validation: inside a container that asked for one device, exactly that device is usable.

It runs in the operator's `device-plugin-validation` pod: one device of the recipe's resource,
requested through the scheduler and the device plugin, with the `sro` runtime class (whose hook
injects device nodes, libraries and binaries). Checked, as a workload would meet them:
  - the recipe's visible-devices env var (set by the device plugin) names exactly one device;
  - the recipe's tool runs and lists exactly that device;
  - that device's node opens (ENXIO for the simulated driver, which has no kernel side; success on
    real hardware) and every other device node of the recipe is absent or refused (EPERM);
  - the device cgroup refuses a device nobody granted (a probe node of the same major; needs
    CAP_MKNOD, skipped without it);
  - each library group the container asked for is in the linker cache and loads by soname
    (`dlopen("libsimgpu.so.1")` finds it only if the hook's ldconfig ran);
  - for an NVML recipe, `libnvidia-ml.so.1` loads by soname and lists exactly the granted GPU
    (`nvmlview`);
  - on real NVIDIA hardware, a CUDA program (vectorAdd when on PATH, or `--cuda-sample CMD`) runs.
On sro's simulated NVIDIA driver (`--simulated-driver`, or its NVML state the hook mounted at
/run/sro-simnvml) there is no CUDA: the CUDA program and the compute libraries (libcuda) are
skipped, saying so; NVML, nvidia-smi and the device nodes are checked as on hardware.

`observe` gathers facts from the container (env, /dev, ld.so.cache, runs); `evaluate` is pure.
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sro.api.recipes import Recipe
from sro.host import devnodes, ldcache
from sro.host.root import HostRoot
from sro.node.validation import nvmlview, tools
from sro.node.validation.report import Report, Result

Loader = Callable[[str], None]  # loads a library by soname; raises OSError with the loader's message
USABLE = (0, errno.ENXIO)  # opened, or allowed by the device cgroup with no kernel driver behind it
DEFAULT_CUDA_SAMPLE = "vectorAdd"
CUDA_TIMEOUT_S = 300.0
# Keywords of the visible-devices variable (NVIDIA container toolkit semantics).
KEYWORDS = ("all", "none", "void")
HOOK_HINT = (
    "check the pod's runtimeClassName (the `sro` runtime class) and the runtime hook's log on the node"
)


@dataclass(frozen=True)
class Library:
    capability: str
    pattern: str
    found: tuple[tuple[str, str, str], ...]  # (soname, path, load error or "") per soname in the cache


@dataclass(frozen=True)
class Probe:
    major: int
    minor: int
    errno: int | None  # None: the probe node could not be made (no CAP_MKNOD)


@dataclass(frozen=True)
class WorkloadFacts:
    recipe: Recipe
    visible: str | None  # the visible-devices variable's value (None: unset)
    capabilities: tuple[str, ...]  # library/binary groups the container asked for
    nodes: tuple[devnodes.OpenResult, ...]  # every per-device node of the recipe present in /dev
    control: tuple[devnodes.OpenResult, ...]  # the recipe's control nodes
    probe: Probe | None  # None: not tried (no usable node to take a major from)
    libraries: tuple[Library, ...]
    ldcache_error: str = ""
    tool: tools.ToolRun | None = None
    tool_note: str = ""  # why the tool did not run
    cuda: tools.ToolRun | None = None
    cuda_note: str = ""  # why no CUDA program ran
    simulated_driver: bool = False  # sro's simulated driver: no CUDA behind the devices
    nvml: nvmlview.NvmlView | None = None
    nvml_note: str = "skipped: not asked"  # why NVML was not asked


# -- pure helpers --------------------------------------------------------------------------------


def split_ids(value: str) -> tuple[str, ...]:
    """Device ids of a visible-devices value; a CDI name `kind=name` counts as `name`."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    return tuple(dict.fromkeys(i.partition("=")[2] if "=" in i else i for i in items))


def capabilities(recipe: Recipe, env: Mapping[str, str]) -> tuple[str, ...]:
    """The capability groups the container asked for: the env var, `all`, or the recipe's defaults."""
    known = set(recipe.libraries) | set(recipe.binaries) | set(recipe.directories)
    raw = env.get(recipe.capabilities_env, "") if recipe.capabilities_env else ""
    wanted = [c.strip() for c in raw.split(",") if c.strip()] or list(recipe.default_capabilities)
    if "all" in wanted:
        return tuple(sorted(known))
    return tuple(c for c in dict.fromkeys(wanted) if c in known)


def the_one_device(facts: WorkloadFacts) -> str | None:
    ids = split_ids(facts.visible or "")
    return ids[0] if len(ids) == 1 and ids[0].lower() not in KEYWORDS else None


def expected_node(recipe: Recipe, device: str | None, listed: tuple[tools.Listed, ...]) -> str | None:
    """The node of the named device when the recipe numbers nodes by index (the simulated driver)."""
    if device is None or "{index}" not in recipe.device_node:
        return None
    index = int(device) if device.isdigit() else next((x.index for x in listed if x.uuid == device), None)
    return None if index is None else recipe.device_node.replace("{index}", str(index))


def probe_minor(taken: set[int]) -> int:
    """A minor number for the probe node that no usable node of the container has."""
    candidates: list[int] = [*range(200, 256), *range(200)]
    return next(m for m in candidates if m not in taken)


def _listed(facts: WorkloadFacts) -> tuple[tools.Listed, ...]:
    return tools.parse_listing(facts.tool.stdout) if facts.tool is not None and facts.tool.ok else ()


def _state(r: devnodes.OpenResult) -> str:
    if r.errno in USABLE:
        return "usable" + (" (opened)" if r.errno == 0 else " (ENXIO: allowed, no kernel driver behind it)")
    if r.errno == errno.EPERM:
        return "refused by the device cgroup (EPERM)"
    return f"not usable ({r.error_name})"


# -- checks --------------------------------------------------------------------------------------


def check_visible(facts: WorkloadFacts) -> Result:
    var, res = facts.recipe.visible_devices_env, facts.recipe.resource
    name = "visible devices"
    ids = split_ids(facts.visible or "")
    ask = f"the pod must request exactly `{res}: 1` in resources.limits, and the device plugin must run on the node"
    if not ids:
        state = "is not set" if facts.visible is None else "is empty"
        return Result.failed(
            name, f"{var} {state}", f"{var} {state}: no device was allocated to this container; {ask}"
        )
    if len(ids) == 1 and ids[0].lower() in KEYWORDS:
        return Result.failed(
            name, f"{var}={ids[0]}", f"{var}={ids[0]} names no single device: expected one device id; {ask}"
        )
    if len(ids) != 1:
        return Result.failed(
            name,
            f"{var} names {len(ids)} devices",
            f"{var}={facts.visible} names {len(ids)} devices, expected exactly one; {ask}",
        )
    return Result.passed(name, f"{var} names one device: {ids[0]}")


def check_tool(facts: WorkloadFacts) -> Result:
    name = "tool"
    if facts.tool is None:
        if facts.tool_note.startswith("skipped"):
            return Result.skipped(name, facts.tool_note.removeprefix("skipped: "))
        return Result.failed(
            name, facts.tool_note, f"{facts.tool_note}: the driver's binaries were not injected; {HOOK_HINT}"
        )
    run = facts.tool
    if not run.ok:
        return Result.failed(
            name,
            f"`{run.command}` failed",
            f"`{run.command}` failed in the container ({run.failure()}); the injected driver files do not "
            f"work here; {HOOK_HINT}",
        )
    listed = tools.parse_listing(run.stdout)
    device = the_one_device(facts)
    if len(listed) != 1:
        return Result.failed(
            name,
            f"`{run.command}` lists {len(listed)} devices",
            f"`{run.command}` lists {len(listed)} devices in the container, expected exactly the granted one",
            [f"GPU {x.index}: {x.uuid}" for x in listed],
        )
    if device is not None and not device.isdigit() and listed[0].uuid != device:
        return Result.failed(
            name,
            "lists another device",
            f"`{run.command}` lists {listed[0].uuid}, but {facts.recipe.visible_devices_env} names {device}",
        )
    return Result.passed(name, f"`{run.command}` lists the device: GPU {listed[0].index} {listed[0].uuid}")


def check_nodes(facts: WorkloadFacts) -> Result:
    name = "device nodes"
    recipe = facts.recipe
    want = expected_node(recipe, the_one_device(facts), _listed(facts))
    usable = [r for r in facts.nodes if r.errno in USABLE]
    details = [f"{r.node.path}: {_state(r)}" for r in (*facts.nodes, *facts.control)]
    problems: list[str] = []
    if not usable:
        if want is None:
            problems.append(f"no device node matching {recipe.device_node} is usable")
        else:
            got = next((r for r in facts.nodes if r.node.path == want), None)
            state = "absent" if got is None else _state(got)
            problems.append(f"the granted device's node {want} is {state}")
        problems[-1] += (
            "; the runtime hook did not inject it or the device cgroup does not allow it "
            f"(the device plugin's allocation); {HOOK_HINT}"
        )
    elif len(usable) > 1:
        problems.append(
            f"{len(usable)} device nodes are usable ({', '.join(r.node.path for r in usable)}), expected only "
            "the granted one: the container can use devices it was not given; check the device cgroup "
            "(is the pod privileged?) and the runtime hook"
        )
    elif want is not None and usable[0].node.path != want:
        problems.append(
            f"{usable[0].node.path} is usable but the granted device's node is {want}: the runtime "
            f"injected the wrong device; {HOOK_HINT}"
        )
    for r in facts.nodes:
        if r not in usable and r.errno != errno.EPERM:
            problems.append(f"{r.node.path} is {_state(r)}; expected usable (granted) or EPERM (not granted)")
    for r in facts.control:
        if r.node.kind != "absent" and r.errno not in USABLE:
            problems.append(
                f"control node {r.node.path} is {_state(r)}: every container using the device needs it; "
                f"{HOOK_HINT}"
            )
    if problems:
        return Result.failed(name, f"{len(problems)} problem(s)", problems[0], details)
    only = usable[0].node.path
    return Result.passed(name, f"only {only} is usable; every other device node absent or refused", details)


def check_cgroup(facts: WorkloadFacts) -> Result:
    name = "device cgroup"
    p = facts.probe
    if p is None:
        return Result.skipped(name, "no usable device node to take a major number from")
    if p.errno is None:
        return Result.skipped(name, f"cannot create a probe node c {p.major}:{p.minor} (no CAP_MKNOD)")
    if p.errno == errno.EPERM:
        return Result.passed(name, f"a device nobody granted (c {p.major}:{p.minor}) is refused (EPERM)")
    return Result.failed(
        name,
        f"a device nobody granted (c {p.major}:{p.minor}) is not refused",
        f"opening c {p.major}:{p.minor}, a device this container was not granted, gave "
        f"{errno.errorcode.get(p.errno, p.errno) if p.errno else 'success'} instead of EPERM: the container "
        "runs without a device cgroup restriction (privileged, or the runtime lets every device through)",
    )


def check_libraries(facts: WorkloadFacts) -> Result:
    name = "libraries"
    groups = [c for c in facts.capabilities if c in facts.recipe.libraries]
    if not groups:
        return Result.skipped(name, "the container asked for no library group of the recipe")
    details: list[str] = []
    problems: list[str] = []
    loaded = 0
    for cap in groups:
        libs = [lib for lib in facts.libraries if lib.capability == cap]
        if facts.simulated_driver and not any(lib.found for lib in libs):
            # a simulated driver has NVML but no CUDA: a group it lacks is not the hook's fault
            details.append(f"{cap}: none in the linker cache ({tools.NO_CUDA})")
            continue
        if not any(lib.found for lib in libs):
            where = f" ({facts.ldcache_error})" if facts.ldcache_error else ""
            pats = ", ".join(lib.pattern for lib in libs)
            problems.append(
                f"no library of the {cap!r} group ({pats}) is in the linker cache{where}: the runtime hook "
                f"did not inject the driver's libraries or its ldconfig did not run; {HOOK_HINT}"
            )
        for lib in libs:
            if not lib.found:
                details.append(f"{lib.pattern}: not in the linker cache")
            for soname, path, error in lib.found:
                if error:
                    problems.append(f"{soname} (-> {path}) is in the linker cache but does not load: {error}")
                    details.append(f"{soname} -> {path}: does not load")
                else:
                    loaded += 1
                    details.append(f"{soname} -> {path}: loads")
    if problems:
        return Result.failed(name, f"{len(problems)} problem(s)", problems[0], details)
    if not loaded:
        return Result.skipped(name, f"no library of {', '.join(groups)} on this driver ({tools.NO_CUDA})")
    return Result.passed(name, f"{loaded} libraries load by soname ({', '.join(groups)})", details)


def check_nvml(facts: WorkloadFacts) -> Result:
    usable = [r.node for r in facts.nodes if r.errno in USABLE]
    return nvmlview.check(
        facts.nvml,
        facts.nvml_note,
        the_one_device(facts),
        usable[0].minor if len(usable) == 1 else None,
        _listed(facts),
        HOOK_HINT,
    )


def check_cuda(facts: WorkloadFacts) -> Result:
    name = "cuda sample"
    if facts.cuda is None:
        if facts.cuda_note.startswith("skipped"):
            return Result.skipped(name, facts.cuda_note.removeprefix("skipped: "))
        return Result.failed(name, facts.cuda_note, f"{facts.cuda_note}; pass --cuda-sample CMD")
    run = facts.cuda
    if not run.ok:
        return Result.failed(
            name,
            f"`{run.command}` failed",
            f"`{run.command}` failed ({run.failure()}): the GPU cannot run CUDA work; check `nvidia-smi` "
            "and the node's kernel log for Xid errors",
        )
    return Result.passed(name, f"`{run.command}` succeeded")


def evaluate(facts: WorkloadFacts) -> tuple[Result, ...]:
    return (
        check_visible(facts),
        check_tool(facts),
        check_nodes(facts),
        check_cgroup(facts),
        check_libraries(facts),
        check_nvml(facts),
        check_cuda(facts),
    )


# -- observing the container ---------------------------------------------------------------------


def load_by_soname(soname: str) -> None:
    ctypes.CDLL(soname)


def _tool(recipe: Recipe, caps: tuple[str, ...], env: Mapping[str, str]) -> tuple[tools.ToolRun | None, str]:
    name = tools.tool_name(recipe)
    if name is None:
        return None, "skipped: the recipe names no binaries"
    group = next((g for g, names in recipe.binaries.items() if name in names), "")
    if group not in caps:
        return None, f"skipped: the container did not ask for the {group!r} group that holds {name}"
    path = shutil.which(name, path=env.get("PATH", ""))
    if path is None:
        return None, f"{name} is not on PATH ({env.get('PATH', '')})"
    return tools.run([path, "-L"], env), ""


def _cuda(
    recipe: Recipe, sample: str | None, env: Mapping[str, str], simulated_driver: bool = False
) -> tuple[tools.ToolRun | None, str]:
    if recipe.backend != "nvml":
        return None, f"skipped: {recipe.name} devices are SIMULATED: there is no CUDA to run on them"
    if simulated_driver:
        return None, f"skipped: {tools.NO_CUDA} (the driver is sro's simulated one: nothing runs CUDA)"
    if sample is not None and sample.strip().lower() in ("", "none"):
        return None, "skipped: disabled (--cuda-sample none)"
    argv = shlex.split(sample) if sample is not None else [DEFAULT_CUDA_SAMPLE]
    if shutil.which(argv[0], path=env.get("PATH", "")) is None:
        if sample is None:
            return None, (
                f"skipped: {DEFAULT_CUDA_SAMPLE} is not on PATH in this image "
                "(pass --cuda-sample CMD to run a CUDA program)"
            )
        return None, f"{argv[0]} is not on PATH ({env.get('PATH', '')})"
    return tools.run(argv, env, timeout=CUDA_TIMEOUT_S), ""


def observe(
    recipe: Recipe,
    env: Mapping[str, str],
    host: HostRoot,
    cuda_sample: str | None = None,
    loader: Loader = load_by_soname,
    simulated_driver: bool = False,
) -> WorkloadFacts:
    caps = capabilities(recipe, env)
    tool, tool_note = _tool(recipe, caps, env)
    nodes = tuple(devnodes.open_node(host, n) for n in devnodes.matching_nodes(host, recipe.device_node))
    control = tuple(devnodes.open_node(host, n) for n in recipe.control_nodes)
    usable = [r.node for r in nodes if r.errno in USABLE]
    probe = None
    if usable:
        major = usable[0].major
        taken = {r.node.minor for r in (*nodes, *control) if r.errno in USABLE and r.node.major == major}
        minor = probe_minor(taken)
        probe = Probe(major, minor, devnodes.probe_device(host, major, minor))
    try:
        cache, cache_error = ldcache.read(host), ""
    except (OSError, ldcache.LdCacheError) as e:
        cache, cache_error = (), str(e)
    libraries = []
    for cap in caps:
        for pattern in recipe.libraries.get(cap, ()):
            found = []
            matches = {e.soname: e.path for e in cache if fnmatch.fnmatchcase(e.soname, pattern)}
            for soname, path in matches.items():
                try:
                    loader(soname)
                    error = ""
                except OSError as e:
                    error = str(e)
                found.append((soname, path, error))
            libraries.append(Library(cap, pattern, tuple(found)))
    cuda, cuda_note = _cuda(recipe, cuda_sample, env, simulated_driver)
    nvml, nvml_note = nvmlview.observe(recipe, caps)
    return WorkloadFacts(
        recipe,
        env.get(recipe.visible_devices_env),
        caps,
        nodes,
        control,
        probe,
        tuple(libraries),
        cache_error,
        tool,
        tool_note,
        cuda,
        cuda_note,
        simulated_driver,
        nvml,
        nvml_note,
    )


def validate(
    recipe: Recipe,
    env: Mapping[str, str],
    host: HostRoot,
    cuda_sample: str | None = None,
    loader: Loader = load_by_soname,
    simulated_driver: bool = False,
) -> Report:
    facts = observe(recipe, env, host, cuda_sample, loader, simulated_driver)
    sim = ", SIMULATED driver" if simulated_driver else ""
    header = f"recipe {recipe.name}{sim}, {recipe.visible_devices_env}={facts.visible or ''}"
    return Report("workload", header, evaluate(facts))
