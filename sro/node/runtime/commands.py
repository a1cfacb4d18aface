"""CLI glue: `sro cdi generate`, `sro hook ...` and `sro runtime ...` over the runtime modules.

Thin on purpose: each command translates flags and calls a pure function (CDI generation, hooks.d
document, launcher text) or hands its raw arguments to the hook / wrapper entry points, which are
also runnable without click (`python -I -m sro.node.runtime.hook`) for the container start path.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from sro.api.names import RUNTIME_ROOT
from sro.api.recipes import BUILTIN, Recipe, RecipeError, recipe_from_file
from sro.console.options import load_recipe, recipe_option, recipe_options


def _hook_options(recipe: tuple[str, ...], driver_root: str | None, dev_root: str | None) -> list[str]:
    opts: list[str] = []
    for r in recipe:
        opts += ["--recipe", r]
    if driver_root:
        opts += ["--driver-root", driver_root]
    if dev_root:
        opts += ["--dev-root", dev_root]
    return opts


@click.group()
def cdi() -> None:
    """CDI (Container Device Interface) specs for the recipes' devices."""


@cdi.command("generate")
@recipe_options("simulated-gpu")
@click.option("--driver-root", default=None, help="Where the driver's files are (default: the recipe's).")
@click.option("--dev-root", default="/dev", show_default=True, help="Host directory standing for /dev.")
@click.option(
    "--format", "fmt", type=click.Choice(["yaml", "json"]), default=None, help="Default: from --output."
)
@click.option(
    "--output", "-o", default="-", help="File, directory (gets <vendor>-<class>.<fmt>) or - for stdout."
)
@click.option(
    "--no-ldcache-hook", is_flag=True, help="Leave out the createContainer hook that runs ldconfig."
)
@click.option("--cdi-version", type=click.Choice(["0.5.0", "0.6.0"]), default="0.6.0", show_default=True)
def cdi_generate(
    recipe_name: str,
    recipe_file: Path | None,
    driver_root: str | None,
    dev_root: str,
    fmt: str | None,
    output: str,
    no_ldcache_hook: bool,
    cdi_version: str,
) -> None:
    """Write a CDI spec with one device per index, `all`, the control nodes, mounts and hooks."""
    from sro.node.runtime import cdi as cdimod
    from sro.node.runtime import driverfiles
    from sro.node.runtime.specedits import HookCommand

    recipe = load_recipe(recipe_name, recipe_file)
    fmt = fmt or ("json" if output.endswith(".json") else "yaml")
    inv = driverfiles.discover(recipe, driver_root, dev_root)
    # the ldcache stage reads no recipe: a custom one (whose file may be YAML) is not named to it
    opts = _hook_options(() if recipe_file else (recipe_name,), driver_root, None)
    ldcache = None if no_ldcache_hook else HookCommand(sys.executable, tuple(opts))
    try:
        text = cdimod.dumps(cdimod.generate(recipe, inv, ldcache, cdi_version), fmt)
    except cdimod.CDIError as e:
        raise click.ClickException(str(e)) from None
    if output == "-":
        click.echo(text, nl=False)
        return
    path = os.path.join(output, cdimod.spec_file_name(recipe, fmt)) if os.path.isdir(output) else output
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise click.ClickException(f"cannot write {path}: {e.strerror}") from None
    click.echo(f"wrote {path}", err=True)


_PASS = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


