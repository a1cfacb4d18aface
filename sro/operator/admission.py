"""Whether a SpecialResource can be deployed, and on which nodes: the spec parsed and checked,
its recipe resolved, the node selection, and which selected nodes an older SpecialResource holds
for the same extended resource (refused on those nodes only: two SpecialResources of one recipe
on disjoint node pools both deploy, as NVIDIA's NVIDIADriver does a driver version per pool).

Why before the fold: a spec that cannot work deploys nothing and says why in its status (Degraded,
with the field), so every refusal is decided here, from the records alone, before anything is
rendered; the fold then works only from the parsed spec and the recipe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sro.api.names import DRIVER, simulated_driver_opt_in_label
from sro.api.recipes import BUILTIN, Recipe, RecipeError, recipe_from_dict
from sro.api.specialresource import SpecError, SpecialResourceSpec
from sro.api.specparsing import check_driver, parse_spec, with_driver_mode
from sro.api.timestamps import now_utc
from sro.operator import partitioning
from sro.operator.observed import NodeInfo, Observed, SpecialResourceInfo
from sro.operator.plan import Plan
from sro.operator.rendering import Term
from sro.operator.status import REFUSED, build_status

RECIPE_KEY = "recipe.yaml"  # the key of spec.recipeConfigMap that holds the recipe


@dataclass(frozen=True)
class Admitted:
    spec: SpecialResourceSpec
    recipe: Recipe


@dataclass(frozen=True)
class Refusal:
    """Why nothing is deployed: the Degraded condition's reason and message."""

    reason: str
    message: str
    resource: str = ""  # the extended resource, once the recipe is known


def resolve_recipe(spec: SpecialResourceSpec, custom: Mapping[str, Any] | None) -> Recipe:
    if spec.recipe_config_map:
        if custom is None:
            raise SpecError(
                f"spec.recipeConfigMap: ConfigMap {spec.recipe_config_map!r} (key recipe.yaml) not found "
                "in the operator's namespace"
            )
        # the cluster side could not read recipe.yaml (not YAML, not a mapping): `{recipe.yaml: why}`
        unreadable = custom.get(RECIPE_KEY) if len(custom) == 1 else None
        if isinstance(unreadable, str):
            raise SpecError(f"spec.recipeConfigMap {spec.recipe_config_map!r}: {RECIPE_KEY}: {unreadable}")
        try:
            recipe = recipe_from_dict(custom)
        except RecipeError as e:
            raise SpecError(f"spec.recipeConfigMap {spec.recipe_config_map!r}: {e}") from e
        if recipe.name != spec.recipe:
            raise SpecError(
                f"spec.recipe: {spec.recipe!r} but the ConfigMap's recipe is named {recipe.name!r}"
            )
        return recipe
    if spec.recipe not in BUILTIN:
        raise SpecError(
            f"spec.recipe: unknown recipe {spec.recipe!r}; built-in: {', '.join(sorted(BUILTIN))} "
            "(or name a custom one with spec.recipeConfigMap)"
        )
    return BUILTIN[spec.recipe]


@dataclass(frozen=True)
class Claim:
    """Another SpecialResource's hold: its extended resource on the nodes it selects."""

    sr: str
    created: str
    resource: str
    nodes: frozenset[str]
    # every resource it announces (its recipe's pools too); empty: `resource` alone
    resources: frozenset[str] = frozenset()

    def takes(self, resources: frozenset[str]) -> bool:
        return bool((self.resources or {self.resource}) & resources)


def _raw_selector(spec: Mapping[str, Any]) -> dict[str, str] | None:
    selector = spec.get("nodeSelector")
    if not isinstance(selector, Mapping) or not selector:
        return None
    return (
        dict(selector)
        if all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items())
        else None
    )


