"""Container start time with the OCI hook and with the runc wrapper, against plain runc, same run.

Each case is timed over interleaved runs (plain, hooked, idle, wrapped, ... then the same in reverse
order, so no case always follows another) of `runc run` of a busybox `true` on a temp bundle, so
machine noise hits every case alike. A pass gives each case's median; "added" is that median minus
plain runc's median of the same pass. A pass is one pair: SRO_BENCH_PAIRS passes (default 5) of
SRO_BENCH_ROUNDS rounds (default 25); a figure is the median over passes with the spread of the
per-pass ratios.
The goals (issue 26) compare what sro adds to a container start with ONE Python start measured in
the same rounds: `<python> -I -S -c pass`, the interpreter the hook and the wrapper run with, with
the same flags they start with, doing nothing — the floor of any Python process. (`python -I -c
pass` is not that: in a virtual environment it also runs site and every .pth file installed there,
an editable install's finder, setuptools' distutils shim; it is printed apart, "what skipping site
saves".) The hook active (the container got GPU 0 from the device plugin: its device node and the
control node in `linux.devices` with their cgroup rules, as the kubelet writes Allocate's device-specs,
and `SRO_VISIBLE_DEVICES=0`; the hook injects 2 libraries, 1 binary and runs ldconfig; before a pass
each active case's container runs once listing what it sees, and the bench fails unless the library
and binary are there) and the hook with 2 custom recipes installed (issue 28: the FPGA and SmartNIC examples'
canonical JSON, as `sro runtime install --recipe-file` writes it, each loaded and checked by the
hook on every start) may add at most 1.5x one Python start; the runtime wrapper at most 2x.
For scale: runc's own cost of running any hook (`/bin/true` as a prestart hook) and of a Python
hook that does nothing (`python -I -S -c pass` as the prestart hook), the floor for any Python hook,
and one that only reads the state runc writes on its stdin (every real hook must; runc writes it some
ms after the hook starts), and the same launcher whose Python only execs runc, with that hook: any
two-Python wrapper's floor (mode hook: a goal not met names both floors, measured in the same rounds),
or with a /bin/true hook: a one-Python wrapper's floor (mode cdi, whose ldcache hook is the host's
ldconfig itself).
The same active hook is also timed as a node runs it (`sro runtime install`): the host's python3
(rootmanifest.DEFAULT_PYTHON) importing from the zipapp (bundling), against one start of that
interpreter; the rows above use this checkout's tree and the bench's interpreter.
Needs root, runc and busybox; gcc if the simulated driver module is absent.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import PAIRS, Figure, paired, paired_figure
from sro.node.runtime.rootmanifest import DEFAULT_PYTHON

RUNC = "/usr/sbin/runc"
PYTHON = str(Path(sys.prefix) / "bin" / "python")
ROUNDS = int(os.environ.get("SRO_BENCH_ROUNDS", "25"))
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PY_START = [PYTHON, "-I", "-S", "-c", "pass"]  # one Python start: how the hook and the wrapper start
PY_SITE = [PYTHON, "-I", "-c", "pass"]  # the same with site and the environment's .pth files
HOST_PYTHON = DEFAULT_PYTHON  # what a node's hook runs with (`sro runtime install --python`)


def _driver(base: Path) -> tuple[Path, Path]:
    driver_root, dev_root = base / "driver", base / "dev"
    try:
        from sro.devices import simconfig, simulated_driver

        with open("/proc/devices") as f:
            simulated_driver.install(simconfig.parse({"count": 2}), driver_root, dev_root, f.read())
        return driver_root, dev_root
    except ImportError:
        pass
    (driver_root / "lib").mkdir(parents=True)
    (driver_root / "bin").mkdir()
    src = base / "s.c"
    src.write_text("int simgpu_version(void) { return 1; }\n")
    for so in ("libsimgpu.so.1", "libsimgpu-ml.so.1"):
        subprocess.run(
            ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{so}", "-o", str(driver_root / "lib" / so), str(src)],
            check=True,
        )
    (driver_root / "bin" / "simgpu-smi").write_text("#!/bin/sh\necho ok\n")
    dev_root.mkdir()
    for name, minor in (("sro-simgpu0", 0), ("sro-simgpu1", 1), ("sro-simgpuctl", 255)):
        os.mknod(dev_root / name, 0o666 | 0o020000, os.makedev(242, minor))
    return driver_root, dev_root


def _bundle(base: Path, name: str, spec: dict[str, Any]) -> Path:
    b = base / name
    rootfs = b / "rootfs"
    for d in ("bin", "sbin", "etc", "dev", "proc", "sys", "tmp", "lib"):
        (rootfs / d).mkdir(parents=True)
    shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
    subprocess.run(["chroot", str(rootfs), "/bin/busybox", "--install", "-s", "/bin"], check=True)
    (b / "config.json").write_text(json.dumps(spec))
    return b


def _allocation(dev_root: Path) -> dict[str, Any]:
    """What the kubelet writes into the OCI spec for the device plugin's Allocate of GPU 0 (strategy
    `device-specs`, always on): the device node and the control node, each with its cgroup allow rule,
    at the numbers the simulated driver gave them. The only allocation the hook and the wrapper believe
    for an unprivileged container (issue 21): without it `SRO_VISIBLE_DEVICES=0` alone injects nothing."""
    devices, rules = [], []
    for name in ("sro-simgpu0", "sro-simgpuctl"):
        rdev = (dev_root / name).stat().st_rdev
        major, minor = os.major(rdev), os.minor(rdev)
        devices.append({"path": f"/dev/{name}", "type": "c", "major": major, "minor": minor,
                        "fileMode": 0o666, "uid": 0, "gid": 0})  # fmt: skip
        rules.append({"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"})
    return {"devices": devices, "rules": rules}


def _spec(
    base: Path, env: list[str], hooks: dict[str, Any] | None = None, alloc: dict[str, Any] | None = None
) -> dict[str, Any]:
    d = base / "spec"
    if not (d / "config.json").exists():
        d.mkdir(exist_ok=True)
        subprocess.run([RUNC, "spec"], cwd=d, check=True)
    spec: dict[str, Any] = json.loads((d / "config.json").read_text())
    spec["process"].update(terminal=False, args=["true"], env=["PATH=/bin", *env])
    spec["root"] = {"path": "rootfs", "readonly": False}
    if hooks:
        spec["hooks"] = hooks
    if alloc:
        spec["linux"].setdefault("devices", []).extend(alloc["devices"])
        spec["linux"].setdefault("resources", {}).setdefault("devices", []).extend(alloc["rules"])
    return spec


CHECK = (
    "find / -path /proc -prune -o -path /sys -prune -o -name 'libsimgpu*' -print -o -name simgpu-smi -print"
)


def _check_injected(name: str, runtime: str, state: Path, bundle: Path) -> None:
    """Run the case's container once with a shell that lists what it sees; fail loudly unless the
    driver's library and binary are there (the hook or the wrapper really injected)."""
    cfg = bundle / "config.json"
    orig = bundle / "config.orig.json"
    saved = cfg.read_bytes()
    spec = json.loads(orig.read_bytes() if orig.exists() else saved)
    spec["process"]["args"] = ["sh", "-c", CHECK]
    cfg.write_text(json.dumps(spec))
    cid = f"check-{bundle.name}"
    try:
        res = subprocess.run([runtime, "--root", str(state), "run", "--bundle", str(bundle), cid],
                             capture_output=True, stdin=subprocess.DEVNULL)  # fmt: skip
    finally:
        subprocess.run([RUNC, "--root", str(state), "delete", "-f", cid], capture_output=True)
        cfg.write_bytes(saved)
    out = res.stdout.decode(errors="replace")
    if res.returncode != 0 or "libsimgpu.so.1" not in out or "simgpu-smi" not in out:
        raise RuntimeError(f"{name}: nothing injected (rc {res.returncode}): {out!r} {res.stderr!r}")


