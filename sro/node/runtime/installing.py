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
    manifest.json           what was installed, for whom, with which settings; uninstall removes only that

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
SpecialResource) take turns through a lock on the root directory. Writes are atomic (a temporary
file renamed over the old one) and skipped where the bytes and mode are already right.

Where the installer runs in a container, `host_root` is where it sees the host's `/` (the python it
names must exist there; the CDI spec's driver files are found under it and written as host paths)
and `host_dir` what the host calls the root directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace

from sro import __version__
from sro.api import passthrough
from sro.api.names import RUNTIME_LAUNCHER
from sro.api.recipes import BUILTIN, Recipe
from sro.node.runtime import bundling, cdi, driverfiles, launcher, specedits
from sro.node.runtime.inventory import DeviceNode, DriverInventory, FileMount
from sro.node.runtime.wrapper import RUNC

DEFAULT_PYTHON = "/usr/bin/python3"
LAUNCHER_NAME = os.path.basename(RUNTIME_LAUNCHER)
HOOKS_D_NAME = "sro-hook.json"
HOOKS_D_FILE = f"hooks.d/{HOOKS_D_NAME}"
MIN_HOOK_PYTHON = (3, 11)
CDI_DIR = "cdi"
MANIFEST = "manifest.json"
MANIFEST_KIND = "sro.dev/runtime-files"
MODES = ("hook", "cdi")
DEFAULT_OWNER = "default"
STAGES = ("prestart", "createContainer")

Log = Callable[[str], None]


class InstallError(RuntimeError):
    """The runtime files cannot be installed (or removed); the message says why and what to do."""


@dataclass(frozen=True)
class Settings:
    """Node-wide: one set per root, whoever installs last sets them for every recipe."""

    host_dir: str  # the root directory as the host names it
    python: str = DEFAULT_PYTHON  # the host's interpreter the hook and the wrapper run with
    runc: str = RUNC
    mode: str = "hook"  # the wrapper's: add the hook (hook) or write the devices into the spec (cdi)
    dev_root: str = "/dev"  # host directory standing for /dev
    stage: str = "prestart"  # the hooks.d entry's stage
    crio_hooks_dir: str = ""  # also put the hooks.d entry here (CRI-O's hooks_dir), "" for none

    def __post_init__(self) -> None:
        for what, path in (("--python", self.python), ("--runc", self.runc), ("the host dir", self.host_dir)):
            if not os.path.isabs(path):
                raise InstallError(f"{what} must be an absolute path, got {path!r}")
        if self.crio_hooks_dir and (
            not os.path.isabs(self.crio_hooks_dir)
            or os.path.normpath(self.crio_hooks_dir) != self.crio_hooks_dir
        ):
            raise InstallError(
                f"--crio-hooks-dir must be a normalised absolute path, got {self.crio_hooks_dir!r}"
            )
        if self.mode not in MODES:
            raise InstallError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.stage not in STAGES:
            raise InstallError(f"--stage must be one of {', '.join(STAGES)}, got {self.stage!r}")

    @property
    def archive(self) -> str:
        """Host path of the zipapp: what every bootstrap puts on sys.path."""
        return os.path.join(self.host_dir, bundling.ARCHIVE_NAME)


_CAMEL = {"host_dir": "hostDir", "python": "python", "runc": "runc", "mode": "mode"}
_CAMEL |= {"dev_root": "devRoot", "stage": "stage", "crio_hooks_dir": "crioHooksDir"}
_SNAKE = {v: k for k, v in _CAMEL.items()}