def claim_of(
    other: SpecialResourceInfo, recipes: Mapping[str, Mapping[str, Any] | None], nodes: Sequence[NodeInfo]
) -> Claim | None:
    """What `other` holds, read from its spec without parsing all of it: a claim counts even while
    the rest of its spec does not parse (what it deployed before stays). A custom recipe is the one
    its ConfigMap holds (`recipes`, by ConfigMap name) — a custom recipe announcing `nvidia.com/gpu`
    claims what the built-in `nvidia-gpu` does; where that ConfigMap cannot be read, its last status
    says what it held (resource and node rows)."""
    config_map = other.spec.get("recipeConfigMap")
    recipe: Recipe | None = None
    if config_map:
        found = recipes.get(str(config_map))
        if found is not None:
            try:
                recipe = recipe_from_dict(found)
            except RecipeError:
                recipe = None
    else:
        recipe = BUILTIN.get(other.recipe)
    resource = recipe.resource if recipe else str(other.status.get("resource") or "")
    if not resource:
        return None
    selector = _raw_selector(other.spec)
    driver = other.spec.get("driver")
    mode = driver.get("mode") if isinstance(driver, Mapping) else None
    terms = (selector,) if selector else default_terms(recipe, str(mode or "container")) if recipe else None
    if terms is None:
        rows = other.status.get("nodes") or ()
        held = frozenset(
            str(r["name"])
            for r in rows
            if isinstance(r, Mapping) and r.get("name") and r.get("state") != REFUSED
        )
    else:
        held = frozenset(n.name for n in nodes if matches(n, terms))
    announced = frozenset(recipe.announced_resources) if recipe else frozenset({resource})
    return Claim(other.name, other.created, resource, held, announced)


def contested(
    sr: SpecialResourceInfo,
    resource: str,
    selected: Sequence[NodeInfo],
    claims: Sequence[Claim],
    announced: Sequence[str] = (),
) -> dict[str, str]:
    """The selected nodes an older SpecialResource (by creationTimestamp, then name) holds for the
    same extended resource (any of `announced`, a recipe's pools included), each with the oldest
    such holder's name: only one device plugin may announce a resource on a node, and each node goes
    to the oldest SpecialResource selecting it."""
    mine = frozenset({resource, *announced})
    older = sorted(
        (c for c in claims if c.takes(mine) and (c.created, c.sr) < (sr.created, sr.name)),
        key=lambda c: (c.created, c.sr),
    )
    out: dict[str, str] = {}
    for node in selected:
        holder = next((c.sr for c in older if node.name in c.nodes), None)
        if holder is not None:
            out[node.name] = holder
    return out


def conflict_message(holder: str, resource: str) -> str:
    return f"SpecialResource {holder!r} already manages {resource} on this node (the older one keeps it)"


def admit(obs: Observed, namespace: str) -> Admitted | Refusal:
    """The parsed spec and its recipe, or why the SpecialResource cannot be deployed."""
    sr = obs.sr
    try:
        spec = parse_spec(sr.name, sr.spec)
        recipe = resolve_recipe(spec, obs.custom_recipe)
        check_driver(spec, recipe.simulated)
        spec, recipe = with_driver_mode(spec, recipe)
        partitioning.check(spec, recipe)
    except SpecError as e:
        return Refusal("SpecInvalid", str(e))
    if custom_simulated_without_devices(spec, recipe):
        return Refusal(
            "SpecInvalid",
            f"spec.driver.devicesConfig: required for the simulated recipe {recipe.name!r}: the devices "
            "sro's simulated driver makes (a device class config: driverVersion, class, count, defaults, "
            "libraries, binaries)",
            recipe.resource,
        )
    if spec.custom_manifests and obs.custom_manifests is None:
        return Refusal(
            "CustomManifestsMissing",
            f"spec.customManifests: ConfigMap {spec.custom_manifests!r} not found in namespace {namespace}",
            recipe.resource,
        )
    return Admitted(spec, recipe)


