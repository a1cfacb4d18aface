"""`sro runtime install | uninstall`: the node's runtime files, in one directory the installer owns.

Why: the runtime state's DaemonSet runs sro's image, but what it installs runs on the host, started
by runc, containerd or CRI-O with the host's python3: so it installs a self-contained copy of the
hook and the wrapper (`bundling`, a zipapp), the launcher a containerd runtime handler names as its
BinaryName, a hooks.d entry for CRI-O/podman and a CDI spec per recipe, all naming host paths.

Layout of the root (RUNTIME_ROOT, /var/lib/sro/runtime, on a node):

    sro-hook.pyz            the hook + wrapper zipapp (stdlib only)
    sro-runtime             the launcher (0755): containerd's runtime handler `sro` execs it; with
                            no recipe left, the pass-through launcher (runc only) stands there
    hooks.d/sro-hook.json   oci-hooks 1.0.0 entry (CRI-O: hooks_dir; podman: --hooks-dir)
    cdi/<vendor>-<class>.json   one CDI spec per recipe with devices on this node (CRI-O, containerd >= 1.7)
    recipes/<name>.json     a custom recipe (`--recipe-file`), named by --recipe-file in every entry
    manifest.json           what was installed, for whom, with which settings; uninstall removes only that

and, with `--cdi-dir` (the runtime state's DaemonSet: /var/run/cdi, where containerd >= 1.7 and
CRI-O read them), each recipe's live CDI spec `<vendor>-<class>.yaml` there, listed as an external
file: no hook in it, so a container the device plugin names by CDI starts with no sro code run;
`install --wait` keeps it current and repairs it (`refresh`, run by `cdikeeper`).

and, with `--crio-hooks-dir` (the runtime state on OpenShift: /etc/containers/oci/hooks.d, the
directory CRI-O reads hooks from on RHCOS), the same hooks.d entry there too, listed in the manifest
as an external file. That one is live: CRI-O runs it for every container of the node, so it is
written only after the archive it names, removed before anything else, and written only where the
host's interpreter is known to run the hook (3.11 or later): a hook that cannot start would fail
every container start on the node. RHCOS ships no such interpreter (RHEL 8-based releases have only
platform-python 3.6, RHEL 9-based ones python 3.9; Fedora CoreOS has none): there the install fails
before writing anything, saying so, and the runtime state's pod on that node is failed with that
reason until an interpreter of 3.11 or later is layered onto the node and named with --python.

The files are shared by every recipe installed on the node: the manifest records the recipes and,
for each, its owners (who asked for it: the runtime state's DaemonSet of each SpecialResource, a
test, the demo), and the launcher and hooks.d entry act for exactly those recipes (`--recipe` each).
Installing adds a recipe or an owner; uninstalling drops an owner, and a recipe with no owner left
loses its CDI spec while the shared files are rewritten for the rest; once no recipe is left, every
file the manifest lists is removed, the manifest last, but for the launcher: containerd runs it for
`state`, `kill` and `delete` of every container the handler started, so it is replaced (atomically)
by a pass-through one that only execs runc (`sro.api.passthrough`), listed nowhere; the next install
writes over it, and only `uninstall --purge` removes it. Concurrent installers (one per
SpecialResource) take turns through a lock on the root directory, and writes are atomic
(`rootwrites`); the settings and the manifest are `rootmanifest`, the host's paths `hostpaths`,
its interpreter `hostpython`.

Where the installer runs in a container, `host_root` is where it sees the host's `/` (the python it
names must exist there; the CDI spec's driver files are found under it and written as host paths)
and `host_dir` what the host calls the root directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace

from sro.api import passthrough
from sro.api.names import RUNTIME_LAUNCHER
from sro.api.recipes import BUILTIN, Recipe
from sro.node.runtime import bundling, cdi, cdidevices, installedrecipes, launcher, specedits
from sro.node.runtime.hostpaths import host_inventory, on_host
from sro.node.runtime.hostpython import check_live_hook_python, check_python, try_python
from sro.node.runtime.inventory import DriverInventory
from sro.node.runtime.rootmanifest import (
    HOOKS_D_FILE,
    HOOKS_D_NAME,
    MANIFEST,
    File,
    InstallError,
    Log,
    Manifest,
    Settings,
    recipe_file,
)
from sro.node.runtime.rootwrites import RootLock, apply_files, read_manifest, sha256, write_atomic

LAUNCHER_NAME = os.path.basename(RUNTIME_LAUNCHER)
CDI_DIR = "cdi"
DEFAULT_OWNER = "default"


def _quiet(_: str) -> None:
    pass


def hook_options(
    recipes: Mapping[str, str | None], dev_root: str, files: Mapping[str, str] | None = None
) -> list[str]:
    """The options every hook and wrapper invocation carries: exactly the installed recipes, a
    custom one (in `files`: name -> host path of its JSON) as --recipe-file."""
    opts: list[str] = []
    files = files or {}
    for name in sorted(recipes):
        opts += ["--recipe-file", files[name]] if name in files else ["--recipe", name]
    for name, root in sorted(recipes.items()):
        if root:
            opts += ["--driver-root", f"{name}={root}"]
    if dev_root != "/dev":
        opts += ["--dev-root", dev_root]
    return opts


def _json(doc: object) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()


def _hooks_entry(settings: Settings, recipes: Mapping[str, str | None], files: Mapping[str, str]) -> File:
    opts = hook_options(recipes, settings.dev_root, files) + settings.trust_options
    cmd = specedits.HookCommand(settings.python, tuple(opts), root=settings.archive)
    return File(_json(specedits.hooks_d(cmd, settings.stage)))


def shared_files(
    settings: Settings, recipes: Mapping[str, str | None], custom: Iterable[str] = ()
) -> dict[str, File]:
    """The zipapp, the launcher and the hooks.d entry for `recipes`, of which `custom` are custom
    recipes installed from a file (pure)."""
    files = installedrecipes.host_files(settings, (n for n in custom if n in recipes))
    opts = hook_options(recipes, settings.dev_root, files) + settings.trust_options
    text = launcher.render(settings.python, settings.runc, settings.mode, opts, root=settings.archive)
    return {
        bundling.ARCHIVE_NAME: File(bundling.build(settings.archive)),
        LAUNCHER_NAME: File(text.encode(), 0o755),
        HOOKS_D_FILE: _hooks_entry(settings, recipes, files),
    }


def refresh(root: str, host_root: str = "/", log: Log = _quiet) -> Manifest | None:
    """One keeper pass (`install --wait`): the CDI specs of every recipe installed in `root` made
    again from the node's devices now, written where they differ (a device gone or added, a MIG
    layout, a driver upgrade; a spec removed or edited by hand: `repaired` says which), the rest of
    the files left as the manifest has them. None when nothing is installed there any more."""
    with RootLock(root):
        old = read_manifest(root)
        if old is None or not old.recipes:
            return None
        settings = old.settings
        custom = installedrecipes.load(root, old)
        names = installedrecipes.custom_names(old)
        files: dict[str, File | None] = dict.fromkeys((bundling.ARCHIVE_NAME, LAUNCHER_NAME))
        files[HOOKS_D_FILE] = _hooks_entry(
            settings, old.recipes, installedrecipes.host_files(settings, names)
        )
        files.update(dict.fromkeys(recipe_file(n) for n in names))
        live = external_files(settings, files)
        notes: list[str] = []
        with_cdi = bool(settings.cdi_dir) or any(p.startswith(f"{CDI_DIR}/") for p in old.files)
        for name, driver_root in sorted(old.recipes.items()):
            if with_cdi and (name in BUILTIN or name in custom):
                made, external, said = cdi_files(settings, name, driver_root, host_root, custom)
                files.update(made)
                live.update(external)
                notes += said
        repairs = cdi_repairs(old, live)
        for r in repairs:
            log(f"repairing {r}")
        for note in sorted(set(notes) - set(old.notes)):
            log(note)
        new = Manifest(settings, old.recipes, {}, tuple(notes), old.owners)
        done = apply_files(root, old, new, files, _changes_only(log), live)
        return replace(done, repaired=tuple(repairs))


def _changes_only(log: Log) -> Log:
    def say(message: str) -> None:
        if not message.startswith("unchanged "):
            log(message)

    return say


def cdi_files(
    settings: Settings,
    name: str,
    driver_root: str | None,
    host_root: str,
    custom: Mapping[str, Recipe] | None = None,
) -> tuple[dict[str, File], dict[str, File], tuple[str, ...]]:
    """The recipe's CDI specs: (root copy by relative path, live spec by absolute path, notes).

    The root copy (JSON, with the ldcache hook) is for podman and CRI-O pointed at the root; the
    live one (YAML, in `settings.cdi_dir`, no hook unless `cdi_ldcache`) is what containerd and
    CRI-O apply for the device plugin's CDI names. A recipe with no devices here has neither, and a
    note that says why. `custom`: the custom recipes by name (their hook gets --recipe-file)."""
    custom = custom or {}
    recipe = custom[name] if name in custom else BUILTIN[name]
    own = installedrecipes.host_files(settings, (name,))[name] if name in custom else None
    opts = (["--recipe-file", own] if own else ["--recipe", name]) + (
        ["--driver-root", f"{name}={driver_root}" if own else driver_root] if driver_root else []
    )
    ldcache = specedits.HookCommand(settings.python, tuple(opts), root=settings.archive)
    root = driver_root or recipe.driver_root
    try:
        inv = host_inventory(recipe, driver_root, settings.dev_root, host_root)
        extra, notes = _extra_devices(
            recipe, name in custom, inv, on_host(host_root, root), settings, host_root
        )
        spec = cdi.generate(recipe, inv, ldcache, extra=extra)
        links = cdidevices.library_links(inv, on_host(host_root, root))
        live_hook = ldcache if settings.cdi_ldcache else None
        live = cdi.generate(recipe, inv, live_hook, extra=extra, links=links, void=False)
    except (cdi.CDIError, InstallError, ValueError) as e:
        return {}, {}, (f"{name}: no CDI spec ({e})",)
    rel = f"{CDI_DIR}/{cdi.spec_file_name(recipe, 'json')}"
    files = {rel: File(cdi.dumps(spec, "json").encode())}
    external = {}
    if settings.cdi_dir:
        path = os.path.join(settings.cdi_dir, cdi.spec_file_name(recipe, "yaml"))
        external[path] = File(cdi.dumps(live, "yaml").encode())
    return files, external, tuple(f"{name}: {n}" for n in notes)


def _extra_devices(
    recipe: Recipe, custom: bool, inv: DriverInventory, driver_dir: str, settings: Settings, host_root: str
) -> tuple[tuple[cdidevices.ExtraDevice, ...], tuple[str, ...]]:
    """The CDI names beyond node numbers (`cdidevices`): a custom recipe's come from its simulated
    driver's device list alone (no NVIDIA /proc, no note about it); devnodes hardware has none."""
    if custom and recipe.backend != "nvml":
        listed = cdidevices.read_device_list(driver_dir) if recipe.backend == "simulated" else None
        if listed is None:
            return (), ()
        return cdidevices.extra_devices(inv, listed, {}, host_root, settings.dev_root)
    listed = cdidevices.read_device_list(driver_dir)
    proc = cdidevices.read_proc_uuids(host_root) if listed is None else {}
    return cdidevices.extra_devices(inv, listed, proc, host_root, settings.dev_root)


