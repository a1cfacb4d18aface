"""The OCI hook: read the container's state, decide what it asked for, inject it.

Why it is written this way:
  * It sits on every container start (budget: < 30 ms added), so it imports only a small part of
    the standard library and this package's pure modules: no click, yaml or grpc, and not even
    `json`, `os` (leanpath), `typing`, `dataclasses` (records), `re`/`fnmatch`/`glob` (namematch),
    `ctypes` (syscalls), `enum`/`signal` or `sro.api.recipes` (hookrecipes, the same built-ins as
    plain records); tests/unit/test_runtime_records.py and tests/root/test_hook_imports.py keep it
    that way. A container that cannot be
    asking for devices is let through before the recipes are even imported. Entries start it as
    `python -I -S -c <bootstrap> STAGE ...` (see specedits.HookCommand): `-I` drops PYTHON*
    variables and keeps the current directory off sys.path (a createContainer hook starts in the
    image's root, where a hostile image could plant `sro/`); `-S` skips site (~12 ms).
  * Everything that can be refused is checked before anything is changed: the state JSON, the
    bundle's config.json, the request (unknown device ids), the driver's files, the host ldconfig.
    Bad input therefore fails the container's start with a message and leaves the host as it was.
  * prestart runs in the runtime's namespaces: the device cgroup is opened there (host view), then
    the hook joins the container's mount namespace (setns) so mounts and nodes exist only inside it.
    createContainer already runs inside it. poststart/poststop have nothing to do.

Exit status 0 on success or nothing to do, 1 with `sro hook: <why>` on stderr otherwise (runc shows
that text in its error). Options: --recipe NAME (repeatable; default, with no --recipe-file either:
every built-in), --recipe-file PATH (repeatable: a custom recipe `sro runtime install` wrote, canonical
JSON, loaded by hookrecipes.load_file; a refused file fails the start naming file and field), --driver-root
[NAME=]PATH, --dev-root PATH (stands for /dev), --ldconfig PATH|none, --resolver auto|openat2|walk,
--policy beneath|in-root, --mount-api new|old, --accept-envvar-unprivileged true|false (default
false; unsafe: any container of the handler then gets whatever devices its env names),
--management-namespace NS (repeatable; default sro-system: where SRO_MANAGEMENT_DEVICES is honoured),
--debug true|false (default false: `sro hook: debug:` lines on stderr). On a cgroup v2-only host a
hook cannot open the device cgroup: it warns on stderr when the spec's rules keep its nodes closed.
Which requests are believed: `activation` (a container gets its allocation unless privileged).
"""

from __future__ import annotations

import posix  # not `os`: its import (os.path, _collections_abc) is ~1.5 ms of every hook start
import sys

from sro.node.runtime.leanjson import dumps, loads, path_isabs, path_join

TYPE_CHECKING = False  # typing itself is not imported at run time: every ms counts here
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import IO, Any

    from sro.node.runtime.activation import Access, Request
    from sro.node.runtime.hookrecipes import AnyRecipe, HookRecipe
    from sro.node.runtime.inject import Options
    from sro.node.runtime.inventory import DeviceNode, DriverInventory, InjectionPlan

__all__ = ["HookError", "dumps", "loads", "main", "path_isabs", "path_join"]  # the helpers: leanjson's
STAGES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
ACTIVE_STAGES = ("prestart", "createContainer")
MAX_STATE_BYTES = 1 << 20
MAX_CONFIG_BYTES = 16 << 20
# What can ask for devices (see activation): every built-in recipe's env var ends with this, and
# annotations start with one of these. A container with none of them is let through before the
# recipes, dataclasses and the injection code are even imported.
VISIBLE_SUFFIX = "_VISIBLE_DEVICES"
MANAGEMENT_PREFIX = "SRO_MANAGEMENT_DEVICES="  # = activation.MANAGEMENT_ENV + "=" (checked by a test)
ANNOTATION_PREFIXES = ("sro.dev/", "cdi.k8s.io/")
DEFAULT_MANAGEMENT_NAMESPACES = ("sro-system",)  # = activation.DEFAULT_MANAGEMENT_NAMESPACES
DEFAULT_LDCONFIG = "/sbin/ldconfig"  # = inject.Options().ldconfig (checked by a test)