def _timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    if res.returncode != 0 and "state" not in argv:
        raise RuntimeError(f"{argv}: {res.stderr.decode(errors='replace')}")
    return dt


def _runc_run(runtime: str, state: Path, bundle: Path, n: int) -> float:
    cid = f"bench-{bundle.name}-{n}"
    try:
        return _timed([runtime, "--root", str(state), "run", "--bundle", str(bundle), cid])
    finally:
        subprocess.run([RUNC, "--root", str(state), "delete", "-f", cid], capture_output=True)


Case = Callable[[int], float]


def _container(runtime: str, state: Path, bundle: Path) -> Case:
    def once(n: int) -> float:
        # a bundle the wrapper edited gets its original config back (it would add the hook once more)
        orig = bundle / "config.orig.json"
        if orig.exists():
            shutil.copy2(orig, bundle / "config.json")
        return _runc_run(runtime, state, bundle, n)

    return once


def _command(argv: list[str]) -> Case:
    return lambda n: _timed(argv)


def _medians(cases: dict[str, Case]) -> dict[str, float]:
    """One pass: interleaved runs of every case, in reverse order every other round; each one's median."""
    samples: dict[str, list[float]] = {k: [] for k in cases}
    names = list(cases)
    for i in range(ROUNDS + 2):
        for name in names if i % 2 == 0 else reversed(names):
            dt = cases[name](i)
            if i >= 2:  # warm-up
                samples[name].append(dt)
    return {k: statistics.median(v) for k, v in samples.items()}