@dataclass(frozen=True)
class Manifest:
    """What manifest.json says: the settings, the recipes (name -> driver root or None) with their
    owners, and the files (relative path -> {"sha256", "mode"})."""

    settings: Settings
    recipes: Mapping[str, str | None] = field(default_factory=dict)
    files: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # e.g. why a recipe has no CDI spec
    owners: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # recipe -> who installed it
    external: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # absolute path -> meta

    def to_json(self) -> str:
        doc = {
            "kind": MANIFEST_KIND,
            "version": 1,
            "installedBy": f"sro {__version__}",
            "settings": {_CAMEL[k]: v for k, v in asdict(self.settings).items()},
            "recipes": {
                name: {"driverRoot": root, "owners": sorted(self.owners.get(name, ()))}
                for name, root in sorted(self.recipes.items())
            },
            "files": {path: dict(meta) for path, meta in sorted(self.files.items())},
            "notes": list(self.notes),
        }
        if self.external:
            doc["external"] = {path: dict(meta) for path, meta in sorted(self.external.items())}
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("kind") != MANIFEST_KIND:
            raise ValueError(f"not an sro runtime manifest (kind {MANIFEST_KIND})")
        recipes = {str(k): (v or {}).get("driverRoot") for k, v in doc.get("recipes", {}).items()}
        owners = {
            str(k): tuple(map(str, (v or {}).get("owners", ()))) for k, v in doc.get("recipes", {}).items()
        }
        files = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in doc.get("files", {}).items()}
        for path in files:
            _check_relative(path)
        external = {
            str(k): {str(a): str(b) for a, b in v.items()} for k, v in doc.get("external", {}).items()
        }
        for path in external:
            _check_external(path)
        settings = Settings(**{_SNAKE[k]: str(v) for k, v in doc["settings"].items() if k in _SNAKE})
        notes = tuple(str(n) for n in doc.get("notes", ()))
        return cls(settings, recipes, files, notes, owners, external)


@dataclass(frozen=True)
class File:
    data: bytes
    mode: int = 0o644


def _check_relative(path: str) -> str:
    parts = path.split("/")
    if os.path.isabs(path) or not path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"manifest lists {path!r}: not a plain relative path")
    return path


def _check_external(path: str) -> str:
    """An external file must be a hooks.d entry of ours: the manifest never names any other file."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or os.path.basename(path) != HOOKS_D_NAME:
        raise ValueError(
            f"manifest lists the external file {path!r}: not a {HOOKS_D_NAME} at an absolute path"
        )
    return path


def _quiet(_: str) -> None:
    pass


# -- the host -------------------------------------------------------------------------------------


def on_host(host_root: str, path: str, max_links: int = 40) -> str:
    """`path` of the host as this process sees it (under `host_root`), the host's symlinks followed
    as the host would: an absolute link target starts again at `host_root`, never at our `/`."""
    todo = [p for p in path.split("/") if p and p != "."]
    done: list[str] = []
    links = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(host_root, *done, part)
        if os.path.islink(here):
            links += 1
            if links > max_links:
                raise OSError(f"too many levels of symbolic links in {path}")
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            todo = [p for p in target.split("/") if p and p != "."] + todo
            continue
        done.append(part)
    return os.path.join(host_root, *done)


def check_python(settings: Settings, host_root: str) -> str:
    """Where the host's interpreter is as we see it; InstallError if the host has none there."""
    seen = on_host(host_root, settings.python)
    where = "" if host_root == "/" else f" (looked at {seen}, the host's / being {host_root})"
    if not os.path.isfile(seen) or not os.stat(seen).st_mode & 0o111:
        raise InstallError(
            f"this node has no Python interpreter at {settings.python}{where}: the OCI hook and the "
            "runc wrapper run with the host's python3 (3.11 or later); install it (Debian/Ubuntu: "
            "apt-get install python3-minimal) or name another with --python"
        )
    return seen


_PYTHON_NAME = re.compile(r"python(\d+)\.(\d+)$")
_PYTHON_LIB = re.compile(r"python(\d+)\.(\d+)")


def host_python_version(host_root: str, python: str) -> tuple[int, int] | None:
    """The version of the host's interpreter read from its files, without running it (it may be
    another distribution's, linked against another libc): the name it resolves to (python3 ->
    python3.11), else the one python3.N library directory next to it; None when that does not say."""
    seen = on_host(host_root, python)
    if not os.path.isfile(seen):
        return None
    m = _PYTHON_NAME.search(os.path.basename(seen))
    if m:
        return int(m.group(1)), int(m.group(2))
    prefix = os.path.dirname(os.path.dirname(seen))
    found = set()
    for lib in ("lib", "lib64"):
        try:
            names = os.listdir(os.path.join(prefix, lib))
        except OSError:
            continue
        for name in names:
            m = _PYTHON_LIB.fullmatch(name)
            if m and os.path.isfile(os.path.join(prefix, lib, name, "os.py")):
                found.add((int(m.group(1)), int(m.group(2))))
    return found.pop() if len(found) == 1 else None


