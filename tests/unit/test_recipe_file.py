"""The recipe file: every field parsed, every bad input refused naming its field, one canonical form.

BAD is shared with tests/unit/test_recipe_hookload.py: the OCI hook's loader of an installed recipe
must refuse exactly the documents `recipe_from_dict` refuses, for the same field.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sro.api import recipecheck
from sro.api.recipes import BUILTIN, NVIDIA_GPU, SIMULATED_GPU, RecipeError, recipe_from_dict, recipe_to_dict

# the design's two examples, as an admin writes them
FPGA: dict[str, Any] = {
    "name": "example-fpga",
    "resource": "example.com/fpga",
    "backend": "simulated",
    "pciVendor": "10ee",
    "pciClasses": ["1200"],
    "pciDevices": ["5004"],
    "visibleDevicesEnv": "EXAMPLE_FPGA_VISIBLE_DEVICES",
    "capabilitiesEnv": "EXAMPLE_FPGA_DRIVER_CAPABILITIES",
    "defaultCapabilities": ["runtime"],
    "cdiKind": "example.com/fpga",
    "driverRoot": "/var/lib/sro/driver/example-fpga",
    "deviceNode": "/dev/xclmgmt{index}",
    "companionNodes": ["/dev/dri/renderD{index+128}"],
    "controlNodes": [],
    "libraries": {"runtime": ["libxrt_core.so.*"]},
    "binaries": {"runtime": ["xbutil"]},
    "directories": {},
    "firmware": [],
    "validation": {"commands": [["xbutil", "examine"]]},
    "metrics": "health",
}
SMARTNIC: dict[str, Any] = {
    "name": "example-smartnic",
    "resource": "example.com/smartnic-vf",
    "pciVendor": "15b3",
    "pciClasses": ["0200"],
    "visibleDevicesEnv": "EXAMPLE_SMARTNIC_VISIBLE_DEVICES",
    "capabilitiesEnv": "EXAMPLE_SMARTNIC_DRIVER_CAPABILITIES",
    "defaultCapabilities": ["runtime"],
    "deviceNode": "/dev/sro-vf{index}",
    "controlNodes": ["/dev/sro-nicctl"],
    "libraries": {"runtime": ["libexnic.so.*"]},
    "binaries": {"runtime": ["exnic-ctl"]},
    "validation": {"commands": [["exnic-ctl", "list"]]},
    "metrics": "health",
    "pools": {"example.com/vf-pool-a": {"pf": "0"}, "example.com/vf-pool-b": {"pf": "1"}},
}
EXAMPLES = {"fpga": FPGA, "smartnic": SMARTNIC}


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`doc` with `value` at `path` (`a.b` keys, `a.0` list items; value None deletes)."""
    out = copy.deepcopy(doc)
    *parents, last = path.split("|")
    at: Any = out
    for p in parents:
        at = at[int(p)] if isinstance(at, list) else at[p]
    if value is None:
        del at[last]
    elif isinstance(at, list):
        at[int(last)] = value
    else:
        at[last] = value
    return out