class HookError(Exception):
    """Why the hook refuses to let the container start."""


class HookArgs:
    """Parsed options. A plain class: a dataclass import would cost the idle hook several ms."""

    __slots__ = (
        "_devices",
        "_found",
        "_loaded",
        "_opt",
        "_roots",
        "accept_envvar_unprivileged",
        "common_root",
        "dev_root",
        "folders",
        "management_namespaces",
        "recipe_files",
        "recipe_names",
        "stage",
    )

    def __init__(
        self,
        stage: str,
        recipe_names: tuple[str, ...] = (),
        roots: dict[str, str] | None = None,
        common_root: str | None = None,
        dev_root: str = "/dev",
        opt: dict[str, Any] | None = None,
        folders: tuple[str, ...] = (),
        accept_envvar_unprivileged: bool = False,
        management_namespaces: tuple[str, ...] = DEFAULT_MANAGEMENT_NAMESPACES,
        recipe_files: tuple[str, ...] = (),
    ) -> None:
        self.recipe_files = recipe_files
        self._loaded: tuple[HookRecipe, ...] | None = None
        self._found: dict[str, DriverInventory] = {}
        self._devices: dict[str, tuple[DeviceNode, ...]] = {}
        self.accept_envvar_unprivileged = accept_envvar_unprivileged
        self.management_namespaces = management_namespaces
        self.stage = stage
        self.recipe_names = recipe_names
        self._roots = roots or {}
        self.common_root = common_root
        self.dev_root = dev_root
        self._opt = opt or {}
        self.folders = folders

    @property
    def recipes(self) -> tuple[HookRecipe, ...]:
        """The --recipe built-ins and the --recipe-file recipes (loaded once, checked again here)."""
        if self._loaded is not None:
            return self._loaded
        from sro.node.runtime.hookrecipes import BUILTIN  # lean records, no dataclasses

        for n in self.recipe_names:
            if n not in BUILTIN:
                raise HookError(f"--recipe: unknown recipe {n!r} (known: {', '.join(BUILTIN)})")
        default = () if self.recipe_files else tuple(BUILTIN)
        out = [BUILTIN[n] for n in dict.fromkeys(self.recipe_names or default)]
        for path in self.recipe_files:
            from sro.node.runtime.hookrecipes import load_file

            try:
                recipe = load_file(path)
            except OSError as e:
                raise HookError(f"--recipe-file {path}: {e.strerror}") from None
            except ValueError as e:  # "<path>: <field>: <what is wrong>"
                raise HookError(f"--recipe-file {e}") from None
            if any(r.name == recipe.name for r in out):
                raise HookError(f"--recipe-file {path}: name: recipe {recipe.name!r} is given twice")
            out.append(recipe)
        self._loaded = tuple(out)
        return self._loaded

    def discovered(self, recipe: AnyRecipe) -> DriverInventory:
        """What `recipe`'s driver offers on this host (driverfiles.discover), found once per hook run."""
        found = self._found.get(recipe.name)
        if found is None:
            from sro.node.runtime import driverfiles

            found = driverfiles.discover(recipe, self.driver_roots.get(recipe.name), self.dev_root)
            self._found[recipe.name] = found
        return found

    def devices_of(self, recipe: AnyRecipe) -> tuple[DeviceNode, ...]:
        """`recipe`'s device nodes on this host (driverfiles.find_devices: a listing of one /dev
        folder), found once per hook run; what reading an allocation needs, never the library globs
        of a full discovery (a driver root of `/`: tens of ms)."""
        found = self._found.get(recipe.name)
        if found is not None:
            return found.devices
        devices = self._devices.get(recipe.name)
        if devices is None:
            from sro.node.runtime import driverfiles

            devices = self._devices[recipe.name] = driverfiles.find_devices(recipe, self.dev_root)
        return devices

    @property
    def driver_roots(self) -> dict[str, str]:
        """Recipe name -> driver root given on the command line (others use the recipe's own)."""
        if self.common_root is None:
            return dict(self._roots)
        return {r.name: self._roots.get(r.name, self.common_root) for r in self.recipes}

    @property
    def ldconfig(self) -> str | None:
        """The host ldconfig to run (None: no linker cache), without importing `inject` for Options."""
        value = self._opt.get("ldconfig", DEFAULT_LDCONFIG)
        return None if value is None else str(value)

    @property
    def opts(self) -> Options:
        from sro.node.runtime.inject import Options

        return Options(**self._opt)


