"""Pure edits of OCI runtime specs and hook entries: what the wrapper, hooks.d and CDI specs write.

Why one module: every place that writes a hook entry must set its `env` explicitly and point `path`
and `args[0]` at an absolute interpreter with `-I -S` — runc starts a createContainer hook whose `env`
is unset with the *container's* environment (LD_PRELOAD from the image runs before any of our code,
CVE-2025-23266), and Python guesses its venv from `args[0]`. Keeping the one function that builds
entries here means the runc wrapper, the hooks.d file and the CDI spec cannot drift apart. The one
entry that is no Python is the runc wrapper's mode-cdi linker cache hook (`ldconfig_entry`): the
host's checked ldconfig itself, with the same fixed env, so that mode starts one interpreter, not two.
"""

from __future__ import annotations

from sro.node.runtime.leanpath import abspath, dirname, join

TYPE_CHECKING = False  # no typing/dataclasses/copy at run time: the runc wrapper imports this module
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from dataclasses import dataclass, field
    from typing import Any

    from sro.node.runtime.inventory import InjectionPlan
else:
    from sro.node.runtime.records import dataclass, field

HOOK_ENV = ("PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C")
HOOK_MODULE = "sro.node.runtime.hook"
HOOK_TIMEOUT_S = 30
HOOKS_D_VERSION = "1.0.0"
LD_CONF = "/etc/ld.so.conf.d/000-sro.conf"  # what the hook writes (inject.LD_CONF), mounted by mode cdi


def package_root() -> str:
    """The directory holding the `sro` package (a checkout or site-packages)."""
    import sro

    return dirname(dirname(abspath(sro.__file__)))