def custom_simulated_without_devices(spec: SpecialResourceSpec, recipe: Recipe) -> bool:
    """A custom simulated recipe's driver has no default devices (the built-in's are GPUs)."""
    driver = spec.state(DRIVER).enabled and spec.driver.mode != "host"
    return bool(spec.recipe_config_map) and recipe.simulated and driver and not spec.driver.devices_config


RESERVED_PREFIX = "sro-"  # names of objects sro makes: its install, every state, quotas, pods


def custom_conflict(
    objects: Sequence[Mapping[str, Any]],
    builtin: Sequence[Mapping[str, Any]],
    shaping: Sequence[Mapping[str, Any]],
) -> Refusal | None:
    """Why the custom manifests may not be applied, if they take an object sro makes itself: the
    name of another of this SpecialResource's objects (rendered twice), or — for an object only they
    add — a name with sro's prefix (another SpecialResource's, the operator's, a quota's) or one of
    the partitioning objects. Applied, such an object would be adopted and then deleted with this
    SpecialResource. `objects` are the rendered objects with the custom manifests, `builtin`
    without them."""

    def key(o: Mapping[str, Any]) -> tuple[str, str]:
        return (str(o["kind"]), str(o["metadata"]["name"]))

    def named(o: Mapping[str, Any]) -> str:
        ns = o["metadata"].get("namespace")
        return f"{o['kind']} {ns + '/' if ns else ''}{o['metadata']['name']}"

    seen: set[tuple[str, str]] = set()
    for o in objects:
        if key(o) in seen:
            return Refusal(
                "CustomManifestConflict",
                f"spec.customManifests: {named(o)} is rendered twice: a custom manifest may not take the "
                "name of an object sro renders (replace that file instead, same file name)",
            )
        seen.add(key(o))
    own = {key(o) for o in builtin}
    taken = {key(o) for o in shaping}
    for o in objects:
        if key(o) in own:
            continue
        if key(o) in taken or str(o["metadata"]["name"]).startswith(RESERVED_PREFIX):
            return Refusal(
                "CustomManifestConflict",
                f"spec.customManifests: {named(o)} takes the name of an object sro makes (the prefix "
                f"{RESERVED_PREFIX!r} and the partitioning objects are sro's); name it otherwise",
            )
    return None


def refused(obs: Observed, refusal: Refusal) -> Plan:
    """The plan of a SpecialResource that cannot be deployed: only its status, looked at again later."""
    return refusal_plan(obs.sr, refusal)


def refusal_plan(sr: SpecialResourceInfo, refusal: Refusal) -> Plan:
    """`refused` from the SpecialResource alone: also for a pass that failed before or while observing."""
    status = build_status(
        sr, [], {}, {}, refusal.resource, now_utc(), problem=(refusal.reason, refusal.message)
    )
    return Plan(status=status, deployable=False, requeue=60.0)


def matches(node: NodeInfo, terms: Sequence[Term]) -> bool:
    return any(
        all((k in node.labels) if not v else node.labels.get(k) == v for k, v in term.items())
        for term in terms
    )


def default_terms(recipe: Recipe, driver_mode: str) -> tuple[Term, ...]:
    """The nodes a recipe selects with no spec.nodeSelector: its hardware's PCI labels, or on sro's
    simulated driver standing in for real hardware (`driver.mode: simulated`), the nodes that opt
    in with `sro.dev/<recipe>.simulated=true` (they have no such PCI device). A custom recipe's real
    hardware carries its NodeFeatureRule's label (`recipedistribution.node_feature_rule`)."""
    if driver_mode == "simulated" and not recipe.simulated:
        return ({simulated_driver_opt_in_label(recipe.name): "true"},)
    return recipe.default_node_selector_terms()


def selection_terms(spec: SpecialResourceSpec, recipe: Recipe) -> tuple[Term, ...]:
    return (dict(spec.node_selector),) if spec.node_selector else default_terms(recipe, spec.driver.mode)