# (id, document, the field the message must name; "" = the document itself, `also` must be said)
BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown-field", _set(FPGA, "colour", "red"), "", "unknown field(s) colour (known: backend, binaries"),
    ("missing-resource", _set(FPGA, "resource", None), "resource", "missing"),
    ("name-not-label", _set(FPGA, "name", "Example_FPGA"), "name", "DNS-1123"),
    ("name-too-long", _set(FPGA, "name", "f" * 41), "name", "1 to 40"),
    ("name-not-string", _set(FPGA, "name", 7), "name", "expected a string"),
    ("name-builtin", _set(FPGA, "name", "simulated-gpu"), "name", "built-in"),
    ("name-nvidia", _set(FPGA, "name", "nvidia-gpu"), "name", "built-in"),
    ("resource-no-domain", _set(FPGA, "resource", "fpga"), "resource", "<domain>/<name>"),
    ("resource-two-slashes", _set(FPGA, "resource", "example.com/a/b"), "resource", "<domain>/<name>"),
    ("resource-k8s", _set(FPGA, "resource", "kubernetes.io/fpga"), "resource", "kubernetes.io"),
    ("resource-k8s-sub", _set(FPGA, "resource", "x.kubernetes.io/fpga"), "resource", "kubernetes.io"),
    ("resource-requests", _set(FPGA, "resource", "requests.example.com/fpga"), "resource", "requests."),
    ("resource-upper-domain", _set(FPGA, "resource", "Example.com/fpga"), "resource", "subdomain"),
    ("resource-empty-name", _set(FPGA, "resource", "example.com/"), "resource", "1 to 63"),
    ("resource-long-name", _set(FPGA, "resource", "example.com/" + "a" * 64), "resource", "1 to 63"),
    ("resource-bad-name", _set(FPGA, "resource", "example.com/-fpga"), "resource", "alphanumeric"),
    ("backend", _set(FPGA, "backend", "opencl"), "backend", "nvml, simulated, devnodes"),
    ("pci-vendor", _set(FPGA, "pciVendor", "10eex"), "pciVendor", "hex"),
    ("pci-vendor-int", _set(FPGA, "pciVendor", 1234), "pciVendor", "expected a string"),
    ("pci-class", _set(FPGA, "pciClasses|0", "120"), "pciClasses[0]", "2 or 4 hex"),
    ("pci-classes-not-list", _set(FPGA, "pciClasses", "1200"), "pciClasses", "list of strings"),
    ("pci-device", _set(FPGA, "pciDevices|0", "50"), "pciDevices[0]", "4 hex"),
    ("visible-lower", _set(FPGA, "visibleDevicesEnv", "fpga_VISIBLE_DEVICES"), "visibleDevicesEnv", "[A-Z_]"),
    ("visible-digit", _set(FPGA, "visibleDevicesEnv", "1_VISIBLE_DEVICES"), "visibleDevicesEnv", "[A-Z_]"),
    ("visible-suffix", _set(FPGA, "visibleDevicesEnv", "FPGA_DEVICES"), "visibleDevicesEnv", "_VISIBLE_DEVICES"),
    ("capabilities-env", _set(FPGA, "capabilitiesEnv", "fpga-caps"), "capabilitiesEnv", "[A-Z_]"),
    ("default-capability", _set(FPGA, "defaultCapabilities|0", "a,b"), "defaultCapabilities[0]", "','"),
    ("cdi-no-class", _set(FPGA, "cdiKind", "example.com"), "cdiKind", "vendor/class"),
    ("cdi-digit", _set(FPGA, "cdiKind", "1example.com/fpga"), "cdiKind", "vendor/class"),
    ("cdi-end", _set(FPGA, "cdiKind", "example.com/fpga-"), "cdiKind", "vendor/class"),
    ("cdi-default", _set(_set(FPGA, "resource", "example.com/0fpga"), "cdiKind", None), "cdiKind", "vendor/class"),
    ("driver-root-relative", _set(FPGA, "driverRoot", "var/lib/x"), "driverRoot", "absolute"),
    ("driver-root-dotdot", _set(FPGA, "driverRoot", "/var/lib/../x"), "driverRoot", "normalised"),
    ("driver-root-slashes", _set(FPGA, "driverRoot", "/var//lib"), "driverRoot", "normalised"),
    ("driver-root-trailing", _set(FPGA, "driverRoot", "/var/lib/"), "driverRoot", "normalised"),
    ("node-no-placeholder", _set(FPGA, "deviceNode", "/dev/xclmgmt"), "deviceNode", "exactly one"),
    ("node-two", _set(FPGA, "deviceNode", "/dev/x{index}{minor}"), "deviceNode", "exactly one"),
    ("node-other", _set(FPGA, "deviceNode", "/dev/x{foo}"), "deviceNode", "{index} or {minor}"),
    ("node-offset", _set(FPGA, "deviceNode", "/dev/x{index+1}"), "deviceNode", "{index} or {minor}"),
    ("node-in-dir", _set(FPGA, "deviceNode", "/dev/{index}/x"), "deviceNode", "file name"),
    ("node-outside-dev", _set(FPGA, "deviceNode", "/etc/x{index}"), "deviceNode", "/dev/"),
    ("node-relative", _set(FPGA, "deviceNode", "dev/x{index}"), "deviceNode", "absolute"),
    ("node-dotdot", _set(FPGA, "deviceNode", "/dev/../etc/x{index}"), "deviceNode", "normalised"),
    ("node-glob", _set(FPGA, "deviceNode", "/dev/x*{index}"), "deviceNode", "glob"),
    ("node-nul", _set(FPGA, "deviceNode", "/dev/x\0{index}"), "deviceNode", "NUL"),
    ("companion-big", _set(FPGA, "companionNodes|0", "/dev/dri/renderD{index+4096}"), "companionNodes[0]", "4095"),
    ("companion-minus", _set(FPGA, "companionNodes|0", "/dev/dri/r{index-1}"), "companionNodes[0]", "{index+N}"),
    ("companion-minor", _set(FPGA, "companionNodes|0", "/dev/dri/r{minor}"), "companionNodes[0]", "{index+N}"),
    ("companion-none", _set(FPGA, "companionNodes|0", "/dev/dri/card"), "companionNodes[0]", "exactly one"),
    ("companion-sign", _set(FPGA, "companionNodes|0", "/dev/r{index++1}"), "companionNodes[0]", "{index+N}"),
    ("companion-outside", _set(FPGA, "companionNodes|0", "/proc/r{index}"), "companionNodes[0]", "/dev/"),
    ("companion-dotdot", _set(FPGA, "companionNodes|0", "/dev/../r{index}"), "companionNodes[0]", "normalised"),
    ("control-glob", _set(SMARTNIC, "controlNodes|0", "/dev/sro-nic*"), "controlNodes[0]", "glob"),
    ("control-placeholder", _set(SMARTNIC, "controlNodes|0", "/dev/c{index}"), "controlNodes[0]", "'{'"),
    ("control-relative", _set(SMARTNIC, "controlNodes|0", "sro-nicctl"), "controlNodes[0]", "absolute"),
    ("control-outside", _set(SMARTNIC, "controlNodes|0", "/run/sro-nicctl"), "controlNodes[0]", "/dev/"),
    ("library-path", _set(FPGA, "libraries|runtime|0", "lib/libx.so"), "libraries.runtime[0]", "'/'"),
    ("library-dotdot", _set(FPGA, "libraries|runtime|0", ".."), "libraries.runtime[0]", "file name"),
    ("libraries-list", _set(FPGA, "libraries", ["libx.so"]), "libraries", "mapping"),
    ("library-group-name", _set(FPGA, "libraries", {"a b": ["x"]}), "libraries.a b", "whitespace"),
    ("binary-path", _set(FPGA, "binaries|runtime|0", "bin/xbutil"), "binaries.runtime[0]", "'/'"),
    ("binary-dot", _set(FPGA, "binaries|runtime", ["xbutil", "."]), "binaries.runtime[1]", "file name"),
    ("directory-absolute", _set(FPGA, "directories", {"runtime": ["/etc"]}), "directories.runtime[0]", "relative"),
    ("directory-dotdot", _set(FPGA, "directories", {"runtime": ["../etc"]}), "directories.runtime[0]", "normalised"),
    ("directory-dot", _set(FPGA, "directories", {"runtime": ["a/./b"]}), "directories.runtime[0]", "normalised"),
    ("firmware-absolute", _set(FPGA, "firmware", ["/lib/firmware/x.bin"]), "firmware[0]", "relative"),
    ("firmware-dotdot", _set(FPGA, "firmware", ["lib/../../x"]), "firmware[0]", "normalised"),
    ("validation-not-binary", _set(FPGA, "validation|commands|0", ["ls", "/"]), "validation.commands[0][0]", "xbutil"),
    ("validation-empty", _set(FPGA, "validation|commands|0", []), "validation.commands[0]", "empty"),
    ("validation-argv-type", _set(FPGA, "validation|commands|0", ["xbutil", 1]), "validation.commands[0][1]", "string"),
    ("validation-field", _set(FPGA, "validation", {"cmds": []}), "validation", "unknown field(s) cmds"),
    ("validation-not-lists", _set(FPGA, "validation", {"commands": "xbutil"}), "validation.commands", "argv"),
    ("metrics", _set(FPGA, "metrics", "full"), "metrics", "telemetry, health"),
    ("pool-bad-resource", _set(SMARTNIC, "pools", {"pool-a": {"pf": "0"}}), "pools.pool-a", "<domain>/<name>"),
    ("pool-is-resource", _set(SMARTNIC, "pools", {"example.com/smartnic-vf": {}}), "pools.example.com/smartnic-vf", "differ"),
    ("pool-selector-int", _set(SMARTNIC, "pools|example.com/vf-pool-a", {"pf": 0}), "pools.example.com/vf-pool-a", "strings"),
    ("pool-selector-list", _set(SMARTNIC, "pools|example.com/vf-pool-a", ["pf"]), "pools.example.com/vf-pool-a", "mapping"),
    ("pools-list", _set(SMARTNIC, "pools", ["example.com/vf-pool-a"]), "pools", "mapping"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "field", "also"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_document_is_refused_naming_its_field(doc: dict[str, Any], field: str, also: str) -> None:
    with pytest.raises(RecipeError) as e:
        recipe_from_dict(doc)
    message = str(e.value)
    name = doc.get("name")
    where = f"recipe {name!r}" if isinstance(name, str) else "recipe"
    assert message.startswith(f"{where}.{field}: " if field else f"{where}: "), message
    assert also in message
    assert "\n" not in message


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_examples_parse(name: str) -> None:
    recipe = recipe_from_dict(EXAMPLES[name])
    assert recipe.name == EXAMPLES[name]["name"] and recipe.metrics == "health" and recipe.simulated


def test_every_field_of_the_fpga_example_arrives() -> None:
    r = recipe_from_dict(FPGA)
    assert (r.pci_vendor, r.pci_classes, r.pci_devices) == ("10ee", ("1200",), ("5004",))
    assert r.companion_nodes == ("/dev/dri/renderD{index+128}",)
    assert r.validation_commands == (("xbutil", "examine"),)
    assert r.libraries == {"runtime": ("libxrt_core.so.*",)} and r.binaries == {"runtime": ("xbutil",)}
    assert r.capabilities_env == "EXAMPLE_FPGA_DRIVER_CAPABILITIES" and r.cdi_kind == "example.com/fpga"
    s = recipe_from_dict(SMARTNIC)
    assert s.pools == {"example.com/vf-pool-a": {"pf": "0"}, "example.com/vf-pool-b": {"pf": "1"}}
    assert s.announced_resources == (
        "example.com/vf-pool-a",
        "example.com/vf-pool-b",
        "example.com/smartnic-vf",
    )
    assert s.control_nodes == ("/dev/sro-nicctl",) and s.cdi_kind == s.resource  # cdiKind defaults


def test_defaults_depend_on_the_backend() -> None:
    minimal = {k: FPGA[k] for k in ("name", "resource", "pciVendor", "visibleDevicesEnv", "deviceNode")}
    simulated = recipe_from_dict(minimal)
    assert simulated.backend == "simulated" and simulated.simulated
    assert simulated.driver_root == "/var/lib/sro/driver/example-fpga" and simulated.metrics == "telemetry"
    devnodes = recipe_from_dict(minimal | {"backend": "devnodes"})
    assert devnodes.driver_root == "/" and devnodes.metrics == "health" and not devnodes.simulated
    nvml = recipe_from_dict(minimal | {"backend": "nvml"})
    assert nvml.driver_root == "/" and nvml.metrics == "telemetry"
    assert recipe_from_dict(minimal | {"backend": "devnodes", "metrics": "telemetry"}).metrics == "telemetry"


def test_pci_ids_are_lower_case_as_nfd_writes_them() -> None:
    r = recipe_from_dict(FPGA | {"pciVendor": "10EE", "pciClasses": ["12AB", "0b"], "pciDevices": ["500F"]})
    assert (r.pci_vendor, r.pci_classes, r.pci_devices) == ("10ee", ("12ab", "0b"), ("500f",))


def test_a_builtin_name_is_taken_only_by_the_builtin_itself() -> None:
    assert recipe_from_dict(recipe_to_dict(NVIDIA_GPU)) is not NVIDIA_GPU
    changed = recipe_to_dict(SIMULATED_GPU) | {"deviceNode": "/dev/other{index}"}
    with pytest.raises(RecipeError, match=r"^recipe 'simulated-gpu'\.name: .*built-in"):
        recipe_from_dict(changed)


@pytest.mark.parametrize("recipe", [*BUILTIN.values(), *(recipe_from_dict(d) for d in EXAMPLES.values())])
def test_the_canonical_document_round_trips_through_json(recipe: Any) -> None:
    doc = recipe_to_dict(recipe)
    assert list(doc) == list(recipecheck.FIELDS)  # every field, in the documented order
    assert recipe_from_dict(json.loads(json.dumps(doc, sort_keys=True))) == recipe
    assert recipe_from_dict(doc) == recipe


# ---- a property: any valid document's canonical form parses back to the same recipe -----------------
names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True).filter(
    lambda n: n not in recipecheck.BUILTIN_NAMES
)
words = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
files = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.*-]{0,10}", fullmatch=True).filter(
    lambda f: f not in (".", "..")
)
rel_paths = st.lists(words, min_size=1, max_size=3).map("/".join)
nodes = st.from_regex(r"/dev/([a-z]{1,5}/)?[a-z-]{1,8}", fullmatch=True)
placeholders = st.sampled_from(["{index}", "{index+1}", "{index+128}", "{index+4095}"])
resources = st.builds("{}.example.com/{}".format, words, words)
envs = st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True)
groups = st.dictionaries(words, st.lists(files, max_size=3), max_size=3)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    binaries = draw(groups)
    known = [b for group in binaries.values() for b in group]
    doc: dict[str, Any] = {
        "name": draw(names),
        "resource": draw(resources),
        "backend": draw(st.sampled_from(recipecheck.BACKENDS)),
        "pciVendor": draw(st.from_regex(r"[0-9a-fA-F]{4}", fullmatch=True)),
        "pciClasses": draw(st.lists(st.from_regex(r"[0-9a-f]{2}([0-9a-f]{2})?", fullmatch=True), max_size=3)),
        "pciDevices": draw(st.lists(st.from_regex(r"[0-9a-f]{4}", fullmatch=True), max_size=2)),
        "visibleDevicesEnv": draw(envs) + "_VISIBLE_DEVICES",
        "deviceNode": draw(nodes) + draw(st.sampled_from(["{index}", "{minor}"])),
        "companionNodes": draw(st.lists(st.builds(str.__add__, nodes, placeholders), max_size=2)),
        "controlNodes": draw(st.lists(nodes, max_size=2)),
        "libraries": draw(groups),
        "binaries": binaries,
        "directories": draw(st.dictionaries(words, st.lists(rel_paths, max_size=2), max_size=2)),
        "firmware": draw(st.lists(rel_paths, max_size=2)),
    }
    if draw(st.booleans()):
        doc["capabilitiesEnv"] = draw(envs)
    if draw(st.booleans()) and known:
        doc["validation"] = {"commands": [[draw(st.sampled_from(known)), *draw(st.lists(words, max_size=2))]]}
    if draw(st.booleans()):
        doc["metrics"] = draw(st.sampled_from(recipecheck.METRICS))
    if draw(st.booleans()):
        doc["driverRoot"] = "/" + draw(rel_paths)
    pools = draw(st.dictionaries(resources, st.dictionaries(words, words, max_size=2), max_size=2))
    doc["pools"] = {k: v for k, v in pools.items() if k != doc["resource"]}
    return doc


