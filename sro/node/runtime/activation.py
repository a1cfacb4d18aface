"""What a container asks for: which devices of which recipe, and which capability groups.

Why pure: the hook, the runc wrapper and the tests must agree exactly on what `SRO_VISIBLE_DEVICES=all`,
`void`, `none`, a list of ids, an annotation or a CDI name means. This module reads only the OCI
spec's env list and annotations (plain data) and returns frozen records; no file is touched.

Semantics (NVIDIA container toolkit's, for every recipe's env var):
  unset or ""  -> nothing requested (unless an annotation or CDI name asks)
  void         -> nothing injected at all
  none         -> no device nodes, but the driver's control nodes, libraries and binaries
  all          -> every device
  0,1 | ids    -> those devices; an entry "kind=name" is a CDI name of the recipe's kind
Annotations: `sro.dev/<recipe-name>: <same value>` and CDI's `cdi.k8s.io/<any>: kind=name,kind=name`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing/dataclasses import at run time: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from dataclasses import dataclass

    from sro.node.runtime.hookrecipes import AnyRecipe as Recipe
else:
    from sro.node.runtime.records import dataclass

ALL = "all"
NONE = "none"
VOID = "void"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
ANNOTATION_PREFIX = "sro.dev/"


class ActivationError(ValueError):
    """The container's request is malformed; the message names the variable or annotation."""


@dataclass(frozen=True)
class Request:
    """One recipe's request: `devices` is ("all",) for every device, () for control files only."""

    recipe: Recipe
    devices: tuple[str, ...]
    capabilities: tuple[str, ...]
    source: str  # where the request came from, for error messages ("env SRO_VISIBLE_DEVICES", ...)

    @property
    def all_devices(self) -> bool:
        return self.devices == (ALL,)


def env_map(env: Iterable[str]) -> dict[str, str]:
    """An OCI `process.env` list as a dict (the last definition wins, as in execve)."""
    out: dict[str, str] = {}
    for item in env:
        if not isinstance(item, str):
            raise ActivationError(f"process.env: entries must be strings, got {item!r}")
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _ids(recipe: Recipe, items: Sequence[str], where: str) -> tuple[str, ...] | None:
    """Device ids from a visible-devices value; None means void (inject nothing)."""
    lowered = [i.lower() for i in items]
    if not items:
        return None
    if VOID in lowered:
        return None
    if ALL in lowered:
        return (ALL,)
    if NONE in lowered:
        return ()
    out: list[str] = []
    for item in items:
        kind, sep, name = item.partition("=")
        if sep:
            if kind != recipe.cdi_kind:
                raise ActivationError(f"{where}: CDI name {item!r} is not of kind {recipe.cdi_kind!r}")
            if not name:
                raise ActivationError(f"{where}: CDI name {item!r} has an empty device name")
            out.append(name)
        else:
            out.append(item)
    if any(i == ALL for i in out):
        return (ALL,)
    return tuple(dict.fromkeys(out))


def _cdi_names(recipe: Recipe, annotations: Mapping[str, str]) -> list[str]:
    names: list[str] = []
    for key, value in sorted(annotations.items()):
        if not key.startswith(CDI_ANNOTATION_PREFIX):
            continue
        for item in _split(value):
            kind, sep, name = item.partition("=")
            if not sep or not name or "/" not in kind:
                raise ActivationError(f"annotation {key}: {item!r} is not a CDI name (vendor.com/class=name)")
            if kind == recipe.cdi_kind:
                names.append(name)
    return names


def capabilities(recipe: Recipe, env: Mapping[str, str]) -> tuple[str, ...]:
    """Library groups to inject: the capabilities env var, `all`, or the recipe's defaults.

    Unknown names are ignored (as NVIDIA's toolkit does), so one image can ask for "compute,graphics"
    on hardware without graphics libraries.
    """
    known = set(recipe.libraries) | set(recipe.binaries) | set(recipe.directories)
    raw = env.get(recipe.capabilities_env, "") if recipe.capabilities_env else ""
    wanted = _split(raw)
    if not wanted:
        wanted = list(recipe.default_capabilities)
    if ALL in wanted:
        return tuple(sorted(known))
    return tuple(c for c in dict.fromkeys(wanted) if c in known)


def request_for(recipe: Recipe, env: Mapping[str, str], annotations: Mapping[str, str]) -> Request | None:
    """The recipe's request from a container's env and annotations; None if it asks for nothing."""
    merged: list[str] = []
    sources: list[str] = []
    var = recipe.visible_devices_env
    if var in env and env[var].strip():
        merged += _split(env[var])
        sources.append(f"env {var}")
    key = ANNOTATION_PREFIX + recipe.name
    if annotations.get(key, "").strip():
        merged += _split(annotations[key])
        sources.append(f"annotation {key}")
    cdi = _cdi_names(recipe, annotations)
    if cdi:
        merged += [f"{recipe.cdi_kind}={n}" for n in cdi]
        sources.append("CDI annotations")
    if not merged:
        return None
    where = " + ".join(sources)
    ids = _ids(recipe, merged, where)
    if ids is None:
        return None
    return Request(recipe=recipe, devices=ids, capabilities=capabilities(recipe, env), source=where)


def requests_for(
    recipes: Iterable[Recipe], env_list: Iterable[str], annotations: Mapping[str, str]
) -> tuple[Request, ...]:
    """Every recipe's request from an OCI spec's `process.env` and `annotations`."""
    env = env_map(env_list)
    out = []
    for recipe in recipes:
        req = request_for(recipe, env, annotations)
        if req is not None:
            out.append(req)
    return tuple(out)