def parse_args(argv: Sequence[str]) -> HookArgs:
    """A tiny hand parser: argparse alone would cost more than the rest of the import graph."""
    if not argv or argv[0] in ("-h", "--help"):
        raise HookError(__doc__ or "usage: hook STAGE [options]")
    stage = argv[0]
    if stage not in (*STAGES, "update-ldcache"):
        raise HookError(f"unknown hook stage {stage!r} (one of {', '.join(STAGES)}, update-ldcache)")
    names: list[str] = []
    files: list[str] = []
    roots: dict[str, str] = {}
    common_root: str | None = None
    dev_root = "/dev"
    folders: list[str] = []
    opt: dict[str, Any] = {}
    accept_env = False
    management: list[str] = []
    it = iter(argv[1:])
    for arg in it:
        key, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not eq:
            value = next(it, "")
            if not value:
                raise HookError(f"option {key} needs a value")
        if key == "--recipe":
            names.append(value)
        elif key == "--recipe-file":
            files.append(value)
        elif key == "--driver-root":
            name, sep, path = (
                value.partition("=") if "=" in value and not value.startswith("/") else ("", "", value)
            )
            if sep:
                roots[name] = path
            else:
                common_root = path
        elif key == "--dev-root":
            dev_root = value
        elif key == "--folder":
            folders.append(value)
        elif key == "--ldconfig":
            opt["ldconfig"] = None if value == "none" else value
        elif key == "--resolver" and value in ("auto", "openat2", "walk"):
            opt["use_openat2"] = {"auto": None, "openat2": True, "walk": False}[value]
        elif key == "--policy" and value in ("beneath", "in-root"):
            opt["policy"] = value
        elif key == "--mount-api" and value in ("new", "old"):
            opt["new_mount_api"] = value == "new"
        elif key == "--debug" and value in ("true", "false"):
            opt["debug"] = value == "true"
        elif key == "--accept-envvar-unprivileged" and value in ("true", "false"):
            accept_env = value == "true"
        elif key == "--management-namespace":
            management.append(value)
        else:
            raise HookError(f"unknown option or value: {key} {value}")
    return HookArgs(
        stage,
        tuple(names),
        roots,
        common_root,
        dev_root,
        opt,
        tuple(folders),
        accept_env,
        tuple(management) if management else DEFAULT_MANAGEMENT_NAMESPACES,
        tuple(files),
    )


def may_ask(config: Mapping[str, Any]) -> bool:
    """Cheap pre-filter: could this container ask for any device at all? (True if unsure.)"""
    process = config.get("process") or {}
    env = process.get("env") or [] if isinstance(process, dict) else []
    annotations = config.get("annotations") or {}
    if not isinstance(env, list) or not isinstance(annotations, dict):
        return True  # malformed: let the full parser say what is wrong
    linux = config.get("linux")
    if isinstance(linux, dict) and linux.get("devices"):
        return True  # device nodes the kubelet put there may be a device plugin's allocation
    if any(
        not isinstance(e, str)
        or e.partition("=")[0].endswith(VISIBLE_SUFFIX)
        or e.startswith(MANAGEMENT_PREFIX)
        for e in env
    ):
        return True
    return any(not isinstance(k, str) or k.startswith(ANNOTATION_PREFIXES) for k in annotations)


