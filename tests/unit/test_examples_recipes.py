"""Every file under examples/ parses as what it claims to be, and the custom-recipe examples agree
with themselves.

Why: the examples are the first thing a reader copies. A SpecialResource that the API server or the
operator would refuse, a recipe with a field the loader rejects, a devices.yaml naming a library the
recipe never injects, or a `kubectl create configmap` line in a comment naming another ConfigMap than
the SpecialResource does, would each fail on the reader's cluster; here they fail first.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.api.crd import crd
from sro.api.recipes import BUILTIN, Recipe, recipe_from_dict, recipe_from_file, recipe_to_dict
from sro.api.specparsing import parse_spec
from sro.devices import simclass
from sro.operator.admission import resolve_recipe
from tests.schema_fit import fits

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CUSTOM = ("fpga", "smartnic")
SPEC_SCHEMA = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def special_resources() -> list[Path]:
    return sorted([*EXAMPLES.glob("*.yaml"), *EXAMPLES.glob("*/specialresource.yaml")])


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def recipe(example: str) -> Recipe:
    return recipe_from_file(EXAMPLES / example / "recipe.yaml")


def test_every_example_file_is_yaml_and_is_one_of_the_known_kinds() -> None:
    found = sorted(EXAMPLES.rglob("*.yaml"))
    assert len(found) >= 9, found
    for path in found:
        doc = load(path)
        assert isinstance(doc, dict), path
        known = path.name in ("recipe.yaml", "devices.yaml") or doc.get("kind") == "SpecialResource"
        assert known, f"{path}: neither a recipe, a devices file nor a SpecialResource"


@pytest.mark.parametrize("path", special_resources(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_special_resource_fits_the_crd_and_parses(path: Path) -> None:
    doc = load(path)
    assert doc["apiVersion"] == "sro.dev/v1alpha1" and doc["kind"] == "SpecialResource", path
    assert fits(SPEC_SCHEMA, doc["spec"], "spec") == []
    spec = parse_spec(doc["metadata"]["name"], doc["spec"])
    assert spec.recipe == doc["spec"]["recipe"]


@pytest.mark.parametrize("example", CUSTOM)
def test_the_custom_recipe_loads_and_survives_its_canonical_form(example: str) -> None:
    r = recipe(example)
    assert r.name == f"example-{example}" and r.name not in BUILTIN
    assert r.backend == "simulated" and r.simulated and r.metrics == "health"
    assert r.driver_root == f"/var/lib/sro/driver/{r.name}"
    assert recipe_from_dict(recipe_to_dict(r)) == r
    # the document as written is the canonical one, bar key order and the defaults it leaves out
    written = load(EXAMPLES / example / "recipe.yaml")
    canonical = recipe_to_dict(r)
    assert {k: canonical[k] for k in written if k != "validation"} == {
        k: v for k, v in written.items() if k != "validation"
    }


def test_the_fpga_recipe_is_the_designs() -> None:
    r = recipe("fpga")
    assert r.resource == "example.com/fpga" and r.cdi_kind == "example.com/fpga"
    assert r.device_node == "/dev/xclmgmt{index}"
    assert r.companion_nodes == ("/dev/dri/renderD{index+128}",)
    assert r.libraries == {"runtime": ("libxrt_core.so.*",)} and r.binaries == {"runtime": ("xbutil",)}
    assert r.validation_commands == (("xbutil", "examine"),)
    assert (r.pci_vendor, r.pci_classes, r.pci_devices) == ("10ee", ("1200",), ("5004",))
    assert r.announced_resources == ("example.com/fpga",)


def test_the_smartnic_recipe_is_the_designs() -> None:
    r = recipe("smartnic")
    assert r.resource == "example.com/smartnic-vf" and r.cdi_kind == r.resource  # the default
    assert r.device_node == "/dev/sro-vf{index}" and r.control_nodes == ("/dev/sro-nicctl",)
    assert r.pools == {"example.com/vf-pool-a": {"pf": "0"}, "example.com/vf-pool-b": {"pf": "1"}}
    assert r.libraries == {"runtime": ("libexnic.so.*",)} and r.binaries == {"runtime": ("exnic-ctl",)}
    assert r.announced_resources == (
        "example.com/vf-pool-a",
        "example.com/vf-pool-b",
        "example.com/smartnic-vf",
    )


@pytest.mark.parametrize("example", CUSTOM)
def test_the_devices_file_fits_the_recipe(example: str) -> None:
    r = recipe(example)
    sim = simclass.parse(load(EXAMPLES / example / "devices.yaml"), r)
    assert sim.libraries and sim.binaries and sim.inventory.simulated
    globs = [g for group in r.libraries.values() for g in group]
    for lib in sim.libraries:  # every library made is one the runtime injects
        assert any(fnmatch.fnmatchcase(lib, g) for g in globs), (lib, globs)
    names = {b for group in r.binaries.values() for b in group}
    assert set(sim.binaries) <= names
    assert all(argv[0] in names for argv in r.validation_commands), r.validation_commands
    for d in sim.inventory.devices:  # said once, never twice
        assert d.product.endswith(" (simulated)") and d.product.count("(simulated)") == 1, d.product


def test_the_fpga_cards_have_their_render_nodes() -> None:
    sim = simclass.parse(load(EXAMPLES / "fpga" / "devices.yaml"), recipe("fpga"))
    assert [(d.device_node, d.companion_nodes) for d in sim.inventory.devices] == [
        ("/dev/xclmgmt0", ("/dev/dri/renderD128",)),
        ("/dev/xclmgmt1", ("/dev/dri/renderD129",)),
    ]


def test_the_smartnic_pools_split_the_vfs_by_pf() -> None:
    r = recipe("smartnic")
    sim = simclass.parse(load(EXAMPLES / "smartnic" / "devices.yaml"), r)
    assert len(sim.inventory.devices) == 8 and sim.inventory.control_nodes == ("/dev/sro-nicctl",)
    for (resource, selector), pf in zip(sorted(r.pools.items()), ("0", "1"), strict=True):
        picked = [
            d.index
            for d in sim.inventory.devices
            if all(d.attributes.get(k) == v for k, v in selector.items())
        ]
        assert picked == list(range(4) if pf == "0" else range(4, 8)), (resource, picked)
    assert all(d.attributes["vendor"] == "example" for d in sim.inventory.devices)


@pytest.mark.parametrize("example", CUSTOM)
def test_the_special_resource_names_the_recipe_and_carries_the_devices_file(example: str) -> None:
    path = EXAMPLES / example / "specialresource.yaml"
    doc = load(path)
    spec = parse_spec(doc["metadata"]["name"], doc["spec"])
    # what the operator admits from the ConfigMap the comments say to create is the recipe file
    assert resolve_recipe(spec, load(EXAMPLES / example / "recipe.yaml")) == recipe(example)
    assert yaml.safe_load(spec.driver.devices_config) == load(EXAMPLES / example / "devices.yaml")
    # the commands in the comments name the same ConfigMap, the node opt-in label the recipe selects
    text = path.read_text() + (EXAMPLES / example / "recipe.yaml").read_text()
    made = set(re.findall(r"create configmap (\S+) --from-file=recipe\.yaml", text))
    assert made == {spec.recipe_config_map}, made
    labelled = set(re.findall(r"kubectl label node NODE (\S+)=true", text))
    (term,) = recipe(example).default_node_selector_terms()
    assert labelled == set(term) and set(term.values()) == {"true"}, (labelled, term)