def cdi_repairs(old: Manifest | None, live: Mapping[str, File]) -> list[str]:
    """Why each live CDI spec the old manifest lists is about to be rewritten though sro did not
    change it (removed, or changed by someone else): what the runtime state reports as repaired.
    A spec sro wrote and the node's devices changed since is an update, not a repair."""
    if old is None:
        return []
    out = []
    for path, f in sorted(live.items()):
        meta = old.external.get(path)
        if meta is None:
            continue
        try:
            with open(path, "rb") as fh:
                data: bytes | None = fh.read()
        except FileNotFoundError:
            data = None
        except OSError as e:
            out.append(f"{path}: unreadable ({e.strerror})")
            continue
        if data == f.data:
            continue
        if data is None:
            out.append(f"{path}: removed")
        elif sha256(data) != meta.get("sha256"):
            out.append(f"{path}: changed since sro wrote it")
    return out


def external_files(settings: Settings, shared: Mapping[str, File | None]) -> dict[str, File]:
    """The live hooks.d entry in CRI-O's directory (absolute path -> the same file as ours), if asked.
    (The live CDI specs are external too: `cdi_files`.)"""
    entry = shared.get(HOOKS_D_FILE)
    if not settings.crio_hooks_dir or entry is None:
        return {}
    return {os.path.join(settings.crio_hooks_dir, HOOKS_D_NAME): entry}


