"""The device plugin's configuration file (pure parsing; errors name the field).

Why a file and not only flags: sharing (time-slicing replicas per device), MIG strategy and health
policy differ per node pool, and the operator hands each pool its own file (a ConfigMap), the way
NVIDIA's plugin does. The shape follows NVIDIA's config v1 where it has one, so people who know it
recognise it; per-device replicas and health recovery are our additions:

    version: v1
    resourceName: sro.dev/simulated-gpu      # default: the recipe's
    flags:
      migStrategy: none                      # none | single | mixed
      deviceListStrategy: [envvar, device-specs]   # + mounts, cdi-annotations, cdi-cri; device-specs always
      deviceIdStrategy: uuid                 # uuid | index
      cdiAnnotationPrefix: cdi.k8s.io/
    health:
      enabled: true
      ignoredXids: [13, 31, 43, 45, 68, 109]
      recoverAfterSeconds: 60                # quiet period after a fault clears; null = never
    sharing:
      timeSlicing:
        renameByDefault: false
        failRequestsGreaterThanOne: false
        resources:
          - {name: sro.dev/simulated-gpu, replicas: 4, devices: [0, 1]}
          - {name: sro.dev/simulated-gpu, replicas: 2, devices: [2], rename: sro.dev/simulated-gpu.small}

`device-specs` is always on, whatever the list says: the device nodes the kubelet writes into the
container's OCI spec from it are the one channel the runtime hook believes for an unprivileged
container (a pod spec cannot forge them); the env var and the annotations the other strategies set
are honoured only for privileged containers (README, "Security model").

With no `deviceListStrategy` in the file, the default depends on the node's container runtime:
`cdi-annotations` and `envvar` where it reads CDI specs (the runtime then gives the devices,
libraries and binaries of the live spec the runtime state writes: no hook, no runtime class; the
variable names the devices to the container), `envvar` for the hook elsewhere; device-specs in both. Which nodes read CDI, the operator says in `runtimes.yaml`
next to the config (`cdi: [node, ...]`, from each Node's containerRuntimeVersion): one DaemonSet
serves every node, and each plugin finds its own node there by name (the downward API's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sro.api.recipes import Recipe
from sro.devices.health import DEFAULT_RECOVER_AFTER, parse_policy
from sro.devices.model import DEFAULT_IGNORED_XIDS

MigStrategy = Literal["none", "single", "mixed"]
IdStrategy = Literal["uuid", "index"]
LIST_STRATEGIES = ("envvar", "device-specs", "mounts", "cdi-annotations", "cdi-cri")
TRUSTED_STRATEGY = "device-specs"  # the allocation the hook believes: see the module docstring
HOOK_STRATEGIES = ("envvar", TRUSTED_STRATEGY)  # the default where the runtime reads no CDI
# the default where it does: the env var too, naming the devices to the container (the live CDI
# spec leaves it alone), as NVIDIA's tools and sro's workload validation read it
CDI_STRATEGIES = ("envvar", "cdi-annotations", TRUSTED_STRATEGY)
RUNTIMES_FILE = "runtimes.yaml"  # beside the config: which nodes' runtimes read CDI
MAX_REPLICAS = 256


class ConfigError(ValueError):
    """The plugin configuration is malformed; the message names the field to fix."""


@dataclass(frozen=True)
class TimeSlice:
    """`replicas` announced ids per device for the devices it selects (None: every device)."""

    resource: str
    replicas: int
    devices: tuple[str, ...] | None = None  # index, UUID or PCI bus id
    rename: str | None = None


@dataclass(frozen=True)
class PluginConfig:
    resource_name: str
    mig_strategy: MigStrategy = "none"
    list_strategies: tuple[str, ...] = ("envvar", TRUSTED_STRATEGY)
    id_strategy: IdStrategy = "uuid"
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    health_enabled: bool = True
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    recover_after: float | None = DEFAULT_RECOVER_AFTER
    time_slicing: tuple[TimeSlice, ...] = ()
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    # the recipe's resource pools: resource -> device attribute selector (announcing.pool_of)
    pools: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def default_config(recipe: Recipe, cdi_runtime: bool = False) -> PluginConfig:
    """Defaults for every recipe, built-in or custom: the env var and the device nodes (the channel
    the runtime hook believes; a plain runc gives containers the devices from it too), or, where
    the node's runtime reads CDI, the CDI names and the device nodes."""
    strategies = CDI_STRATEGIES if cdi_runtime else HOOK_STRATEGIES
    return PluginConfig(
        resource_name=recipe.resource,
        list_strategies=strategies,
        pools={r: dict(sel) for r, sel in recipe.pools.items()},
    )


def parse_runtimes(doc: Any) -> frozenset[str]:
    """The node names of `runtimes.yaml` whose container runtime reads CDI specs."""
    if doc is None:
        return frozenset()
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{RUNTIMES_FILE}: expected a mapping, got {type(doc).__name__}")
    _check_known(doc, {"cdi"}, RUNTIMES_FILE)
    nodes = doc.get("cdi") or []
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise ConfigError(f"{RUNTIMES_FILE}: cdi: expected a list of node names, got {nodes!r}")
    return frozenset(nodes)