def check_live_hook_python(settings: Settings, host_root: str) -> None:
    """Before a hooks.d entry goes where CRI-O runs it for every container: the interpreter must be
    known to run the hook (InstallError otherwise, with what to do)."""
    version = host_python_version(host_root, settings.python)
    need = ".".join(map(str, MIN_HOOK_PYTHON))
    where = f"{settings.crio_hooks_dir}/{HOOKS_D_NAME}"
    if version is None:
        raise InstallError(
            f"cannot tell the version of {settings.python} from its files, and {where} would run it for "
            f"every container on this node (it needs {need} or later): nothing was written; name an "
            "interpreter whose file name says its version (e.g. --python=/usr/bin/python3.11)"
        )
    if version < MIN_HOOK_PYTHON:
        raise InstallError(
            f"{settings.python} is Python {version[0]}.{version[1]}; the OCI hook needs {need} or later, "
            f"and {where} would run it for every container on this node: nothing was written. RHCOS "
            f"ships none ({version[0]}.{version[1]} at most): layer python{need} onto the node and name it "
            f"with --python (the SpecialResource's spec.runtime.args), or run without --crio-hooks-dir"
        )


def try_python(python: str, archive: str) -> str:
    """Run the zipapp's self-check with `python` (only where the host's programs run here)."""
    argv = [python, "-I", "-S", archive, "check"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/", env={})
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InstallError(f"{python} could not run the hook's self-check: {e}") from None
    if out.returncode != 0 or not out.stdout.startswith("ok "):
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        raise InstallError(f"{python} cannot run the hook (needs 3.11 or later): {' / '.join(tail)}")
    return out.stdout.split()[1]  # its cache tag, e.g. cpython-311


# -- what goes in the root ------------------------------------------------------------------------


def hook_options(recipes: Mapping[str, str | None], dev_root: str) -> list[str]:
    """The options every hook and wrapper invocation carries: exactly the installed recipes."""
    opts: list[str] = []
    for name in sorted(recipes):
        opts += ["--recipe", name]
    for name, root in sorted(recipes.items()):
        if root:
            opts += ["--driver-root", f"{name}={root}"]
    if dev_root != "/dev":
        opts += ["--dev-root", dev_root]
    return opts


def _json(doc: object) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()


def shared_files(settings: Settings, recipes: Mapping[str, str | None]) -> dict[str, File]:
    """The zipapp, the launcher and the hooks.d entry for `recipes` (pure)."""
    opts = hook_options(recipes, settings.dev_root)
    text = launcher.render(settings.python, settings.runc, settings.mode, opts, root=settings.archive)
    cmd = specedits.HookCommand(settings.python, tuple(opts), root=settings.archive)
    return {
        bundling.ARCHIVE_NAME: File(bundling.build(settings.archive)),
        LAUNCHER_NAME: File(text.encode(), 0o755),
        HOOKS_D_FILE: File(_json(specedits.hooks_d(cmd, settings.stage))),
    }


def _strip(path: str, host_root: str) -> str:
    if host_root == "/":
        return path
    rel = os.path.relpath(path, host_root)
    if rel == ".." or rel.startswith("../"):
        raise InstallError(f"{path} resolves outside the host's / ({host_root}): an absolute link?")
    return "/" + rel if rel != "." else "/"


def _host_mount(m: FileMount, host_root: str) -> FileMount:
    return FileMount(_strip(m.host_path, host_root), m.container_path, m.kind)


def _host_node(d: DeviceNode, host_root: str) -> DeviceNode:
    return DeviceNode(d.path, _strip(d.host_path, host_root), d.major, d.minor, d.file_mode, d.device_id)


def host_inventory(recipe: Recipe, driver_root: str | None, dev_root: str, host_root: str) -> DriverInventory:
    """The recipe's driver files found under `host_root`, named as the host names them."""
    root = driver_root or recipe.driver_root
    inv = driverfiles.discover(recipe, on_host(host_root, root), on_host(host_root, dev_root))

    def groups(g: Mapping[str, tuple[FileMount, ...]]) -> dict[str, tuple[FileMount, ...]]:
        return {cap: tuple(_host_mount(m, host_root) for m in ms) for cap, ms in g.items()}

    return DriverInventory(
        recipe=inv.recipe,
        devices=tuple(_host_node(d, host_root) for d in inv.devices),
        control_nodes=tuple(_host_node(d, host_root) for d in inv.control_nodes),
        libraries=groups(inv.libraries),
        binaries=groups(inv.binaries),
        directories=groups(inv.directories),
        firmware=tuple(_host_mount(m, host_root) for m in inv.firmware),
        aliases=dict(inv.aliases),
    )


def cdi_file(
    settings: Settings, name: str, driver_root: str | None, host_root: str
) -> tuple[str, File] | str:
    """(path, file) of the recipe's CDI spec, or why it has none (no devices on this node)."""
    recipe = BUILTIN[name]
    opts = ["--recipe", name] + (["--driver-root", driver_root] if driver_root else [])
    ldcache = specedits.HookCommand(settings.python, tuple(opts), root=settings.archive)
    try:
        inv = host_inventory(recipe, driver_root, settings.dev_root, host_root)
        spec = cdi.generate(recipe, inv, ldcache)
    except (cdi.CDIError, InstallError, ValueError) as e:
        return f"{name}: no CDI spec ({e})"
    return f"{CDI_DIR}/{cdi.spec_file_name(recipe, 'json')}", File(cdi.dumps(spec, "json").encode())


# -- writing and removing -------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _same(path: str, f: File) -> bool:
    try:
        st = os.lstat(path)
        if not os.path.isfile(path) or os.path.islink(path) or (st.st_mode & 0o7777) != f.mode:
            return False
        with open(path, "rb") as fh:
            return fh.read(len(f.data) + 1) == f.data
    except OSError:
        return False


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, f: File) -> bool:
    """Write `f` at `path` through a temporary file and a rename; False if it was already so."""
    if _same(path, f):
        return False
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(f.data)
            fh.flush()
            os.fchmod(fh.fileno(), f.mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(os.path.dirname(path))
    return True


class _Locked:
    """An exclusive flock on the root directory itself (no lock file left behind)."""

    def __init__(self, root: str) -> None:
        os.makedirs(root, mode=0o755, exist_ok=True)
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def __enter__(self) -> _Locked:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def read_manifest(root: str) -> Manifest | None:
    path = os.path.join(root, MANIFEST)
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        return Manifest.from_json(text)
    except (ValueError, TypeError, KeyError) as e:
        raise InstallError(
            f"{path} is not a manifest sro can read ({e}); nothing was changed. Remove the files it "
            "lists by hand (or the whole directory, if nothing else lives there) and install again"
        ) from None


def _remove(root: str, rel: str, log: Log) -> None:
    path = os.path.join(root, rel)
    if os.path.islink(path) or not os.path.lexists(path):
        if os.path.islink(path):
            log(f"left {path}: a symlink now, not the file sro wrote")
        return
    if not os.path.isfile(path):
        log(f"left {path}: not a regular file any more")
        return
    os.unlink(path)
    log(f"removed {path}")
    parent = os.path.dirname(rel)
    while parent:  # directories we made (hooks.d, cdi), once empty
        try:
            os.rmdir(os.path.join(root, parent))
        except OSError:
            break
        parent = os.path.dirname(parent)


def external_files(settings: Settings, shared: Mapping[str, File | None]) -> dict[str, File]:
    """The live hooks.d entry in CRI-O's directory (absolute path -> the same file as ours), if asked."""
    entry = shared.get(HOOKS_D_FILE)
    if not settings.crio_hooks_dir or entry is None:
        return {}
    return {os.path.join(settings.crio_hooks_dir, HOOKS_D_NAME): entry}


def _remove_external(path: str, meta: Mapping[str, str], log: Log) -> None:
    """Remove a live hooks.d entry we wrote (the same bytes); the directory is CRI-O's and stays."""
    try:
        if os.path.islink(path) or not os.path.isfile(path):
            if os.path.lexists(path):
                log(f"left {path}: not a regular file any more")
            return
        with open(path, "rb") as f:
            same = _sha256(f.read()) == meta.get("sha256")
    except OSError as e:
        log(f"left {path}: {e.strerror}")
        return
    if not same:
        log(f"left {path}: changed since sro wrote it")
        return
    os.unlink(path)
    log(f"removed {path}")


def _apply(
    root: str,
    old: Manifest | None,
    new: Manifest,
    files: Mapping[str, File | None],
    log: Log,
    external: Mapping[str, File] | None = None,
) -> Manifest:
    """Write `files` (None: keep the file as the old manifest has it), remove what the old manifest
    lists and `files` does not, then write (or, with no recipes left, remove) the manifest.

    The external (live) hooks.d entries go first and come last: one that is no longer wanted is
    removed before anything else, a new one written only after the archive it names."""
    external = external or {}
    old_external = old.external if old is not None else {}
    for path in sorted(set(old_external) - set(external)):
        _remove_external(path, old_external[path], log)
    listed: dict[str, Mapping[str, str]] = {}
    for rel, f in files.items():
        if f is None:
            if old is not None and rel in old.files:
                listed[rel] = old.files[rel]
            continue
        path = os.path.join(root, rel)
        log(f"{'wrote' if write_atomic(path, f) else 'unchanged'} {path}")
        listed[rel] = {"sha256": _sha256(f.data), "mode": f"{f.mode:04o}"}
    external_listed: dict[str, Mapping[str, str]] = {}
    for path, f in sorted(external.items()):
        log(f"{'wrote' if write_atomic(path, f) else 'unchanged'} {path}")
        external_listed[path] = {"sha256": _sha256(f.data), "mode": f"{f.mode:04o}"}
    for rel in sorted(set(old.files) - set(listed) if old is not None else ()):
        _remove(root, rel, log)
    result = Manifest(new.settings, new.recipes, listed, new.notes, new.owners, external_listed)
    if new.recipes:
        write_atomic(os.path.join(root, MANIFEST), File(result.to_json().encode()))
    elif os.path.lexists(os.path.join(root, MANIFEST)):
        _remove(root, MANIFEST, log)
    return result


# -- the two commands -----------------------------------------------------------------------------


def install(
    root: str,
    recipes: Mapping[str, str | None],
    settings: Settings,
    host_root: str = "/",
    with_cdi: bool = True,
    log: Log = _quiet,
    owner: str = DEFAULT_OWNER,
) -> Manifest:
    """Install (or refresh) the runtime files for `recipes` (name -> driver root or None) in `root`,
    on behalf of `owner`.

    The recipes join those already installed there; `settings` replace the node's settings.
    """
    unknown = sorted(set(recipes) - set(BUILTIN))
    if unknown:
        raise InstallError(f"unknown recipe(s) {', '.join(unknown)} (known: {', '.join(sorted(BUILTIN))})")
    if not recipes:
        raise InstallError("no recipe to install")
    check_python(settings, host_root)
    if settings.crio_hooks_dir:
        check_live_hook_python(settings, host_root)
    if not os.path.isfile(on_host(host_root, settings.runc)):
        log(f"warning: no runc at {settings.runc} on this node: the launcher {LAUNCHER_NAME} cannot work")
    with _Locked(root):
        old = read_manifest(root)
        if old is not None and old.settings != settings:
            log(f"settings for every recipe in {root} change: {asdict(old.settings)} -> {asdict(settings)}")
        merged = {**(old.recipes if old is not None else {}), **recipes}
        owners = {n: tuple(o) for n, o in (old.owners if old is not None else {}).items() if n in merged}
        for name in recipes:
            owners[name] = tuple(sorted({*owners.get(name, ()), owner}))
        files: dict[str, File | None] = dict(shared_files(settings, merged))
        if host_root == "/":
            tag = _checked_archive(root, settings, files[bundling.ARCHIVE_NAME])
            if tag != bundling.CACHE_TAG:
                log(f"note: {settings.python} is {tag}; the bundled bytecode is {bundling.CACHE_TAG}")
        notes: list[str] = []
        for name, driver_root in sorted(merged.items()):
            if not with_cdi:
                continue
            made = cdi_file(settings, name, driver_root, host_root)
            if isinstance(made, str):
                notes.append(made)
                log(made)
            else:
                files[made[0]] = made[1]
        live = external_files(settings, files)
        return _apply(root, old, Manifest(settings, merged, {}, tuple(notes), owners), files, log, live)


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
    with _Locked(root):
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
        if left:
            files = dict(shared_files(old.settings, left))
            files[bundling.ARCHIVE_NAME] = None  # the same code keeps running: leave the archive be
            cdi_paths = {f"{CDI_DIR}/{cdi.spec_file_name(BUILTIN[n], 'json')}" for n in left if n in BUILTIN}
            files.update(dict.fromkeys(cdi_paths & set(old.files)))
        elif not purge:
            _leave_passthrough(root, old.settings.runc, log)
            old = replace(old, files={k: v for k, v in old.files.items() if k != LAUNCHER_NAME})
        notes = tuple(n for n in old.notes if n.split(":", 1)[0] in left)
        live = external_files(old.settings, files)
        return _apply(root, old, Manifest(old.settings, left, {}, notes, owners), files, log, live)
