"""A custom recipe, carried from the operator to every node agent of its SpecialResource.

Why: an agent given `--recipe=<name>` can only resolve a built-in recipe, so for a SpecialResource
with `spec.recipeConfigMap` the operator publishes the recipe it ADMITTED (checked, defaults filled
in) as ConfigMap `sro-<sr>-recipe` (key `recipe.json`, canonical JSON: `recipe_to_dict`, sorted
keys), and the state templates, given `recipe_config_map`, mount it read-only at /etc/sro/recipe and
pass `--recipe-file` instead. The pod templates carry `sro.dev/recipe-hash` (the JSON's sha256, 12
hex digits): an edited recipe rolls the agents. The admin's recipe.yaml is never passed on as
written: what reaches the nodes is what admission accepted.

Where the hardware is real (not simulated) its nodes are found by a NodeFeatureRule `sro-recipe-<name>`
that the operator applies with the SpecialResource: the recipe's PCI vendor, classes and device ids
on NFD's `pci.device` feature label the node `sro.dev/<name>.present=true` (`present_label`), the
label the SpecialResource then selects by default. A simulated recipe matches no PCI device: its
nodes opt in with `sro.dev/<name>.enabled=true` (`Recipe.default_node_selector_terms`).

Pure: names, documents and values only; `rendering` and `reconcile` put them in place.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sro.api import recipes
from sro.api.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, PREFIX, SPECIALRESOURCE_LABEL
from sro.api.nfd_crds import NFD_API_VERSION
from sro.api.recipes import Recipe

RECIPE_KEY = "recipe.json"
RECIPE_MOUNT = "/etc/sro/recipe"
RECIPE_FILE = f"{RECIPE_MOUNT}/{RECIPE_KEY}"
HASH_ANNOTATION = f"{PREFIX}recipe-hash"
RULE_KIND = "NodeFeatureRule"


def config_map_name(sr: str) -> str:
    return f"sro-{sr}-recipe"


def recipe_json(recipe: Recipe) -> str:
    """The canonical document of a recipe: what `--recipe-file` reads on the node."""
    return json.dumps(recipes.recipe_to_dict(recipe), sort_keys=True)


def recipe_hash(recipe: Recipe) -> str:
    return hashlib.sha256(recipe_json(recipe).encode()).hexdigest()[:12]


def template_values(sr: str, recipe: Recipe, custom: bool) -> dict[str, Any]:
    """The template values of a custom recipe (none for a built-in one: its objects stay as they
    were): the ConfigMap to mount, its hash, and — for a simulated recipe — `simulated`, so every
    template takes its simulated branch and says so (`sro.dev/simulated`)."""
    if not custom:
        return {}
    values: dict[str, Any] = {"recipe_config_map": config_map_name(sr), "recipe_hash": recipe_hash(recipe)}
    if recipe.simulated:
        values["simulated"] = True
    return values


def config_map(sr: str, namespace: str, recipe: Recipe) -> dict[str, Any]:
    """The ConfigMap the agents mount (the operator adds its labels and owner reference)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(sr),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "sro-recipe", "app.kubernetes.io/instance": recipe.name},
            "annotations": {HASH_ANNOTATION: recipe_hash(recipe)},
        },
        "data": {RECIPE_KEY: recipe_json(recipe)},
    }


def present_label(recipe: Recipe) -> str:
    return f"{PREFIX}{recipe.name}.present"


def rule_name(recipe: Recipe) -> str:
    return f"sro-recipe-{recipe.name}"


def _class_patterns(classes: tuple[str, ...]) -> list[str]:
    """NFD's pci.device `class` is 4 hex digits: a 2-digit recipe class is a base class (any subclass)."""
    return [f"^{c.lower()}" + ("$" if len(c) == 4 else "") for c in classes]


def node_feature_rule(sr: str, recipe: Recipe) -> dict[str, Any] | None:
    """The NodeFeatureRule that labels the nodes having the recipe's PCI device; None for a
    simulated recipe (no PCI device to find)."""
    if recipe.simulated:
        return None
    expressions: dict[str, Any] = {"vendor": {"op": "In", "value": [recipe.pci_vendor.lower()]}}
    if recipe.pci_classes:
        expressions["class"] = {"op": "InRegexp", "value": _class_patterns(recipe.pci_classes)}
    if recipe.pci_devices:
        expressions["device"] = {"op": "In", "value": [d.lower() for d in recipe.pci_devices]}
    return {
        "apiVersion": NFD_API_VERSION,
        "kind": RULE_KIND,
        "metadata": {
            "name": rule_name(recipe),
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                "app.kubernetes.io/name": "sro-recipe",
                SPECIALRESOURCE_LABEL: sr,
            },
        },
        "spec": {
            "rules": [
                {
                    "name": f"{recipe.name} present",
                    "labels": {present_label(recipe): "true"},
                    "matchFeatures": [{"feature": "pci.device", "matchExpressions": expressions}],
                }
            ]
        },
    }