def _mapping(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}{key}: expected a mapping, got {type(value).__name__}")
    return value


def _bool(doc: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = doc.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}{key}: expected true or false, got {value!r}")
    return value


def _resource(value: Any, where: str) -> str:
    if not isinstance(value, str) or value.count("/") != 1 or not all(value.split("/")):
        raise ConfigError(f"{where}: expected a resource name like 'vendor.example.com/gpu', got {value!r}")
    return value


def _check_known(doc: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ConfigError(f"{where or 'top level'}: unknown field(s) {unknown}; known: {sorted(known)}")


def parse_config(doc: Any, recipe: Recipe, cdi_runtime: bool = False) -> PluginConfig:
    """A parsed YAML document (None for an empty file) -> PluginConfig over the recipe defaults
    (for a node whose runtime reads CDI, `cdi_runtime`)."""
    base = default_config(recipe, cdi_runtime)
    if doc is None:
        return base
    if not isinstance(doc, Mapping):
        raise ConfigError(f"top level: expected a mapping, got {type(doc).__name__}")
    _check_known(doc, {"version", "resourceName", "flags", "health", "sharing"}, "")
    if doc.get("version", "v1") != "v1":
        raise ConfigError(f"version: only 'v1' is supported, got {doc.get('version')!r}")
    resource = _resource(doc.get("resourceName", base.resource_name), "resourceName")

    flags = _mapping(doc, "flags", "")
    _check_known(
        flags, {"migStrategy", "deviceListStrategy", "deviceIdStrategy", "cdiAnnotationPrefix"}, "flags"
    )
    mig = flags.get("migStrategy", "none")
    if mig not in ("none", "single", "mixed"):
        raise ConfigError(f"flags.migStrategy: expected none, single or mixed, got {mig!r}")
    strategies = flags.get("deviceListStrategy", list(base.list_strategies))
    if isinstance(strategies, str):
        strategies = [strategies]
    if (
        not isinstance(strategies, list)
        or not strategies
        or any(s not in LIST_STRATEGIES for s in strategies)
    ):
        raise ConfigError(
            f"flags.deviceListStrategy: expected a non-empty list of {LIST_STRATEGIES}, got {strategies!r}"
        )
    id_strategy = flags.get("deviceIdStrategy", "uuid")
    if id_strategy not in ("uuid", "index"):
        raise ConfigError(f"flags.deviceIdStrategy: expected uuid or index, got {id_strategy!r}")
    prefix = flags.get("cdiAnnotationPrefix", base.cdi_annotation_prefix)
    if not isinstance(prefix, str) or not prefix.endswith("/"):
        raise ConfigError(f"flags.cdiAnnotationPrefix: expected a prefix ending in '/', got {prefix!r}")

    try:
        policy = parse_policy(_mapping(doc, "health", ""))  # the rules and policy the exporter shares
    except ValueError as e:
        raise ConfigError(str(e)) from e

    sharing = _mapping(doc, "sharing", "")
    _check_known(sharing, {"timeSlicing"}, "sharing")
    ts = _mapping(sharing, "timeSlicing", "sharing.")
    _check_known(ts, {"renameByDefault", "failRequestsGreaterThanOne", "resources"}, "sharing.timeSlicing")
    slices = []
    entries = ts.get("resources", [])
    if not isinstance(entries, list):
        raise ConfigError("sharing.timeSlicing.resources: expected a list")
    for i, entry in enumerate(entries):
        where = f"sharing.timeSlicing.resources[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: expected a mapping with name and replicas")
        _check_known(entry, {"name", "replicas", "devices", "rename"}, where)
        replicas = entry.get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
            raise ConfigError(
                f"{where}.replicas: expected an integer in [1, {MAX_REPLICAS}], got {replicas!r}"
            )
        devices = entry.get("devices", "all")
        if devices == "all":
            selected = None
        elif (
            isinstance(devices, list)
            and devices
            and all(isinstance(d, str | int) and not isinstance(d, bool) for d in devices)
        ):
            selected = tuple(str(d) for d in devices)
        else:
            raise ConfigError(f"{where}.devices: expected 'all' or a list of indices/UUIDs, got {devices!r}")
        rename = entry.get("rename")
        slices.append(
            TimeSlice(
                resource=_resource(entry.get("name"), f"{where}.name"),
                replicas=replicas,
                devices=selected,
                rename=None if rename is None else _resource(rename, f"{where}.rename"),
            )
        )
    return replace(
        base,
        resource_name=resource,
        mig_strategy=mig,
        list_strategies=tuple(dict.fromkeys([*strategies, TRUSTED_STRATEGY])),
        id_strategy=id_strategy,
        cdi_annotation_prefix=prefix,
        health_enabled=policy.enabled,
        ignored_xids=policy.ignored_xids,
        recover_after=policy.recover_after,
        time_slicing=tuple(slices),
        rename_by_default=_bool(ts, "renameByDefault", "sharing.timeSlicing.", False),
        fail_requests_greater_than_one=_bool(ts, "failRequestsGreaterThanOne", "sharing.timeSlicing.", False),
    )