class _PassThrough(click.Command):
    """Hands its arguments on exactly as given: click's parser would drop a `--` (the wrapper's
    `[--runc P] -- RUNC-ARGS` needs it to tell its own options from runc's)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.params["args"] = tuple(args)
        return []


@click.command(cls=_PassThrough, context_settings=_PASS)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook(args: tuple[str, ...]) -> None:
    """OCI hook: `sro hook prestart|createContainer|update-ldcache [options]` (state JSON on stdin).

    `sro hook install-hooksd --dir DIR [--recipe R] [--driver-root P] [--dev-root P]` writes a
    podman/CRI-O hooks.d file. Containers should start the hook as `python -I -m
    sro.node.runtime.hook` (what every entry sro writes does) to stay off click's import cost.
    """
    from sro.node.runtime import hook as hookmod

    if not args or args[0] in ("-h", "--help"):
        click.echo(hookmod.__doc__)
        return
    if args[0] == "install-hooksd":
        sys.exit(
            install_hooksd.main(list(args[1:]), prog_name="sro hook install-hooksd", standalone_mode=True)
        )
    sys.exit(hookmod.main(list(args)))


@click.command("install-hooksd")
@click.option("--dir", "directory", required=True, help="hooks.d directory (podman: --hooks-dir).")
@recipe_option(multiple=True)
@click.option("--driver-root", default=None)
@click.option("--dev-root", default=None)
@click.option(
    "--stage", type=click.Choice(["prestart", "createContainer"]), default="prestart", show_default=True
)
@click.option("--python", default=sys.executable, show_default=True, help="Absolute interpreter path.")
@click.option(
    "--accept-envvar-unprivileged",
    is_flag=True,
    help="UNSAFE: honour an unprivileged container's own env/annotations, not only its allocation.",
)
def install_hooksd(
    directory: str,
    recipe: tuple[str, ...],
    driver_root: str | None,
    dev_root: str | None,
    stage: str,
    python: str,
    accept_envvar_unprivileged: bool,
) -> None:
    """Write <dir>/sro-hook.json (oci-hooks 1.0.0) that runs the hook with an explicit env."""
    from sro.node.runtime.specedits import HookCommand, hooks_d, precompile

    opts = _hook_options(recipe, driver_root, dev_root)
    if accept_envvar_unprivileged:
        opts += ["--accept-envvar-unprivileged", "true"]
    doc = hooks_d(HookCommand(python, tuple(opts)), stage)
    path = os.path.join(directory, "sro-hook.json")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(doc, f, indent=2)
        os.replace(path + ".tmp", path)
    except OSError as e:
        raise click.ClickException(f"cannot write {e.filename or path}: {e.strerror}") from None
    if not precompile(python):
        click.echo("warning: could not write the hook's bytecode; it will compile on every start", err=True)
    click.echo(f"wrote {path}", err=True)


@click.command(cls=_PassThrough, context_settings=_PASS)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def runtime(args: tuple[str, ...]) -> None:
    """runc wrapper: `sro runtime [--runc P] [--mode hook|cdi] [hook opts] -- RUNC-ARGS` (or RUNC-ARGS).

    `sro runtime install --root DIR [options]` installs the node's runtime files for the host (the
    hook as a zipapp, the launcher, hooks.d, CDI specs); `sro runtime uninstall --root DIR` removes
    them but for a pass-through launcher (`--purge`: that too); `--help` after either says more.
    `sro runtime write-launcher PATH [--mode hook|cdi] [hook options]` writes a launcher that runs
    this installation's own Python (development only).
    """
    from sro.node.runtime import launcher, wrapper

    if args and args[0] in ("-h", "--help"):
        click.echo(runtime.help)
        return
    if args and args[0] in ("install", "uninstall"):
        command = install_command if args[0] == "install" else uninstall_command
        sys.exit(command.main(list(args[1:]), prog_name=f"sro runtime {args[0]}", standalone_mode=True))
    if args and args[0] == "write-launcher":
        if len(args) < 2 or args[1].startswith("-"):
            if len(args) > 1 and args[1] in ("-h", "--help"):
                click.echo(launcher.__doc__)
                return
            raise click.UsageError(
                "write-launcher needs a PATH (sro runtime write-launcher PATH [--mode hook|cdi])"
            )
        rest = list(args[2:])
        mode = "hook"
        if "--mode" in rest:
            i = rest.index("--mode")
            mode = rest[i + 1] if i + 1 < len(rest) else ""
            del rest[i : i + 2]
        launcher.write(args[1], sys.executable, mode=mode, hook_options=rest)
        from sro.node.runtime.specedits import precompile

        if not precompile(sys.executable):
            click.echo(
                "warning: could not write the wrapper's bytecode; it compiles on every start", err=True
            )
        click.echo(f"wrote {args[1]}", err=True)
        return
    wrapper.main(list(args) if "--" in args else ["--", *args])


def _log(message: str) -> None:
    click.echo(message, err=True)


def _custom_recipes(paths: tuple[Path, ...]) -> dict[str, Recipe]:
    """The --recipe-file recipes by name; a bad file (or two of one name) ends the command in one
    line, before anything is written."""
    out: dict[str, Recipe] = {}
    for path in paths:
        try:
            r = recipe_from_file(path)
        except RecipeError as e:
            raise click.ClickException(str(e)) from None
        if r.name in out:
            raise click.ClickException(f"{path}: name: recipe {r.name!r} is given twice")
        out[r.name] = r
    return out


@click.command("install")
@click.option(
    "--root", default=RUNTIME_ROOT, show_default=True, help="Directory the files go in (sro's alone)."
)
@click.option("--host-root-path", default=None, help="What the host calls --root (default: --root).")
@click.option("--host-root", default="/", show_default=True, help="Where this process sees the host's /.")
@recipe_option(multiple=True, help="Repeatable; default (with no --recipe-file either): every built-in.")
@click.option(
    "--recipe-file",
    "recipe_files",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Repeatable: a custom recipe (YAML/JSON), installed as <root>/recipes/<name>.json.",
)
@click.option("--driver-root", default=None, help="Host path of these recipes' driver (default: theirs).")
@click.option("--dev-root", default="/dev", show_default=True, help="Host directory standing for /dev.")
@click.option("--python", default="/usr/bin/python3", show_default=True, help="The host's interpreter.")
@click.option("--runc", default=None, help="The host's runc (default: /usr/sbin/runc).")
@click.option("--mode", type=click.Choice(["hook", "cdi"]), default="hook", show_default=True)
@click.option(
    "--stage", type=click.Choice(["prestart", "createContainer"]), default="prestart", show_default=True
)
@click.option("--no-cdi", is_flag=True, help="Write no CDI specs.")
@click.option(
    "--cdi-dir",
    default="",
    help="Also write each recipe's live CDI spec (<vendor>-<class>.yaml) in this directory the "
    "container runtime reads (containerd >= 1.7, CRI-O: /var/run/cdi); kept current with --wait.",
)
@click.option(
    "--cdi-ldcache-hook",
    is_flag=True,
    help="Give the live CDI spec the createContainer hook that runs ldconfig (sro's Python on every "
    "start): for images whose loader does not search the driver's library folders.",
)
@click.option(
    "--report-file",
    default=None,
    help="With --wait: append a line here for each CDI spec repaired (the runtime pod's report).",
)
@click.option(
    "--poll", type=float, default=1.0, show_default=True, help="With --wait: seconds between checks."
)
@click.option(
    "--crio-hooks-dir",
    default="",
    help="Also put the hooks.d entry in this directory CRI-O reads (RHCOS: /etc/containers/oci/hooks.d); "
    "only with a --python known to be 3.11 or later.",
)
@click.option(
    "--accept-envvar-unprivileged",
    is_flag=True,
    help="UNSAFE: an unprivileged container gets whatever devices its own env or annotations name, "
    "not only what the device plugin allocated to it (off by default).",
)
@click.option(
    "--management-namespace",
    "management_namespaces",
    multiple=True,
    help="Repeatable: where SRO_MANAGEMENT_DEVICES is honoured (default: sro-system).",
)
@click.option(
    "--owner", default="default", show_default=True, help="Who asks (uninstall drops only its claim)."
)
@click.option(
    "--wait", is_flag=True, help="Stay running; on SIGTERM/SIGINT drop this claim as `uninstall` does."
)
@click.option("--ready-file", default=None, help="Written once installed (a readiness probe tests it).")
def install_command(
    root: str,
    host_root_path: str | None,
    host_root: str,
    recipe: tuple[str, ...],
    recipe_files: tuple[Path, ...],
    driver_root: str | None,
    dev_root: str,
    python: str,
    runc: str | None,
    mode: str,
    stage: str,
    no_cdi: bool,
    cdi_dir: str,
    cdi_ldcache_hook: bool,
    report_file: str | None,
    poll: float,
    crio_hooks_dir: str,
    accept_envvar_unprivileged: bool,
    management_namespaces: tuple[str, ...],
    owner: str,
    wait: bool,
    ready_file: str | None,
) -> None:
    """Install the node's runtime files in --root for the host: the hook and the runc wrapper as a
    stdlib-only zipapp (sro-hook.pyz), the launcher a containerd runtime handler names as its
    BinaryName (sro-runtime), hooks.d/sro-hook.json for CRI-O and podman, cdi/<vendor>-<class>.json
    per recipe with devices, and manifest.json. Fails if the host has no --python. Idempotent.
    With --crio-hooks-dir, the hooks.d entry goes there too (CRI-O runs it for every container).

    The files are shared by every recipe and owner on the node (the runtime state of each
    SpecialResource names its own --owner); the manifest records both. A pass-through launcher an
    earlier uninstall left is replaced.

    With --cdi-dir, each recipe's live CDI spec goes there too; with --wait, the specs are kept
    current (devices added or gone, MIG layout, driver upgrade) and repaired when removed or
    edited by hand (sro.node.runtime.cdikeeper), until SIGTERM."""
    import signal

    from sro.node.runtime import cdikeeper, hostinstall
    from sro.node.runtime.hook import DEFAULT_MANAGEMENT_NAMESPACES
    from sro.node.runtime.rootmanifest import InstallError, Settings
    from sro.node.runtime.wrapper import RUNC

    root = os.path.abspath(root)
    custom = _custom_recipes(recipe_files)
    names = (*recipe, *custom) if recipe or custom else tuple(sorted(BUILTIN))
    stop = {signal.SIGTERM, signal.SIGINT}
    if wait:  # held from now on: a stop that comes while installing is answered right after it
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    try:
        settings = Settings(
            host_dir=host_root_path or root,
            python=python,
            runc=runc or RUNC,
            mode=mode,
            dev_root=dev_root,
            stage=stage,
            crio_hooks_dir=crio_hooks_dir,
            accept_envvar_unprivileged=accept_envvar_unprivileged,
            management_namespaces=",".join(management_namespaces or DEFAULT_MANAGEMENT_NAMESPACES),
            cdi_dir="" if no_cdi else os.path.normpath(cdi_dir) if cdi_dir else "",
            cdi_ldcache=cdi_ldcache_hook,
        )
        recipes = dict.fromkeys(names, driver_root)
        done = hostinstall.install(
            root, recipes, settings, host_root, not no_cdi, log=_log, owner=owner, custom=custom
        )
    except InstallError as e:
        raise click.ClickException(str(e)) from None
    keeper = cdikeeper.Keeper(root, host_root, _log, report_file)
    if done.repaired:
        keeper.say(done.repaired)
    _log(f"installed the runtime files for {', '.join(names)} in {root}")
    if ready_file:
        with open(ready_file, "w") as f:
            f.write("ready\n")
    if not wait:
        return
    keeper.start()
    while True:  # keep the CDI specs current until told to stop
        info = signal.sigtimedwait(stop, max(poll, 0.05))
        # only a stop signal ends it: a wait cut short (the process stopped and continued: SIGSTOP,
        # SIGCONT) comes back with a siginfo that names no signal of the set
        if info is not None and info.si_signo in stop:
            sig = info.si_signo
            break
        keeper.tick()
    _log(f"{signal.Signals(sig).name}: removing the runtime files of {', '.join(names)}")
    try:
        hostinstall.uninstall(root, names, log=_log, owner=owner)
    except InstallError as e:
        raise click.ClickException(str(e)) from None
    finally:
        if ready_file and os.path.exists(ready_file):
            os.unlink(ready_file)


@click.command("uninstall")
@click.option("--root", default=RUNTIME_ROOT, show_default=True)
@recipe_option(multiple=True, builtin_only=False, help="Repeatable; default: every recipe installed there.")
@click.option("--owner", default="default", show_default=True, help="Whose claim to drop.")
@click.option("--any-owner", is_flag=True, help="Drop every owner's claim on the recipes.")
@click.option(
    "--purge",
    is_flag=True,
    help="Every owner's claim, and the launcher too: only once no container of the handler remains.",
)
def uninstall_command(root: str, recipe: tuple[str, ...], owner: str, any_owner: bool, purge: bool) -> None:
    """Remove what `sro runtime install` wrote in --root (only files its manifest lists): a recipe
    no owner uses any more loses its CDI spec; with the last recipe go the zipapp, hooks.d, the CDI
    specs and the manifest, and the launcher becomes a pass-through one that only runs runc:
    containerd runs the launcher to stop and delete every container the runtime handler started.

    --purge drops every owner's claim (as --any-owner) and removes the launcher as well (or the
    pass-through one an earlier uninstall left). Use it only when no container started through the
    handler remains (none running, none stopped and not yet deleted): those could not be stopped."""
    from sro.node.runtime import hostinstall
    from sro.node.runtime.rootmanifest import InstallError

    who = None if any_owner or purge else owner
    try:
        hostinstall.uninstall(os.path.abspath(root), recipe, log=_log, owner=who, purge=purge)
    except InstallError as e:
        raise click.ClickException(str(e)) from None