def _median_cmd(argv: list[str]) -> float:
    return statistics.median(_timed(argv) for _ in range(ROUNDS))


def _paired_cmds(argv: list[str], base: list[str]) -> tuple[list[float], list[float]]:
    """Medians of ROUNDS runs of each command, in PAIRS alternating pairs, in ms."""
    ms, bs = paired(lambda: _median_cmd(argv), lambda: _median_cmd(base), PAIRS)
    return [x * 1000.0 for x in ms], [x * 1000.0 for x in bs]


def _custom_recipes(base: Path) -> tuple[str, ...]:
    """The FPGA and SmartNIC examples installed as `sro runtime install --recipe-file` does: the hook
    options that name them (their driver roots are empty: the container asks for a GPU)."""
    from sro.api.recipes import recipe_from_file
    from sro.node.runtime.installedrecipes import document

    opts: list[str] = []
    for example in ("fpga", "smartnic"):
        recipe = recipe_from_file(EXAMPLES / example / "recipe.yaml")
        path = base / "runtime" / "recipes" / f"{recipe.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(document(recipe).data)
        opts += ["--recipe-file", str(path), "--driver-root", f"{recipe.name}={base / 'empty'}"]
    return tuple(opts)


def run() -> list[Figure]:
    from sro.node.runtime import bundling, launcher
    from sro.node.runtime.specedits import HookCommand, bootstrap, package_root

    base = Path(tempfile.mkdtemp(prefix="sro-bench-hook-"))
    try:
        driver_root, dev_root = _driver(base)
        opts = ("--recipe", "simulated-gpu", "--driver-root", str(driver_root), "--dev-root", str(dev_root))
        entry = HookCommand(PYTHON, opts).entry("prestart")
        asking = ["SRO_VISIBLE_DEVICES=0"]  # the plugin's envvar strategy, with its device-specs:
        alloc = _allocation(dev_root)
        plain = _bundle(base, "plain", _spec(base, asking, alloc=alloc))
        hooked = _bundle(base, "hooked", _spec(base, asking, {"prestart": [entry]}, alloc))
        sim_root = ("--driver-root", f"simulated-gpu={driver_root}", "--dev-root", str(dev_root))
        custom_entry = HookCommand(PYTHON, ("--recipe", "simulated-gpu", *sim_root, *_custom_recipes(base)))
        hooked_custom = _bundle(
            base, "hooked-custom", _spec(base, asking, {"prestart": [custom_entry.entry("prestart")]}, alloc)
        )
        idle = _bundle(base, "idle", _spec(base, [], {"prestart": [entry]}))
        archive = base / "runtime" / bundling.ARCHIVE_NAME  # as `sro runtime install` writes it
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.write_bytes(bundling.build(str(archive)))
        installed_entry = HookCommand(HOST_PYTHON, opts, root=str(archive)).entry("prestart")
        installed = _bundle(base, "installed", _spec(base, asking, {"prestart": [installed_entry]}, alloc))
        wrapped = {}
        for mode in ("hook", "cdi"):
            script = base / f"sro-runc-{mode}"
            launcher.write(str(script), PYTHON, RUNC, mode=mode, hook_options=opts)
            b = _bundle(base, f"wrapped-{mode}", _spec(base, asking, alloc=alloc))
            shutil.copy2(b / "config.json", b / "config.orig.json")
            wrapped[mode] = (str(script), b)
        wrapped_idle = _bundle(base, "wrapped-idle", _spec(base, []))
        true_hook = {"path": "/bin/true", "args": ["true"], "env": ["PATH=/bin"]}
        floor = _bundle(base, "floor", _spec(base, asking, {"prestart": [true_hook]}, alloc))
        py_hook = {"path": PYTHON, "args": [PYTHON, "-I", "-S", "-c", "pass"], "env": ["PATH=/bin"]}
        py_floor = _bundle(base, "py-floor", _spec(base, asking, {"prestart": [py_hook]}, alloc))
        # every real hook reads the state runc writes on its stdin, which runc writes late (statewait)
        read_hook = {**py_hook, "args": [PYTHON, "-I", "-S", "-c", "import sys;sys.stdin.buffer.read()"]}
        py_read = _bundle(base, "py-read", _spec(base, asking, {"prestart": [read_hook]}, alloc))
        # the wrapper's floor: the same launcher, its Python only execs runc, then a do-nothing Python hook
        exec_only = "import posix,sys;a=sys.argv[1:];i=a.index('--');posix.execv(a[1],[a[1],*a[i+1:]])"
        wrap_floor = base / "sro-runc-floor"
        wrap_floor.write_text(
            launcher.render(PYTHON, RUNC, hook_options=opts).replace(
                shlex.quote(bootstrap("sro.node.runtime.wrapper", package_root())), shlex.quote(exec_only)
            )
        )
        wrap_floor.chmod(0o755)
        state = base / "state"
        checks = {"hooked": (RUNC, hooked), "hooked-custom": (RUNC, hooked_custom), "installed": (RUNC, installed),
                  **wrapped}  # fmt: skip
        for name, (runtime, bundle) in checks.items():
            _check_injected(name, runtime, state, bundle)
        runs = [
            _medians(
                {
                    "plain": _container(RUNC, state, plain),
                    "hooked": _container(RUNC, state, hooked),
                    "hooked-custom": _container(RUNC, state, hooked_custom),
                    "idle": _container(RUNC, state, idle),
                    "wrap-hook": _container(wrapped["hook"][0], state, wrapped["hook"][1]),
                    "wrap-cdi": _container(wrapped["cdi"][0], state, wrapped["cdi"][1]),
                    "wrap-idle": _container(wrapped["hook"][0], state, wrapped_idle),
                    "true-hook": _container(RUNC, state, floor),
                    "py-hook": _container(RUNC, state, py_floor),
                    "wrap-floor": _container(str(wrap_floor), state, py_floor),
                    "py-read-hook": _container(RUNC, state, py_read),
                    # mode cdi's floor: one Python process (the wrapper); its hook is no Python
                    "wrap-floor-1": _container(str(wrap_floor), state, floor),
                    "installed": _container(RUNC, state, installed),
                    "py-start": _command(PY_START),
                    "host-py-start": _command([HOST_PYTHON, *PY_START[1:]]),
                    "py-site": _command(PY_SITE),
                }
            )
            for _ in range(PAIRS)
        ]
        hook_noop = _paired_cmds([*HookCommand(PYTHON).argv(), "poststop"], PY_START)
        launcher_state = _paired_cmds(
            [wrapped["hook"][0], "--root", str(state), "state", "none"],
            [RUNC, "--root", str(state), "state", "none"],
        )
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
    return _figures(runs, hook_noop, launcher_state)