def precompile(python: str, root: str | None = None) -> bool:
    """Write the bytecode of every module the hook and the wrapper import, for `python`; best effort.

    A hook whose package has no up-to-date `.pyc` (a fresh copy, a read-only tree, an image built with
    PYTHONDONTWRITEBYTECODE) compiles its modules from source on every container start, which costs
    more than everything else it does. Run wherever an entry or launcher is written. False if it
    could not (a read-only tree): the hook still works, only slower.
    """
    import subprocess  # install time only, never on the hook's path

    sro_dir = join(root or package_root(), "sro")
    targets = [
        join(sro_dir, "__init__.py"),
        join(sro_dir, "node", "__init__.py"),
        join(sro_dir, "node", "runtime"),
    ]
    argv = [python, "-I", "-S", "-m", "compileall", "-q", *targets]
    try:
        return subprocess.run(argv, capture_output=True, timeout=120, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def bootstrap(module: str, root: str) -> str:
    """`python -I -S -c` code that runs `module.main` with only the stdlib and `root` on sys.path.

    -S skips site (and with it the venv's .pth files and editable-install finders): about 12 ms of
    the hook's start-up here; the hook and wrapper need nothing outside the standard library. It ends
    with `posix._exit` once stdout and stderr are flushed: the interpreter's teardown (freeing every
    module it imported, a last garbage collection) holds the container's start 3-8 ms more here and
    does nothing a hook needs (it leaves no child, no atexit handler, no unflushed file but those two).
    An exception main does not catch still ends the usual way, with its traceback.
    """
    return (
        f"import sys;sys.path.insert(0,{root!r});from {module} import main;r=main(sys.argv[1:]);"
        "sys.stdout.flush();sys.stderr.flush();import posix;posix._exit(r)"
    )


@dataclass(frozen=True)
class HookCommand:
    """How to start the hook: the interpreter, and the options every invocation carries."""

    python: str  # absolute path of the interpreter (args[0] too)
    options: tuple[str, ...] = ()  # e.g. ("--recipe", "simulated-gpu", "--driver-root", "/x")
    root: str = field(default_factory=package_root)  # put on sys.path by the bootstrap

    def __post_init__(self) -> None:
        if not self.python.startswith("/") or not self.root.startswith("/"):
            raise ValueError(f"hook interpreter and package root must be absolute, got {self.python!r}")

    def argv(self, module: str = HOOK_MODULE) -> list[str]:
        """`python -I -S -c <bootstrap>`: no PYTHON* variables, no site, no cwd on sys.path."""
        return [self.python, "-I", "-S", "-c", bootstrap(module, self.root)]

    def entry(self, stage: str, extra: Sequence[str] = ()) -> dict[str, Any]:
        """An OCI hook entry with an explicit env (never the container's) and a timeout."""
        return {
            "path": self.python,
            "args": [*self.argv(), stage, *self.options, *extra],
            "env": list(HOOK_ENV),
            "timeout": HOOK_TIMEOUT_S,
        }


def hooks_d(cmd: HookCommand, stage: str = "prestart") -> dict[str, Any]:
    """A podman/CRI-O hooks.d document (oci-hooks(5), version 1.0.0) running the hook always.

    The hook itself decides from the env/annotations whether there is anything to do and returns at
    once when there is not; hooks.d cannot match on env vars.
    """
    entry = cmd.entry(stage)
    return {"version": HOOKS_D_VERSION, "hook": entry, "when": {"always": True}, "stages": [stage]}


def _copy(doc: Any) -> Any:
    """A deep copy of JSON data (dicts, lists and scalars): `copy.deepcopy` without importing `copy`."""
    if isinstance(doc, dict):
        return {k: _copy(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_copy(v) for v in doc]
    if isinstance(doc, tuple):
        return tuple(_copy(v) for v in doc)
    return doc


def _hooks_of(spec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    hooks = spec.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ValueError("config.json: 'hooks' must be an object")
    return hooks


def add_hook(spec: Mapping[str, Any], stage: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `spec` with `entry` appended to `hooks.<stage>` (once: an identical entry is not added)."""
    out: dict[str, Any] = _copy(dict(spec))
    stage_hooks = _hooks_of(out).setdefault(stage, [])
    if not isinstance(stage_hooks, list):
        raise ValueError(f"config.json: 'hooks.{stage}' must be a list")
    if dict(entry) not in stage_hooks:
        stage_hooks.append(dict(entry))
    return out


def device_entries(plan: InjectionPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`linux.devices` entries and `linux.resources.devices` allow rules for the plan's nodes."""
    devices = [
        {
            "path": d.path,
            "type": "c",
            "major": d.major,
            "minor": d.minor,
            "fileMode": d.file_mode,
            "uid": 0,
            "gid": 0,
        }
        for d in plan.device_nodes
    ]
    rules = [
        {"allow": True, "type": "c", "major": d.major, "minor": d.minor, "access": "rwm"}
        for d in plan.device_nodes
    ]
    return devices, rules


def mount_entries(plan: InjectionPlan) -> list[dict[str, Any]]:
    """Read-only bind mounts (OCI `mounts` entries) for the plan's files and directories."""
    return [
        {
            "destination": m.container_path,
            "source": m.host_path,
            "type": "bind",
            "options": ["ro", "nosuid", "nodev", "rbind" if m.kind == "dir" else "bind"],
        }
        for m in plan.mounts
    ]


def allow_devices(spec: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
    """A copy of `spec` whose `linux.resources.devices` allows the plan's nodes (`c MAJ:MIN rwm`).

    What the runc wrapper's hook mode needs on a cgroup v2 host: runc builds the device cgroup's
    eBPF program from these rules before any hook runs, and a hook cannot add to it afterwards, so
    nodes the hook makes would exist but not open. On v1 the hook opens them itself; the rules then
    say the same. A rule already there is not doubled.
    """
    out: dict[str, Any] = _copy(dict(spec))
    linux = out.setdefault("linux", {})
    if not isinstance(linux, dict):
        raise ValueError("config.json: 'linux' must be an object")
    resources = linux.setdefault("resources", {})
    if not isinstance(resources, dict):
        raise ValueError("config.json: 'linux.resources' must be an object")
    rules = list(resources.get("devices", []) or [])
    for rule in device_entries(plan)[1]:
        if rule not in rules:
            rules.append(rule)
    resources["devices"] = rules
    return out


@dataclass(frozen=True)
class DirectLdcache:
    """Mode cdi's linker cache without a Python hook: `ldconfig` (the host's, checked by
    hostldconfig.check_host_ldconfig) run by runc as a createContainer hook on `rootfs` (an absolute
    host path: such a hook runs in the container's mount namespace before pivot_root, where the
    rootfs still lies there), and `conf` (a host file holding the folders, in the bundle) mounted
    read-only at LD_CONF by runc, as every other mount of this mode."""

    ldconfig: str
    rootfs: str
    conf: str


def ldconfig_entry(ldcache: DirectLdcache, folders: Sequence[str]) -> dict[str, Any]:
    """The createContainer entry that is the host's ldconfig itself: `-r` makes it chroot into the
    rootfs (and chdir to its /) before it reads or writes anything, as the hook's ldconfig does;
    its env is fixed (never the container's); runc kills it after the timeout."""
    if not (ldcache.ldconfig.startswith("/") and ldcache.rootfs.startswith("/")):
        raise ValueError(f"ldconfig and rootfs must be absolute, got {ldcache.ldconfig!r} {ldcache.rootfs!r}")
    return {
        "path": ldcache.ldconfig,
        "args": [ldcache.ldconfig, "-r", ldcache.rootfs, *folders],
        "env": list(HOOK_ENV),
        "timeout": HOOK_TIMEOUT_S,
    }


def apply_plan(
    spec: Mapping[str, Any], plan: InjectionPlan, ldcache: HookCommand | DirectLdcache | None
) -> dict[str, Any]:
    """A copy of `spec` with the plan written in as the runtime's own devices, mounts and a ldcache hook.

    This is the CDI way (runc creates the nodes, the cgroup rules and the mounts itself, through its
    own in-root path resolution); only the linker cache needs a hook, a createContainer one: the
    Python hook's `update-ldcache` (a HookCommand), or the host's ldconfig itself (DirectLdcache).
    """
    out = allow_devices(spec, plan)
    linux = out["linux"]
    devices = device_entries(plan)[0]
    have = {d.get("path") for d in linux.get("devices", []) or []}
    linux["devices"] = list(linux.get("devices", []) or []) + [d for d in devices if d["path"] not in have]
    mounted = {m.get("destination") for m in out.get("mounts", []) or []}
    out["mounts"] = list(out.get("mounts", []) or []) + [
        m for m in mount_entries(plan) if m["destination"] not in mounted
    ]
    if isinstance(ldcache, DirectLdcache) and plan.ld_folders:
        conf = {"destination": LD_CONF, "source": ldcache.conf, "type": "bind",
                "options": ["ro", "nosuid", "nodev", "bind"]}  # fmt: skip
        if LD_CONF not in mounted:
            out["mounts"].append(conf)
        out = add_hook(out, "createContainer", ldconfig_entry(ldcache, plan.ld_folders))
    elif isinstance(ldcache, HookCommand) and plan.ld_folders:
        folders = [a for f in plan.ld_folders for a in ("--folder", f)]
        out = add_hook(out, "createContainer", ldcache.entry("update-ldcache", folders))
    return out
