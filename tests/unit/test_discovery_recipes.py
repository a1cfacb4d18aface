"""Discovery of the custom recipes installed on a node: their labels, a bad file, a removed recipe.

A fake host tree: the runtime's install root holds the installed recipes' canonical JSON (as `sro
runtime install --recipe-file` writes it), a simulated recipe's driver root its device list, and
/dev a devnodes recipe's character nodes (made with mknod: skipped without CAP_MKNOD).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from sro.api.recipes import Recipe, recipe_from_file, recipe_to_dict
from sro.devices import driverstate
from sro.devices.model import Device, DeviceUUID, Inventory
from sro.host.root import HostRoot
from sro.kube.nodes import NodeMeta
from sro.node.discovery import accelerators, recipes
from sro.node.discovery.config import Config
from sro.node.discovery.labeling import Labeling, build_labels, source_of_key
from sro.node.discovery.publishing import OWNED_ANNOTATION, encode_owned, plan
from sro.node.discovery.sources import SOURCE_NAMES, scan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FPGA = recipe_from_file(EXAMPLES / "fpga" / "recipe.yaml")
NIC_DEV = replace(
    recipe_from_file(EXAMPLES / "smartnic" / "recipe.yaml"),
    name="example-nic-hw",
    backend="devnodes",
    simulated=False,
    driver_root="/",
    pools={},
)


def install(host: Path, *found: Recipe) -> Path:
    where = host / "var/lib/sro/runtime/recipes"
    where.mkdir(parents=True, exist_ok=True)
    for r in found:
        (where / f"{r.name}.json").write_text(json.dumps(recipe_to_dict(r), sort_keys=True))
    return where


def simulate(host: Path, recipe: Recipe, count: int) -> None:
    devices = tuple(
        Device(
            uuid=DeviceUUID(f"FPGA-{i}"), index=i, minor=i, device_node=f"/dev/xclmgmt{i}",
            pci_bus_id=f"0000:0{i}:00.0", product="Example U250 FPGA (simulated)", memory_mib=65536,
            compute_capability="", simulated=True, companion_nodes=(f"/dev/dri/renderD{128 + i}",),
        )
        for i in range(count)
    )  # fmt: skip
    root = host / recipe.driver_root.lstrip("/")
    inv = Inventory("simulated", devices, "2.16.204-sim", simulated=True)
    driverstate.write_atomic(root / "devices.json", json.dumps(driverstate.inventory_to_doc(inv, 120, 255)))


def discover(host: HostRoot, config: Config) -> Labeling:
    """A pass of the accelerator source alone (the fake tree has no /proc for the others)."""
    only = (accelerators.SOURCE,)
    return build_labels(scan(host, config, only), config, only)


def labels(host: Path) -> tuple[dict[str, str], list[str]]:
    found = discover(HostRoot.at(host), Config())
    return (
        {k: v for k, v in found.labels.items() if k.startswith("sro.dev/")},
        [f"{p.path}: {p.message}" for p in found.problems],
    )


def test_simulated_recipe_labels(tmp_path: Path) -> None:
    install(tmp_path, FPGA)
    simulate(tmp_path, FPGA, 2)
    got, problems = labels(tmp_path)
    assert got == {
        "sro.dev/example-fpga.count": "2",
        "sro.dev/example-fpga.product": "Example-U250-FPGA-simulated",
        "sro.dev/example-fpga.simulated": "true",
    }
    assert problems == []


def test_installed_recipe_without_devices_has_no_labels(tmp_path: Path) -> None:
    install(tmp_path, FPGA)  # the driver not installed yet
    assert labels(tmp_path) == ({}, [])


def test_bad_recipe_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    where = install(tmp_path, FPGA)
    simulate(tmp_path, FPGA, 1)
    (where / "broken.json").write_text("{not json")
    doc = recipe_to_dict(FPGA) | {"name": "other", "deviceNode": "/etc/passwd{index}"}
    (where / "escapes.json").write_text(json.dumps(doc))
    (where / "notes.txt").write_text("ignored: not a recipe file")
    got, problems = labels(tmp_path)
    assert got["sro.dev/example-fpga.count"] == "1"  # the good recipe is still labelled
    assert len(problems) == 2
    assert any("broken.json: unusable installed recipe" in p for p in problems)
    assert any("escapes.json" in p and "deviceNode" in p for p in problems)


def test_devnodes_recipe_counts_char_nodes(tmp_path: Path) -> None:
    install(tmp_path, NIC_DEV)
    dev = tmp_path / "dev"
    dev.mkdir()
    try:
        for i in (0, 1, 3):
            os.mknod(dev / f"sro-vf{i}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("needs CAP_MKNOD")
    (dev / "sro-vf9").write_text("a regular file is not a device")
    (dev / "sro-vfx").mkdir()
    got, problems = labels(tmp_path)
    assert got == {
        "sro.dev/example-nic-hw.count": "3",
        "sro.dev/example-nic-hw.product": "example-nic-hw",
    }  # real hardware: no .simulated label
    assert problems == []


def test_labels_are_pure_and_ordered_by_index() -> None:
    devices = [
        {"recipe": "a", "uuid": "2", "index": "2", "product": "Second"},
        {"recipe": "a", "uuid": "1", "index": "1", "product": "First card (simulated)"},
        {"recipe": "b", "uuid": "x", "index": "0", "product": "B"},
    ]
    out = recipes.labels({"a": "simulated", "c": "hardware"}, devices, lambda s: s.replace(" ", "-"))
    assert out == {
        "sro.dev/a.count": "2",
        "sro.dev/a.product": "First-card-(simulated)",
        "sro.dev/a.simulated": "true",
    }


def test_removed_recipe_loses_its_labels_and_foreign_ones_stay(tmp_path: Path) -> None:
    where = install(tmp_path, FPGA)
    simulate(tmp_path, FPGA, 2)
    before, _ = labels(tmp_path)
    assert all(source_of_key(k, SOURCE_NAMES) == "accelerators" for k in before)
    (where / "example-fpga.json").unlink()  # the recipe's last owner uninstalled it
    after = discover(HostRoot.at(tmp_path), Config())
    node = NodeMeta(
        name="n1",
        labels={**before, "sro.dev/example-fpga.enabled": "true", "sro.dev/sr1.driver": "ready"},
        annotations={OWNED_ANNOTATION: encode_owned(set(before))},
        resource_version="1",
    )
    p = plan(node, {k: v for k, v in after.labels.items() if k.startswith("sro.dev/")})
    assert set(p.remove_labels) == set(before)
    assert "sro.dev/example-fpga.enabled" not in p.remove_labels  # the opt-in is not ours
    assert "sro.dev/sr1.driver" not in p.remove_labels


def test_driver_root_outside_the_mounted_trees_is_a_warning(tmp_path: Path) -> None:
    odd = replace(FPGA, name="odd", driver_root="/opt/odd")
    install(tmp_path, odd)
    found = discover(HostRoot.at(tmp_path), Config())
    assert not [k for k in found.labels if k.startswith("sro.dev/odd.")]
    assert any("driver root not visible" in w.message for w in found.warnings)
    assert found.problems == ()
