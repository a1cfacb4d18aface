"""A runc wrapper for a containerd runtime handler (the nvidia-container-runtime pattern).

Why: containerd 1.6 and kubelet 1.20 know nothing of CDI, and a runtime handler is the one place
where a node can change every container's OCI spec. On `create --bundle X` the wrapper reads
X/config.json; if the container gets devices (its device plugin allocation, or what its env var,
annotation or CDI name asks where `activation` believes it) it
either adds the hook (mode `hook`, a prestart entry with an explicit env, and the device cgroup
allow rules of the nodes the hook will make: on a cgroup v2 host runc's eBPF program is built from
the spec before any hook runs, see `devcgroup`) or writes the devices, mounts and a ldcache hook
straight into the spec (mode `cdi`), then execs runc with the same argv. Mode cdi's ldcache hook is
the host's ldconfig itself (specedits.DirectLdcache, checked here as the hook would check it), with
the folders in a file of the bundle that runc mounts at the hook's ld.so.conf.d entry: a container
start then costs one Python process (this one), not two. Mode hook needs the second (the hook works
inside the container's mount namespace, which exists only once runc has started).
Every other subcommand goes to runc untouched; the generated launcher (see `launcher`) does that in
the shell, without starting Python at all.

Usage: python -I -m sro.node.runtime.wrapper [--runc PATH] [--mode hook|cdi] [hook options...] -- RUNC-ARGS
"""

from __future__ import annotations

import posix  # not `os` (~1.3 ms of every start): leanpath stands in for os.path on every path
import sys

from sro.node.runtime import hook

TYPE_CHECKING = False  # no typing import at run time (see hook)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, NoReturn

    from sro.node.runtime.specedits import DirectLdcache, HookCommand

RUNC = "/usr/sbin/runc"
# runc's global flags that take a value (`runc --root X create ...`)
_VALUE_FLAGS = frozenset({"--root", "--log", "--log-format", "--criu", "--rootless"})


class WrapperError(Exception):
    """The container asked for something the wrapper must refuse; runc is not started."""


def find_create_bundle(runc_args: Sequence[str]) -> str | None:
    """The bundle dir if `runc_args` is a `create` (or `run`) call, else None."""
    i = 0
    while i < len(runc_args):
        arg = runc_args[i]
        if arg.startswith("-"):
            i += 2 if arg in _VALUE_FLAGS else 1
            continue
        if arg not in ("create", "run"):
            return None
        rest = runc_args[i + 1 :]
        for j, a in enumerate(rest):
            if a in ("--bundle", "-b") and j + 1 < len(rest):
                return rest[j + 1]
            if a.startswith("--bundle="):
                return a.split("=", 1)[1]
        return posix.getcwd()
    return None


def edit_spec(
    spec: dict[str, Any],
    args: hook.HookArgs,
    mode: str,
    cmd: HookCommand | Callable[[], HookCommand],
    bundle: str | None = None,
) -> dict[str, Any] | None:
    """The edited spec, or None when the container asks for no devices (nothing to change).

    `cmd` (or a function making it, called only when there is something to add) starts the hook.
    Until a request is believed, nothing beyond `activation` is imported (no inventory).
    Mode cdi with the (absolute) `bundle` known runs the host's ldconfig as its ldcache hook, its
    folders written to `ld_conf_path(bundle)`; without it, the Python hook's update-ldcache.
    """
    process = spec.get("process") or {}
    if not isinstance(process, dict) or not hook.may_ask(
        {"process": process, "annotations": spec.get("annotations") or {}, "linux": spec.get("linux")}
    ):
        return None
    from sro.node.runtime import activation

    try:
        requests = activation.requests_for(
            args.recipes,
            process.get("env", []) or [],
            spec.get("annotations") or {},
            hook.access_for(args, spec),
        )
    except activation.ActivationError as e:
        raise WrapperError(str(e)) from None
    if not requests:
        return None
    from sro.node.runtime import driverfiles, inventory, specedits

    if mode == "hook":  # only the rules of the nodes the hook makes: no globbing of the driver's files
        roots = args.driver_roots
        inventories = {
            r.recipe.name: driverfiles.discover_devices(r.recipe, roots.get(r.recipe.name), args.dev_root)
            for r in requests
        }
    else:
        inventories = {r.recipe.name: args.discovered(r.recipe) for r in requests}
    try:
        plan = inventory.plan_all(requests, inventories)
    except inventory.UnknownDeviceError as e:
        raise WrapperError(str(e)) from None
    if mode == "hook":  # the hook makes the nodes; the rules must be in the spec before runc reads it
        command = cmd() if callable(cmd) else cmd
        return specedits.add_hook(specedits.allow_devices(spec, plan), "prestart", command.entry("prestart"))
    if not args.ldconfig or not plan.ld_folders:
        return specedits.apply_plan(spec, plan, None)
    if bundle is None:
        return specedits.apply_plan(spec, plan, cmd() if callable(cmd) else cmd)
    return specedits.apply_plan(spec, plan, direct_ldcache(spec, bundle, args.ldconfig, plan.ld_folders))