@settings(max_examples=150, deadline=None)
@given(documents())
def test_any_valid_document_round_trips(doc: dict[str, Any]) -> None:
    recipe = recipe_from_dict(doc)
    canonical = recipe_to_dict(recipe)
    assert recipe_from_dict(json.loads(json.dumps(canonical))) == recipe
    assert recipe_to_dict(recipe_from_dict(canonical)) == canonical


# ---- the label namespaces ------------------------------------------------------------------------
def test_label_namespaces_keep_the_builtins_and_give_custom_recipes_their_own() -> None:
    assert (NVIDIA_GPU.label_prefix, NVIDIA_GPU.count_label) == ("nvidia.com/", "nvidia.com/gpu.count")
    assert SIMULATED_GPU.label_prefix == "sro.dev/simulated-gpu."
    assert SIMULATED_GPU.count_label == "sro.dev/simulated-gpu.count"
    fpga = recipe_from_dict(FPGA)
    assert (fpga.label_prefix, fpga.count_label) == ("sro.dev/example-fpga.", "sro.dev/example-fpga.count")
    assert fpga.default_node_selector_terms() == ({"sro.dev/example-fpga.enabled": "true"},)
    # a real card's recipe, even one announcing nvidia.com/gpu, labels under sro.dev/<name>.
    mine = recipe_from_dict(FPGA | {"name": "my-gpu", "backend": "nvml", "resource": "nvidia.com/gpu"})
    assert (mine.label_prefix, mine.count_label) == ("sro.dev/my-gpu.", "sro.dev/my-gpu.count")
    assert mine.default_node_selector_terms() == ({"sro.dev/my-gpu.present": "true"},)
    assert NVIDIA_GPU.default_node_selector_terms() == (
        {"feature.node.kubernetes.io/pci-0300_10de.present": "true"},
        {"feature.node.kubernetes.io/pci-0302_10de.present": "true"},
    )


def test_companion_node_fills_the_offset() -> None:
    assert recipecheck.companion_node("/dev/dri/renderD{index+128}", 1) == "/dev/dri/renderD129"
    assert recipecheck.companion_node("/dev/fpga{index}.user", 3) == "/dev/fpga3.user"
    assert recipecheck.companion_offset("/dev/x{index+0}") == 0
    assert recipecheck.companion_offset("/dev/x{index+٣}") == -1  # a non-ASCII digit is no offset
