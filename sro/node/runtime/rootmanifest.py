"""What the runtime installer records in its root: the node's settings and `manifest.json`.

Why its own module: the manifest is what install and uninstall agree on (which recipes, whose
claims, which files with which hashes), and the settings are node-wide (one set per root, whoever
installs last sets them); both are plain data with their JSON form, apart from the writing
(`rootwrites`) and from what is installed (`hostinstall`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

from sro import __version__
from sro.node.runtime import bundling
from sro.node.runtime.hook import DEFAULT_MANAGEMENT_NAMESPACES
from sro.node.runtime.wrapper import RUNC

DEFAULT_PYTHON = "/usr/bin/python3"
HOOKS_D_NAME = "sro-hook.json"
HOOKS_D_FILE = f"hooks.d/{HOOKS_D_NAME}"
MANIFEST = "manifest.json"
MANIFEST_KIND = "sro.dev/runtime-files"
RECIPES_DIR = "recipes"  # a custom recipe's canonical JSON: recipes/<name>.json (installedrecipes)
MODES = ("hook", "cdi")
STAGES = ("prestart", "createContainer")

Log = Callable[[str], None]


def recipe_file(name: str) -> str:
    """Where a custom recipe `name` is in the root, relative to it."""
    return f"{RECIPES_DIR}/{name}.json"


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
    # Unsafe when true: an unprivileged container then gets whatever devices its own env or
    # annotations name, not only what the device plugin allocated to it (NVIDIA's
    # accept-nvidia-visible-devices-envvar-when-unprivileged). Off by default.
    accept_envvar_unprivileged: bool = False
    # comma-separated: where SRO_MANAGEMENT_DEVICES is honoured (the operator's namespace)
    management_namespaces: str = ",".join(DEFAULT_MANAGEMENT_NAMESPACES)
    # where the container runtime reads CDI specs (containerd >= 1.7, CRI-O: /var/run/cdi): each
    # recipe's live spec goes there, "" for none; with `cdi_ldcache` it runs the ldcache hook
    cdi_dir: str = ""
    cdi_ldcache: bool = False

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
        if self.cdi_dir and (
            not os.path.isabs(self.cdi_dir) or os.path.normpath(self.cdi_dir) != self.cdi_dir
        ):
            raise InstallError(f"--cdi-dir must be a normalised absolute path, got {self.cdi_dir!r}")
        if not isinstance(self.cdi_ldcache, bool):
            raise InstallError(f"cdiLdcache must be true or false, got {self.cdi_ldcache!r}")
        if self.mode not in MODES:
            raise InstallError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.stage not in STAGES:
            raise InstallError(f"--stage must be one of {', '.join(STAGES)}, got {self.stage!r}")
        if not isinstance(self.accept_envvar_unprivileged, bool):
            raise InstallError(
                f"acceptEnvvarUnprivileged must be true or false, got {self.accept_envvar_unprivileged!r}"
            )
        for ns in self.namespaces:
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", ns):
                raise InstallError(f"--management-namespace must be namespace names, got {ns!r}")

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.management_namespaces.split(",") if n.strip())

    @property
    def trust_options(self) -> list[str]:
        """The hook options that carry these settings to every hook and wrapper invocation."""
        opts = ["--accept-envvar-unprivileged", "true"] if self.accept_envvar_unprivileged else []
        if self.namespaces == DEFAULT_MANAGEMENT_NAMESPACES:
            return opts  # the hook's own default: the entries stay as they were
        for ns in self.namespaces or ("-",):  # "-" names no namespace: management off
            opts += ["--management-namespace", ns]
        return opts

    @property
    def archive(self) -> str:
        """Host path of the zipapp: what every bootstrap puts on sys.path."""
        return os.path.join(self.host_dir, bundling.ARCHIVE_NAME)


_CAMEL = {"host_dir": "hostDir", "python": "python", "runc": "runc", "mode": "mode"}
_CAMEL |= {"dev_root": "devRoot", "stage": "stage", "crio_hooks_dir": "crioHooksDir"}
_CAMEL |= {
    "accept_envvar_unprivileged": "acceptEnvvarUnprivileged",
    "management_namespaces": "managementNamespaces",
    "cdi_dir": "cdiDir",
    "cdi_ldcache": "cdiLdcache",
}
_SNAKE = {v: k for k, v in _CAMEL.items()}


@dataclass(frozen=True)
class Manifest:
    """What manifest.json says: the settings, the recipes (name -> driver root or None) with their
    owners, and the files (relative path -> {"sha256", "mode"}); a custom recipe's own file
    (`recipe_file(name)`) is among the files, and its entry names it (recipeFile)."""

    settings: Settings
    recipes: Mapping[str, str | None] = field(default_factory=dict)
    files: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # e.g. why a recipe has no CDI spec
    owners: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # recipe -> who installed it
    external: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # absolute path -> meta
    repaired: tuple[str, ...] = ()  # what this install found broken and rewrote (never stored)

    def to_json(self) -> str:
        doc = {
            "kind": MANIFEST_KIND,
            "version": 1,
            "installedBy": f"sro {__version__}",
            "settings": {_CAMEL[k]: v for k, v in asdict(self.settings).items()},
            "recipes": {
                name: {"driverRoot": root, "owners": sorted(self.owners.get(name, ()))}
                | ({"recipeFile": recipe_file(name)} if recipe_file(name) in self.files else {})
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
        raw = {_SNAKE[k]: v for k, v in doc["settings"].items() if k in _SNAKE}
        accept = raw.pop("accept_envvar_unprivileged", False) is True  # only a JSON true is true
        ldcache = raw.pop("cdi_ldcache", False) is True
        settings = Settings(
            **{k: str(v) for k, v in raw.items()}, accept_envvar_unprivileged=accept, cdi_ldcache=ldcache
        )
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


# a live CDI spec's file name: <vendor>-<class>.yaml (sro.node.runtime.cdi.spec_file_name)
CDI_SPEC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*-[A-Za-z0-9][A-Za-z0-9._-]*\.yaml")


def _check_external(path: str) -> str:
    """An external file must be a hooks.d entry or a live CDI spec of ours: the manifest never
    names any other file."""
    name = os.path.basename(path)
    if (
        not os.path.isabs(path)
        or os.path.normpath(path) != path
        or (name != HOOKS_D_NAME and not CDI_SPEC_NAME.fullmatch(name))
    ):
        raise ValueError(
            f"manifest lists the external file {path!r}: not a {HOOKS_D_NAME} or a CDI spec "
            "at an absolute path"
        )
    return path