def read_state(stream: IO[bytes]) -> dict[str, Any]:
    raw = stream.read(MAX_STATE_BYTES + 1)
    if len(raw) > MAX_STATE_BYTES:
        raise HookError("state JSON on stdin: larger than 1 MiB")
    try:
        state = loads(raw)
    except ValueError as e:
        raise HookError(f"state JSON on stdin: not valid JSON ({e})") from None
    if not isinstance(state, dict):
        raise HookError("state JSON on stdin: expected an object")
    bundle = state.get("bundle", state.get("bundlePath"))
    if not isinstance(bundle, str) or not path_isabs(bundle):
        raise HookError(f"state JSON on stdin: 'bundle' must be an absolute path, got {bundle!r}")
    pid = state.get("pid", 0)
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
        raise HookError(f"state JSON on stdin: 'pid' must be a non-negative integer, got {pid!r}")
    return state


def read_config(bundle: str) -> dict[str, Any]:
    path = path_join(bundle, "config.json")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise HookError(f"bundle config {path}: {e.strerror}") from None
    try:
        config = loads(raw)
    except ValueError as e:
        raise HookError(f"bundle config {path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise HookError(f"bundle config {path}: expected an object")
    root = config.get("root")
    if not isinstance(root, dict) or not isinstance(root.get("path"), str) or not root["path"]:
        raise HookError(f"bundle config {path}: 'root.path' must be a non-empty string")
    process = config.get("process", {})
    env = process.get("env", []) if isinstance(process, dict) else None
    if not isinstance(env, list) or not all(isinstance(e, str) for e in env):
        raise HookError(f"bundle config {path}: 'process.env' must be a list of strings")
    ann = config.get("annotations", {})
    if not isinstance(ann, dict) or not all(isinstance(v, str) for v in ann.values()):
        raise HookError(f"bundle config {path}: 'annotations' must map strings to strings")
    linux = config.get("linux", {})
    if isinstance(linux, dict) and linux.get("rootfsPropagation") in ("shared", "rshared"):
        raise HookError(
            f"bundle config {path}: rootfsPropagation {linux['rootfsPropagation']} would carry "
            "the hook's mounts to the host; refusing"
        )
    return config


def rootfs_of(bundle: str, config: Mapping[str, Any]) -> str:
    path = str(config["root"]["path"])
    return path if path_isabs(path) else path_join(bundle, path)


def access_for(args: HookArgs, config: Mapping[str, Any]) -> Access:
    """What this container may be given: see `activation` (the decision itself is pure, there).

    The allocation is read off `linux.devices` by device number against the recipes' device nodes on
    this node; a privileged container's list holds every host device, so it says nothing there.
    """
    from sro.node.runtime import activation

    priv = activation.privileged(config)
    allocated: dict[str, tuple[str, ...]] = {}
    numbers = activation.device_numbers(config)
    if numbers and not priv:
        for recipe in args.recipes:
            found = args.devices_of(recipe)
            # a companion's number gives its whole device, as its primary node's does
            ids = tuple(dict.fromkeys(d.device_id for d in found if (d.major, d.minor) in numbers))
            if ids:
                allocated[recipe.name] = ids
    namespace = activation.sandbox_namespace(config.get("annotations") or {})
    return activation.Access(
        own=priv or args.accept_envvar_unprivileged,
        management=namespace is not None and namespace in args.management_namespaces,
        allocated=allocated,
    )


def requests_of(args: HookArgs, config: Mapping[str, Any]) -> Sequence[Request]:
    """What the container asks for and is believed (`activation`); HookError when malformed."""
    from sro.node.runtime import activation

    try:
        return activation.requests_for(
            args.recipes,
            config.get("process", {}).get("env", []),
            config.get("annotations", {}),
            access_for(args, config),
        )
    except activation.ActivationError as e:
        raise HookError(str(e)) from None


def build_plan(
    args: HookArgs, config: Mapping[str, Any], requests: Sequence[Request] | None = None
) -> InjectionPlan:
    """The injection plan for the container's requests (`requests_of` unless given)."""
    from sro.node.runtime import inventory

    if requests is None:
        requests = requests_of(args, config)
    inventories = {r.recipe.name: args.discovered(r.recipe) for r in requests}
    try:
        return inventory.plan_all(requests, inventories)
    except inventory.UnknownDeviceError as e:
        raise HookError(str(e)) from None


def run(args: HookArgs, stdin: IO[bytes]) -> None:
    """One hook invocation; raises HookError (or InjectError) with the reason to refuse."""
    if args.stage not in (*ACTIVE_STAGES, "update-ldcache"):
        return
    state = read_state(stdin)
    bundle = state.get("bundle", state.get("bundlePath"))
    assert isinstance(bundle, str)
    config = read_config(bundle)
    rootfs = rootfs_of(bundle, config)
    requests: Sequence[Request] = ()
    if args.stage != "update-ldcache":
        if not may_ask(config):
            return
        # Nothing believed (an image's NVIDIA_VISIBLE_DEVICES=all in an unprivileged container
        # without an allocation): done before the injection code is even imported.
        requests = requests_of(args, config)
        if not requests:
            return
    from sro.node.runtime import inject, safepath

    if args.stage == "update-ldcache":  # the CDI-mode ldcache hook: no cgroup, no mount code
        if args.opts.ldconfig:
            inject.check_host_ldconfig(args.opts.ldconfig, rootfs)
            with safepath.Root(rootfs, policy=args.opts.policy, use_openat2=args.opts.use_openat2) as root:
                inject.update_ldcache(root, args.folders, args.opts.ldconfig)
        return
    from sro.node.runtime import devcgroup, mounting

    plan = build_plan(args, config, requests)
    if plan.empty:
        return
    if args.opts.ldconfig and plan.ld_folders:
        inject.check_host_ldconfig(args.opts.ldconfig, rootfs)
    if args.stage == "prestart":
        pid = state.get("pid", 0)
        if not pid:
            raise HookError("state JSON on stdin: prestart needs the container's 'pid'")
        warning = devcgroup.open_for(pid, plan, config)
        try:
            ns = posix.open(f"/proc/{pid}/ns/mnt", posix.O_RDONLY | posix.O_CLOEXEC)
        except OSError as e:
            raise HookError(f"container pid {pid}: {e.strerror}") from None
        try:
            mounting.setns(ns)
        finally:
            posix.close(ns)
    else:  # createContainer: already in the container's namespaces, before pivot_root
        # Without a cgroup namespace /proc/self/cgroup names the container's cgroup; with one it
        # reads "/", and the hook cannot tell which cgroup is the container's: prestart can.
        warning = devcgroup.open_for("self", plan, config)
    if warning:  # not a failure (runc shows a hook's stderr only when it fails; crun logs it)
        print(f"sro hook: {warning}", file=sys.stderr)
    inject.inject(plan, rootfs, args.opts)


def main(argv: Sequence[str] | None = None, stdin: IO[bytes] | None = None) -> int:
    posix.chdir("/")  # never work from the image's root (runc starts createContainer hooks there)
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        run(args, stdin if stdin is not None else sys.stdin.buffer)
    except HookError as e:
        print(f"sro hook: {e}", file=sys.stderr)
        return 1
    except (RuntimeError, ValueError, OSError) as e:  # InjectError, ActivationError, ...
        print(f"sro hook: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