def install(
    root: str,
    recipes: Mapping[str, str | None],
    settings: Settings,
    host_root: str = "/",
    with_cdi: bool = True,
    log: Log = _quiet,
    owner: str = DEFAULT_OWNER,
    custom: Mapping[str, Recipe] | None = None,
) -> Manifest:
    """Install (or refresh) the runtime files for `recipes` (name -> driver root or None) in `root`,
    on behalf of `owner`; `custom` holds the recipes among them that are not built in (by name: each
    is written to recipes/<name>.json, see `installedrecipes`).

    The recipes join those already installed there; `settings` replace the node's settings.
    """
    custom = dict(custom or {})
    recipes = {**dict.fromkeys(custom), **recipes}
    unknown = sorted(set(recipes) - set(BUILTIN) - set(custom))
    if unknown:
        raise InstallError(f"unknown recipe(s) {', '.join(unknown)} (known: {', '.join(sorted(BUILTIN))})")
    if not recipes:
        raise InstallError("no recipe to install")
    check_python(settings, host_root)
    if settings.crio_hooks_dir:
        check_live_hook_python(settings, host_root)
    if not os.path.isfile(on_host(host_root, settings.runc)):
        log(f"warning: no runc at {settings.runc} on this node: the launcher {LAUNCHER_NAME} cannot work")
    with RootLock(root):
        old = read_manifest(root)
        installedrecipes.check_claims(root, old, custom, owner)
        if old is not None and old.settings != settings:
            log(f"settings for every recipe in {root} change: {asdict(old.settings)} -> {asdict(settings)}")
        merged = {**(old.recipes if old is not None else {}), **recipes}
        owners = {n: tuple(o) for n, o in (old.owners if old is not None else {}).items() if n in merged}
        for name in recipes:
            owners[name] = tuple(sorted({*owners.get(name, ()), owner}))
        # a recipe given now by name is a built-in: one of that name installed from a file is replaced
        kept = {n: r for n, r in installedrecipes.load(root, old, skip=recipes).items() if n in merged}
        custom = {**kept, **custom}
        files: dict[str, File | None] = dict(shared_files(settings, merged, custom))
        files.update({recipe_file(n): installedrecipes.document(r) for n, r in custom.items()})
        if host_root == "/":
            tag = _checked_archive(root, settings, files[bundling.ARCHIVE_NAME])
            if tag != bundling.CACHE_TAG:
                log(f"note: {settings.python} is {tag}; the bundled bytecode is {bundling.CACHE_TAG}")
        notes: list[str] = []
        live = external_files(settings, files)
        for name, driver_root in sorted(merged.items()):
            if not with_cdi:
                continue
            made, external, said = cdi_files(settings, name, driver_root, host_root, custom)
            files.update(made)
            live.update(external)
            notes += said
            for note in said:  # why a spec is missing, every time; what it lacks, once
                if "no CDI spec" in note or old is None or note not in old.notes:
                    log(note)
        repairs = cdi_repairs(old, live)
        for r in repairs:
            log(f"repairing {r}")
        done = apply_files(root, old, Manifest(settings, merged, {}, tuple(notes), owners), files, log, live)
        return replace(done, repaired=tuple(repairs))


