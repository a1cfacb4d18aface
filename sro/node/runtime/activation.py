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

Who is believed (`decide`, issue 21 §1): what a container's own spec says (env, annotations) is
honoured only for a privileged container (CAP_SYS_ADMIN in its bounding set, as NVIDIA's toolkit
judges it) or where the node's settings say `acceptEnvvarUnprivileged`. Any other container gets
exactly the devices the device plugin allocated to it: the device nodes the kubelet itself wrote into
its OCI spec's `linux.devices` (from Allocate's DeviceSpecs; a pod cannot add one there unless it is
privileged). Its own `void`/`none` still take away. A management request (`SRO_MANAGEMENT_DEVICES`,
same values) is honoured only in a management namespace (containerd's own sandbox-namespace
annotation; a pod's annotations never reach the spec under containerd's sro handler).
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing/dataclasses import at run time: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from dataclasses import dataclass, field

    from sro.node.runtime.hookrecipes import AnyRecipe as Recipe
else:
    from sro.node.runtime.records import dataclass, field

ALL = "all"
NONE = "none"
VOID = "void"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
ANNOTATION_PREFIX = "sro.dev/"
MANAGEMENT_ENV = "SRO_MANAGEMENT_DEVICES"
# set by containerd's CRI plugin on every container from the sandbox's metadata, after any
# passthrough annotation, so a pod cannot choose it
SANDBOX_NAMESPACE = "io.kubernetes.cri.sandbox-namespace"
DEFAULT_MANAGEMENT_NAMESPACES = ("sro-system",)
ALLOCATED = "device plugin allocation (linux.devices)"


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


@dataclass(frozen=True)
class Access:
    """What a container may be given beyond nothing (see the module docstring).

    `own`: its own env and annotations are honoured (privileged, or acceptEnvvarUnprivileged);
    `management`: SRO_MANAGEMENT_DEVICES is honoured (its sandbox is in a management namespace);
    `allocated`: recipe name -> the device ids whose nodes the kubelet put in its `linux.devices`.
    """

    own: bool = False
    management: bool = False
    allocated: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _takes_away(recipe: Recipe, env: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    """VOID or NONE if the container's own env or annotation says so (they only take away)."""
    values = _split(env.get(recipe.visible_devices_env, ""))
    values += _split(annotations.get(ANNOTATION_PREFIX + recipe.name, ""))
    lowered = {v.lower() for v in values}
    if VOID in lowered:
        return VOID
    return NONE if NONE in lowered else None


def decide(
    recipe: Recipe, env: Mapping[str, str], annotations: Mapping[str, str], access: Access
) -> Request | None:
    """What the container gets of `recipe`: its own request only where `access.own`, else its allocation."""
    if access.own:
        own = request_for(recipe, env, annotations)
        if own is not None:
            return own
    if access.management and env.get(MANAGEMENT_ENV, "").strip():
        where = f"env {MANAGEMENT_ENV}"
        ids = _ids(recipe, _split(env[MANAGEMENT_ENV]), where)
        if ids is None:
            return None
        return Request(recipe=recipe, devices=ids, capabilities=capabilities(recipe, env), source=where)
    allocated = access.allocated.get(recipe.name, ())
    if not allocated:
        return None
    less = _takes_away(recipe, env, annotations)
    if less == VOID:
        return None
    devices = () if less == NONE else tuple(allocated)
    return Request(recipe=recipe, devices=devices, capabilities=capabilities(recipe, env), source=ALLOCATED)


def privileged(spec: Mapping[str, object]) -> bool:
    """CAP_SYS_ADMIN in the OCI spec's bounding set: NVIDIA's toolkit's test of a privileged container."""
    process = spec.get("process")
    caps = process.get("capabilities") if isinstance(process, dict) else None
    bounding = caps.get("bounding") if isinstance(caps, dict) else None
    return isinstance(bounding, list) and "CAP_SYS_ADMIN" in bounding


def device_numbers(spec: Mapping[str, object]) -> frozenset[tuple[int, int]]:
    """(major, minor) of every character device the runtime is told to create (`linux.devices`)."""
    linux = spec.get("linux")
    devices = linux.get("devices") if isinstance(linux, dict) else None
    out: set[tuple[int, int]] = set()
    for d in devices if isinstance(devices, list) else ():
        if isinstance(d, dict) and d.get("type") in ("c", "u"):
            major, minor = d.get("major"), d.get("minor")
            if isinstance(major, int) and isinstance(minor, int):
                out.add((major, minor))
    return frozenset(out)


def sandbox_namespace(annotations: Mapping[str, str]) -> str | None:
    return annotations.get(SANDBOX_NAMESPACE) or None


def requests_for(
    recipes: Iterable[Recipe],
    env_list: Iterable[str],
    annotations: Mapping[str, str],
    access: Access | None = None,
) -> tuple[Request, ...]:
    """Every recipe's request from an OCI spec's `process.env` and `annotations`, as `access` allows.

    Without `access` nothing but an allocation is honoured, and there is none: the secure default.
    """
    env = env_map(env_list)
    access = access if access is not None else Access()
    out = []
    for recipe in recipes:
        req = decide(recipe, env, annotations, access)
        if req is not None:
            out.append(req)
    return tuple(out)