def _figures(
    runs: list[dict[str, float]],
    hook_noop: tuple[list[float], list[float]],
    launcher_state: tuple[list[float], list[float]],
) -> list[Figure]:
    def ms(key: str) -> list[float]:
        return [r[key] * 1000.0 for r in runs]

    def added(key: str) -> list[float]:
        return [(r[key] - r["plain"]) * 1000.0 for r in runs]

    def vs_plain(name: str, key: str, note: str = "") -> Figure:
        add = statistics.median(added(key))
        plain_name = "runc run busybox true, no hook"
        return paired_figure(
            name, "ms", plain_name, ms(key), ms("plain"), goal=None, target=f"added {add:.1f} ms{note}"
        )

    one_start = "one Python start (python -I -S -c pass)"

    def vs_start(name: str, key: str, goal: float) -> Figure:
        return paired_figure(name, "ms", one_start, added(key), ms("py-start"), goal=goal,
                             target=f"added <= {goal:g}x one Python start")  # fmt: skip

    def wrap_vs_start(name: str, key: str) -> Figure:
        # The wrapper is a Python start before runc and, in mode hook, a Python hook after it (mode cdi:
        # the host's ldconfig as its hook, no second Python): where a wrapper that only execs runc plus
        # a do-nothing Python hook already costs more than the goal allows, no two-Python wrapper can
        # meet it; say so with those measurements. Mode cdi's floor is one Python process (below).
        if key == "wrap-cdi":
            return wrap1_vs_start(name, key)
        floor = paired_figure("floor", "ms", one_start, added("wrap-floor"), ms("py-start"), goal=2.0)
        hook_floor = paired_figure("floor", "ms", one_start, added("py-hook"), ms("py-start"), goal=None)
        over = paired_figure("over", "ms", "floor", added(key), added("wrap-floor"), goal=None)
        why = ""
        if floor.met is False:
            why = (f"floors: a Python wrapper that only execs runc + a do-nothing Python prestart hook adds"
                   f" {floor.value:.1f} ms = {floor.ratio:.2f}x one Python start ({floor.baseline:.1f} ms);"
                   f" runc running `python -I -S -c pass` as a hook adds {hook_floor.value:.1f} ms ="
                   f" {hook_floor.ratio:.2f}x; this wrapper adds {over.ratio:.2f}x the first floor")  # fmt: skip
        return paired_figure(name, "ms", one_start, added(key), ms("py-start"), goal=2.0,
                             target="added <= 2x one Python start", why=why)  # fmt: skip

    def with_floor(name: str, key: str, goal: float, floor_key: str, floor_text: str) -> Figure:
        """`key` against one Python start. A hook or wrapper is a process runc (or containerd) starts:
        where the floor (`floor_key`, such a process doing nothing) already costs more than the goal
        allows, nothing of that shape can meet it; say so with that measurement."""
        floor = paired_figure("floor", "ms", one_start, added(floor_key), ms("py-start"), goal=goal)
        over = paired_figure("over", "ms", "floor", added(key), added(floor_key), goal=None)
        why = ""
        if floor.met is False:
            why = (f"floor: {floor_text} adds {floor.value:.1f} ms = {floor.ratio:.2f}x one Python start"
                   f" ({floor.baseline:.1f} ms); this adds {over.ratio:.2f}x that floor")  # fmt: skip
        return paired_figure(name, "ms", one_start, added(key), ms("py-start"), goal=goal,
                             target=f"added <= {goal:g}x one Python start", why=why)  # fmt: skip

    def wrap1_vs_start(name: str, key: str) -> Figure:
        return with_floor(
            name,
            key,
            2.0,
            "wrap-floor-1",
            "a Python wrapper that only execs runc + a /bin/true prestart hook",
        )

    def hook_vs_start(name: str, key: str) -> Figure:
        return with_floor(
            name, key, 1.5, "py-hook", "runc running a do-nothing Python prestart hook (python -I -S -c pass)"
        )

    def wrap_vs_floor(name: str, key: str) -> Figure:
        # what the goal's `why` cannot excuse: the wrapper's cost beyond the floor of any Python wrapper
        return paired_figure(name, "ms", "launcher + exec-only Python + do-nothing Python hook, added",
                             added(key), added("wrap-floor"), goal=1.5,
                             target="<= 1.5x any Python wrapper's floor")  # fmt: skip

    def hook_vs_floor(name: str, key: str) -> Figure:
        return paired_figure(name, "ms", "runc + do-nothing Python prestart hook, added", added(key), added("py-hook"),
                             goal=1.5, target="<= 1.5x any Python hook's floor")  # fmt: skip

    of = f"median of {PAIRS} passes x {ROUNDS} runs"
    return [
        hook_vs_start("HOOK ACTIVE adds (1 device + 2 libs + 1 bin + ldconfig)", "hooked"),
        hook_vs_floor("HOOK ACTIVE adds, vs a Python hook that does nothing", "hooked"),
        paired_figure("hook as a node runs it (zipapp, host python3) adds", "ms",
                      f"one start of {HOST_PYTHON} -I -S -c pass", added("installed"), ms("host-py-start"),
                      goal=1.5, target="added <= 1.5x one Python start"),
        hook_vs_start("hook with 2 custom recipes installed (fpga + smartnic) adds", "hooked-custom"),
        hook_vs_floor("hook with 2 custom recipes adds, vs a Python hook that does nothing", "hooked-custom"),
        wrap_vs_start("WRAPPER ACTIVE adds (runtime wrapper, mode hook: wrapper + the hook it adds)", "wrap-hook"),
        wrap_vs_floor("WRAPPER ACTIVE adds, vs a Python wrapper + hook that do nothing", "wrap-hook"),
        wrap_vs_start("wrapper active adds (mode cdi: runc makes nodes+mounts, ldcache hook)", "wrap-cdi"),
        paired_figure("wrapper active, mode cdi, adds vs a Python wrapper + a /bin/true hook", "ms",
                      "launcher + exec-only Python + /bin/true hook, added", added("wrap-cdi"), added("wrap-floor-1"),
                      goal=1.5, target="<= 1.5x a one-Python wrapper's floor"),
        vs_start("WRAPPER INACTIVE adds (nothing asked: shell pre-filter)", "wrap-idle", 2.0),
        vs_plain("HOOK ACTIVE: prestart hook, 1 device + 2 libs + 1 bin + ldconfig", "hooked"),
        vs_plain("hook with 2 custom recipes installed (fpga + smartnic files loaded), same container", "hooked-custom"),
        vs_plain("HOOK INACTIVE: hook installed, nothing asked (hooks.d always)", "idle"),
        vs_plain("WRAPPER ACTIVE: runtime wrapper, mode hook (adds the hook)", "wrap-hook"),
        vs_plain("WRAPPER INACTIVE: runtime wrapper, nothing asked (shell pre-filter)", "wrap-idle"),
        vs_plain("wrapper active, mode cdi (runc makes nodes+mounts, ldcache hook)", "wrap-cdi"),
        vs_plain("for scale: runc + a /bin/true prestart hook", "true-hook", f" ({of})"),
        vs_plain("for scale: runc + `python -I -S -c pass` as prestart hook", "py-hook", " (any Python hook's floor)"),
        vs_plain("for scale: runc + a Python prestart hook that only reads the state", "py-read-hook",
                 " (any Python hook that reads runc's state)"),
        vs_plain("for scale: a wrapper whose Python only execs runc + a /bin/true hook", "wrap-floor-1",
                 " (a one-Python wrapper's floor)"),
        vs_plain("for scale: a wrapper whose Python only execs runc + that prestart hook", "wrap-floor",
                 " (any Python wrapper's floor)"),
        paired_figure("hook no-op start (python -I -S -c <bootstrap> poststop)", "ms", "python -I -S -c pass",
                      *hook_noop, goal=None, target="what our imports add to the interpreter"),
        paired_figure("python -I -S -c pass (how hooks start)", "ms", "python -I -c pass", ms("py-start"),
                      ms("py-site"), goal=None, target="what skipping site saves"),
        paired_figure("launcher pass-through (state)", "ms", "runc state", *launcher_state, goal=None,
                      target="non-create calls: shell only"),
    ]  # fmt: skip