def _checked_archive(root: str, settings: Settings, archive: File | None) -> str:
    """Run the host's python on the new zipapp before it replaces anything (host runs only)."""
    assert archive is not None
    tmp = os.path.join(root, f".check-{os.getpid()}.pyz")
    try:
        with open(tmp, "wb") as f:
            f.write(archive.data)
        return try_python(settings.python, tmp)
    finally:
        os.unlink(tmp)


def _leave_passthrough(root: str, runc: str, log: Log) -> None:
    """Put the pass-through launcher where the launcher is, in one rename (never a moment without
    one); a symlink or other non-file there now is not sro's and stays."""
    path = os.path.join(root, LAUNCHER_NAME)
    if os.path.islink(path):
        log(f"left {path}: a symlink now, not the file sro wrote")
        return
    if os.path.lexists(path) and not os.path.isfile(path):
        log(f"left {path}: not a regular file any more")
        return
    write_atomic(path, File(passthrough.render(runc).encode(), 0o755))
    log(f"left {path}, now a pass-through launcher (runc only): its containers can still be stopped")


def _purge_passthrough(root: str, log: Log) -> None:
    """Remove a pass-through launcher an earlier uninstall left (no manifest lists it)."""
    path = os.path.join(root, LAUNCHER_NAME)
    if os.path.islink(path) or not os.path.isfile(path):
        return
    with open(path, "rb") as f:
        data = f.read(8192)
    if passthrough.is_passthrough(data):
        os.unlink(path)
        log(f"removed {path}")
    else:
        log(f"left {path}: not a launcher sro wrote")