def ld_conf_path(bundle: str) -> str:
    """The bundle's file of mode cdi's ldconfig folders (mounted at specedits.LD_CONF)."""
    return hook.path_join(bundle, "sro-ld.so.conf")


def direct_ldcache(
    spec: Mapping[str, Any], bundle: str, ldconfig: str, folders: Sequence[str]
) -> DirectLdcache:
    """Check the host ldconfig as the hook would (hostldconfig), write the folders' file in the
    bundle (root's, gone with the container), and say how runc runs ldconfig on the rootfs."""
    from sro.node.runtime.hostldconfig import InjectError, check_host_ldconfig
    from sro.node.runtime.specedits import DirectLdcache

    root = spec.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise WrapperError("config.json: 'root.path' must be a non-empty string")
    rootfs = hook.rootfs_of(bundle, spec)
    try:
        real = check_host_ldconfig(ldconfig, rootfs)
    except InjectError as e:
        raise WrapperError(str(e)) from None
    conf = ld_conf_path(bundle)
    tmp = f"{conf}.sro-{posix.getpid()}"
    with open(tmp, "w") as f:
        f.write("".join(folder + "\n" for folder in folders))
    posix.replace(tmp, conf)
    return DirectLdcache(real, rootfs, conf)


def write_json_atomic(path: str, doc: dict[str, Any]) -> None:
    tmp = f"{path}.sro-{posix.getpid()}"
    with open(tmp, "w") as f:
        f.write(hook.dumps(doc))
    posix.replace(tmp, path)


def parse(argv: Sequence[str]) -> tuple[str, str, list[str], list[str]]:
    """(runc, mode, hook options, runc args) from `[--runc P] [--mode M] [hook opts] -- RUNC-ARGS`."""
    if "--" not in argv:
        raise WrapperError("usage: wrapper [--runc PATH] [--mode hook|cdi] [hook options] -- RUNC-ARGS")
    split = list(argv).index("--")
    own, runc_args = list(argv[:split]), list(argv[split + 1 :])
    runc, mode, opts = RUNC, "hook", []
    it = iter(own)
    for a in it:
        if a == "--runc":
            runc = next(it, "")
        elif a == "--mode":
            mode = next(it, "")
        else:
            opts.append(a)
    if mode not in ("hook", "cdi"):
        raise WrapperError(f"--mode must be hook or cdi, got {mode!r}")
    if not hook.path_isabs(runc):
        raise WrapperError(f"--runc must be an absolute path, got {runc!r}")
    return runc, mode, opts, runc_args


def runc_log_path(runc_args: Sequence[str]) -> str | None:
    """The file runc's caller reads runc's errors from (`--log PATH` or `--log=PATH`), if any."""
    for i, arg in enumerate(runc_args):
        if arg == "--log" and i + 1 < len(runc_args):
            return runc_args[i + 1]
        if arg.startswith("--log="):
            return arg[len("--log=") :]
    return None


def tell_the_shim(runc_args: Sequence[str], message: str) -> None:
    """Write a refusal where containerd's shim reads runc's last error (runc's JSON log lines), so
    the pod's status says why its container was not created; the shim does not read the runtime's
    stderr, and a refusal comes before runc ever writes that file ("unable to retrieve OCI runtime
    error ... log.json: no such file"). Nothing to do when the caller asked for no log."""
    path = runc_log_path(runc_args)
    if path is None:
        return
    import json  # only on a refusal: every container start pays for what the wrapper imports
    import time

    line = json.dumps(
        {"level": "error", "msg": message, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    )
    try:
        with open(path, "a") as f:
            f.write(line + "\n")
    except OSError:
        pass  # stderr has it


def main(argv: Sequence[str] | None = None) -> NoReturn:
    argv = sys.argv[1:] if argv is None else argv
    runc_args: list[str] = []
    try:
        runc, mode, opts, runc_args = parse(argv)
        bundle = find_create_bundle(runc_args)
        if bundle is not None:
            args = hook.parse_args(["prestart", *opts])

            def cmd(opts: tuple[str, ...] = tuple(opts)) -> HookCommand:
                from sro.node.runtime.specedits import HookCommand

                return HookCommand(sys.executable, opts)

            if not hook.path_isabs(bundle):  # runc's cwd, which is ours: it execs us with it
                bundle = hook.path_join(posix.getcwd(), bundle)
            path = hook.path_join(bundle, "config.json")
            try:
                with open(path, "rb") as f:
                    spec = hook.loads(f.read())
            except (OSError, ValueError):
                spec = None  # runc reports an unreadable bundle in its own words
            if isinstance(spec, dict):
                edited = edit_spec(spec, args, mode, cmd, bundle)
                if edited is not None:
                    write_json_atomic(path, edited)
    except (WrapperError, hook.HookError) as e:
        print(f"sro runtime: {e}", file=sys.stderr)
        tell_the_shim(runc_args, f"sro runtime: {e}")
        sys.exit(1)
    try:
        posix.execv(runc, [runc, *runc_args])
    except OSError as e:  # no runc there (--runc, or the default one not installed)
        print(f"sro runtime: cannot run {runc}: {e.strerror} (give --runc PATH)", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main()
