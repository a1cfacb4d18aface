"""Whether a SpecialResource can be deployed, and on which nodes: the spec parsed and checked,
its recipe resolved, the older SpecialResource claiming the same resource, the node selection.

Why before the fold: a spec that cannot work deploys nothing and says why in its status (Degraded,
with the field), so every refusal is decided here, from the records alone, before anything is
rendered; the fold then works only from the parsed spec and the recipe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sro.api.recipes import BUILTIN, Recipe, RecipeError, recipe_from_dict
from sro.api.specialresource import SpecError, SpecialResourceSpec
from sro.api.specparsing import check_driver, parse_spec
from sro.api.timestamps import now_utc
from sro.operator import partitioning
from sro.operator.observed import NodeInfo, Observed, SpecialResourceInfo
from sro.operator.plan import Plan
from sro.operator.rendering import Term
from sro.operator.status import build_status


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


def conflict(sr: SpecialResourceInfo, recipe: Recipe, others: Sequence[SpecialResourceInfo]) -> str | None:
    """The older SpecialResource claiming the same extended resource, if any: it wins."""
    for other in others:
        name = other.recipe
        other_resource = BUILTIN[name].resource if name in BUILTIN else name
        mine = recipe.resource if recipe.name in BUILTIN else recipe.name
        if other_resource == mine and (other.created, other.name) < (sr.created, sr.name):
            return other.name
    return None


def admit(obs: Observed, namespace: str) -> Admitted | Refusal:
    """The parsed spec and its recipe, or why the SpecialResource cannot be deployed."""
    sr = obs.sr
    try:
        spec = parse_spec(sr.name, sr.spec)
        recipe = resolve_recipe(spec, obs.custom_recipe)
        check_driver(spec, recipe.simulated)
        partitioning.check(spec, recipe)
    except SpecError as e:
        return Refusal("SpecInvalid", str(e))
    winner = conflict(sr, recipe, obs.others)
    if winner:
        return Refusal(
            "ResourceConflict",
            f"SpecialResource {winner!r} already manages {recipe.resource}; delete one of them",
            recipe.resource,
        )
    if spec.custom_manifests and obs.custom_manifests is None:
        return Refusal(
            "CustomManifestsMissing",
            f"spec.customManifests: ConfigMap {spec.custom_manifests!r} not found in namespace {namespace}",
            recipe.resource,
        )
    return Admitted(spec, recipe)


def refused(obs: Observed, refusal: Refusal) -> Plan:
    """The plan of a SpecialResource that cannot be deployed: only its status, looked at again later."""
    status = build_status(
        obs.sr, [], {}, {}, refusal.resource, now_utc(), problem=(refusal.reason, refusal.message)
    )
    return Plan(status=status, deployable=False, requeue=60.0)


def matches(node: NodeInfo, terms: Sequence[Term]) -> bool:
    return any(
        all((k in node.labels) if not v else node.labels.get(k) == v for k, v in term.items())
        for term in terms
    )


def selection_terms(spec: SpecialResourceSpec, recipe: Recipe) -> tuple[Term, ...]:
    return (dict(spec.node_selector),) if spec.node_selector else recipe.default_node_selector_terms()