def _kept_live_specs(
    old: Manifest, left: Mapping[str, str | None], custom: Mapping[str, Recipe]
) -> dict[str, File]:
    """The live CDI specs of the recipes that stay, as they are on disk now (their keeper, the
    runtime state of another owner, refreshes them)."""
    out = {}
    for name in left:
        recipe = installedrecipes.recipe_of(name, custom)
        if recipe is None:
            continue
        path = os.path.join(old.settings.cdi_dir, cdi.spec_file_name(recipe, "yaml"))
        if path not in old.external:
            continue
        try:
            with open(path, "rb") as f:
                out[path] = File(f.read())
        except OSError:
            continue
    return out


def uninstall(
    root: str,
    recipes: tuple[str, ...] = (),
    log: Log = _quiet,
    owner: str | None = DEFAULT_OWNER,
    purge: bool = False,
) -> Manifest | None:
    """Drop `owner`'s claim on `recipes` (default: all) in `root` (owner None: every claim). A recipe
    nobody owns any more loses its CDI spec; once none is left, every file the manifest lists goes,
    but the launcher becomes the pass-through one (containerd still runs it to stop the containers
    it started) unless `purge`, which removes that too (only safe once no such container remains).
    Files the manifest does not list are never touched, but for a pass-through launcher on `purge`."""
    if not os.path.isdir(root):
        log(f"nothing installed in {root}")
        return None
    with RootLock(root):
        old = read_manifest(root)
        if old is None:
            if purge:
                _purge_passthrough(root, log)
            log(f"nothing installed in {root} (no {MANIFEST})")
            return None
        asked = set(recipes or old.recipes)
        for name in sorted(asked - set(old.recipes)):
            log(f"{name} was not installed in {root}")
        owners = dict(old.owners)
        for name in asked & set(old.recipes):
            had = old.owners.get(name, ())
            owners[name] = () if owner is None else tuple(o for o in had if o != owner)
            if owner is not None and owner not in had:
                log(f"{name} was not installed by {owner} (owners: {', '.join(had) or 'none'})")
            elif owners[name]:
                log(f"{name} stays installed: still used by {', '.join(owners[name])}")
        left = {n: r for n, r in old.recipes.items() if owners.get(n)}
        owners = {n: o for n, o in owners.items() if n in left}
        files: dict[str, File | None] = {}
        names = installedrecipes.custom_names(old)
        custom = installedrecipes.load(root, old, skip=set(names) - set(left), log=log) if left else {}
        if left:
            files = dict(shared_files(old.settings, left, names))
            files[bundling.ARCHIVE_NAME] = None  # the same code keeps running: leave the archive be
            kept = (installedrecipes.recipe_of(n, custom) for n in left)
            cdi_paths = {f"{CDI_DIR}/{cdi.spec_file_name(r, 'json')}" for r in kept if r is not None}
            files.update(dict.fromkeys(cdi_paths & set(old.files)))
            files.update(dict.fromkeys(recipe_file(n) for n in names if n in left))
        elif not purge:
            _leave_passthrough(root, old.settings.runc, log)
            old = replace(old, files={k: v for k, v in old.files.items() if k != LAUNCHER_NAME})
        notes = tuple(n for n in old.notes if n.split(":", 1)[0] in left)
        live = external_files(old.settings, files)
        if left and old.settings.cdi_dir:
            live.update(_kept_live_specs(old, left, custom))
        return apply_files(root, old, Manifest(old.settings, left, {}, notes, owners), files, log, live)
