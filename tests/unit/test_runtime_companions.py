"""A custom recipe in the hook's hands: companion nodes found after their device and given with it
(by id, by CDI name, by the kubelet's linux.devices allocation, in the CDI spec), the recipe file
loaded by --recipe-file or refused naming the file and the field, and no driver file whose symlink
leads out of the driver root.

Device nodes here are symlinks to the host's /dev/null, /dev/zero, /dev/full, /dev/random: character
devices with distinct numbers, without root."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from sro.api.recipes import Recipe, recipe_from_file
from sro.node.runtime import cdi, driverfiles, hook, installedrecipes, inventory, wrapper
from sro.node.runtime.activation import Request
from sro.node.runtime.specedits import HookCommand

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NULL, ZERO, FULL, RANDOM = (1, 3), (1, 5), (1, 7), (1, 8)


def _fpga(driver_root: Path) -> Recipe:
    return replace(recipe_from_file(EXAMPLES / "fpga" / "recipe.yaml"), driver_root=str(driver_root))


@pytest.fixture
def node(tmp_path: Path) -> tuple[Recipe, Path, Path]:
    """(the fpga example with its driver root here, the driver root, the dev root): card 0 with its
    render node, card 1 whose render node is missing, a library, a binary."""
    drv, dev = tmp_path / "driver", tmp_path / "dev"
    (drv / "lib").mkdir(parents=True)
    (drv / "bin").mkdir()
    (drv / "lib" / "libxrt_core.so.2").write_bytes(b"\x7fELF")
    (drv / "bin" / "xbutil").write_text("#!/bin/sh\n")
    (dev / "dri").mkdir(parents=True)
    (dev / "xclmgmt0").symlink_to("/dev/null")
    (dev / "xclmgmt1").symlink_to("/dev/zero")
    (dev / "dri" / "renderD128").symlink_to("/dev/full")
    (dev / "dri" / "renderD130").symlink_to("/dev/random")  # card 2's: there is no card 2
    return _fpga(drv), drv, dev


def _nodes(nodes: tuple[inventory.DeviceNode, ...]) -> list[tuple[str, str, bool]]:
    return [(n.path, n.device_id, n.companion) for n in nodes]


def test_companions_follow_their_device(node: tuple[Recipe, Path, Path]) -> None:
    recipe, _, dev = node
    found = driverfiles.find_devices(recipe, str(dev))
    assert _nodes(found) == [
        ("/dev/xclmgmt0", "0", False),
        ("/dev/dri/renderD128", "0", True),
        ("/dev/xclmgmt1", "1", False),  # its renderD129 is missing: left out, the card stays
    ]
    assert (found[1].major, found[1].minor) == FULL
    assert found[1].host_path == str(dev / "dri" / "renderD128")


def test_companion_patterns() -> None:
    assert driverfiles.companion_path("/dev/dri/renderD{index+128}", 3) == "/dev/dri/renderD131"
    assert driverfiles.companion_path("/dev/sro-fpga{index}-user", 2) == "/dev/sro-fpga2-user"
    for bad in ("/dev/x", "/dev/x{index-1}", "/dev/x{index+}", "/dev/x{index+a}", "/dev/x{minor}"):
        with pytest.raises(ValueError, match="companion node pattern"):
            driverfiles.companion_path(bad, 0)


def test_one_device_gives_its_primary_and_companions(node: tuple[Recipe, Path, Path]) -> None:
    recipe, drv, dev = node
    inv = driverfiles.discover(recipe, str(drv), str(dev))
    one = inventory.plan(Request(recipe, ("0",), ("runtime",), "test"), inv)
    assert [d.path for d in one.device_nodes] == ["/dev/xclmgmt0", "/dev/dri/renderD128"]
    assert one.cgroup_rules == ("c 1:3 rwm", "c 1:7 rwm")
    assert {m.container_path for m in one.mounts} == {"/lib/libxrt_core.so.2", "/bin/xbutil"}
    other = inventory.plan(Request(recipe, ("1",), ("runtime",), "test"), inv)
    assert [d.path for d in other.device_nodes] == ["/dev/xclmgmt1"]
    every = inventory.plan(Request(recipe, ("all",), (), "test"), inv)
    assert len(every.device_nodes) == 3
    with pytest.raises(inventory.UnknownDeviceError, match=r"this node has: 0, 1\)"):
        inventory.plan(Request(recipe, ("2",), (), "test"), inv)


def test_cdi_spec_lists_each_device_with_its_companions(node: tuple[Recipe, Path, Path]) -> None:
    recipe, drv, dev = node
    spec = cdi.generate(recipe, driverfiles.discover(recipe, str(drv), str(dev)), None, void=False)
    assert spec["kind"] == "example.com/fpga" and spec["annotations"] == {"sro.dev/simulated": "true"}
    by_name = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}
    assert by_name == {
        "0": ["/dev/xclmgmt0", "/dev/dri/renderD128"],
        "1": ["/dev/xclmgmt1"],
        "all": ["/dev/xclmgmt0", "/dev/dri/renderD128", "/dev/xclmgmt1"],
    }
    render = spec["devices"][0]["containerEdits"]["deviceNodes"][1]
    assert (render["major"], render["minor"]) == FULL and render["hostPath"] == str(
        dev / "dri" / "renderD128"
    )
    assert cdi.spec_file_name(recipe, "yaml") == "example.com-fpga.yaml"


def test_a_library_linked_out_of_the_driver_root_is_not_offered(tmp_path: Path) -> None:
    drv, outside = tmp_path / "driver", tmp_path / "outside"
    (drv / "lib").mkdir(parents=True)
    (drv / "bin").mkdir()
    outside.mkdir()
    (outside / "shadow").write_text("secret\n")
    (drv / "lib" / "libxrt_core.so.2").symlink_to(outside / "shadow")  # matches the recipe's glob
    (drv / "lib" / "libxrt_core.so.3").symlink_to("../../outside/shadow")  # relative, same escape
    (drv / "lib" / "libxrt_core.so.2.16").write_bytes(b"\x7fELF")
    (drv / "lib" / "libxrt_core.so.1").symlink_to("libxrt_core.so.2.16")  # inside: collapses to it
    (drv / "bin" / "xbutil").symlink_to("/etc/passwd")
    (drv / "firmware").symlink_to(outside, target_is_directory=True)
    recipe = replace(_fpga(drv), firmware=("firmware/*",), directories={"runtime": ("firmware",)})
    inv = driverfiles.discover(recipe, str(drv), str(tmp_path / "dev"))
    mounts = [m for group in (*inv.libraries.values(), *inv.binaries.values()) for m in group]
    mounts += [*inv.firmware, *(m for g in inv.directories.values() for m in g)]
    assert [(m.host_path, m.container_path) for m in mounts] == [
        (str(drv / "lib" / "libxrt_core.so.2.16"), "/lib/libxrt_core.so.2.16")
    ]


def _installed(tmp_path: Path, recipe: Recipe) -> Path:
    path = tmp_path / "recipes" / f"{recipe.name}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(installedrecipes.document(recipe).data)
    return path


def _args(node: tuple[Recipe, Path, Path], tmp_path: Path, *extra: str) -> hook.HookArgs:
    recipe, drv, dev = node
    path = _installed(tmp_path, recipe)
    opts = ["--recipe-file", str(path), "--driver-root", f"{recipe.name}={drv}", "--dev-root", str(dev)]
    return hook.parse_args(["prestart", *opts, *extra])


def test_the_hook_loads_an_installed_recipe_file(node: tuple[Recipe, Path, Path], tmp_path: Path) -> None:
    args = _args(node, tmp_path)
    assert [r.name for r in args.recipes] == ["example-fpga"]  # no built-in unless named
    assert args.recipes[0].companion_nodes == ("/dev/dri/renderD{index+128}",)
    both = hook.parse_args(["prestart", "--recipe", "simulated-gpu", *hook_opts(args)])
    assert [r.name for r in both.recipes] == ["simulated-gpu", "example-fpga"]
    twice = hook.parse_args(["prestart", *hook_opts(args), *hook_opts(args)])
    with pytest.raises(hook.HookError, match="recipe 'example-fpga' is given twice"):
        _ = twice.recipes


def hook_opts(args: hook.HookArgs) -> list[str]:
    return [a for f in args.recipe_files for a in ("--recipe-file", f)]


def _config(env: list[str], devices: list[tuple[int, int]] | None = None) -> dict[str, object]:
    linux = {"devices": [{"path": "/dev/x", "type": "c", "major": a, "minor": b} for a, b in devices or []]}
    return {"root": {"path": "rootfs"}, "process": {"env": ["PATH=/bin", *env]}, "linux": linux}


def test_the_allocation_of_a_companion_gives_its_whole_device(
    node: tuple[Recipe, Path, Path], tmp_path: Path
) -> None:
    """The kubelet's linux.devices holds the device plugin's DeviceSpecs: either node of a card
    names that card, and the plan gives both of its nodes (and nothing of card 1)."""
    args = _args(node, tmp_path)
    for numbers in ([NULL], [FULL], [NULL, FULL]):
        plan = hook.build_plan(args, _config([], numbers))
        assert [d.path for d in plan.device_nodes] == ["/dev/xclmgmt0", "/dev/dri/renderD128"], numbers
    assert hook.build_plan(args, _config([], [ZERO])).device_nodes[0].path == "/dev/xclmgmt1"
    # an unprivileged container's own env names nothing it was not given
    assert hook.build_plan(args, _config(["EXAMPLE_FPGA_VISIBLE_DEVICES=0"])).empty
    trusted = _args(node, tmp_path, "--accept-envvar-unprivileged", "true")
    plan = hook.build_plan(trusted, _config(["EXAMPLE_FPGA_VISIBLE_DEVICES=example.com/fpga=0"]))
    assert [d.path for d in plan.device_nodes] == ["/dev/xclmgmt0", "/dev/dri/renderD128"]


def test_the_wrapper_writes_primary_and_companion_into_the_spec(
    node: tuple[Recipe, Path, Path], tmp_path: Path
) -> None:
    args = _args(node, tmp_path)
    spec = _config([], [FULL])
    edited = wrapper.edit_spec(spec, args, "cdi", HookCommand("/usr/bin/python3", ()))
    assert edited is not None
    paths = [d["path"] for d in edited["linux"]["devices"]]
    assert "/dev/xclmgmt0" in paths and "/dev/dri/renderD128" in paths and "/dev/xclmgmt1" not in paths


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"deviceNode": "/dev/../etc/xclmgmt{index}"}, "deviceNode"),
        ({"companionNodes": ["/etc/shadow{index}"]}, "companionNodes"),
        ({"libraries": {"runtime": ["../../etc/shadow"]}}, "libraries"),
        ({"directories": {"runtime": ["../etc"]}}, "directories"),
    ],
)
def test_a_refused_recipe_file_fails_the_start_naming_file_and_field(
    node: tuple[Recipe, Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, object],
    field: str,
) -> None:
    recipe, _, dev = node
    path = _installed(tmp_path, recipe)
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps(_config([], [NULL])))
    state = json.dumps({"pid": 4242, "bundle": str(bundle)}).encode()
    argv = ["prestart", "--recipe-file", str(path), "--dev-root", str(dev)]
    assert hook.main(argv, io.BytesIO(state)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sro hook: --recipe-file {path}: {field}") and err.count("\n") == 1, err
    assert list((bundle / "rootfs").iterdir()) == []  # nothing injected
    # a container that cannot be asking is let through before any recipe is read
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}, "process": {"env": ["A=1"]}}))
    assert hook.main(argv, io.BytesIO(state)) == 0


def test_a_missing_recipe_file_is_one_line(tmp_path: Path) -> None:
    args = hook.parse_args(["prestart", "--recipe-file", str(tmp_path / "none.json")])
    with pytest.raises(hook.HookError, match=r"^--recipe-file .*none\.json: cannot read the recipe"):
        _ = args.recipes


def test_cdi_generate_takes_a_recipe_file(node: tuple[Recipe, Path, Path], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sro.cli import cli

    _, drv, dev = node
    argv = ["cdi", "generate", "--recipe-file", str(EXAMPLES / "fpga" / "recipe.yaml")]
    res = CliRunner().invoke(
        cli, [*argv, "--driver-root", str(drv), "--dev-root", str(dev), "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    spec = json.loads(res.stdout)
    assert spec["kind"] == "example.com/fpga"
    assert [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]] == [
        "/dev/xclmgmt0",
        "/dev/dri/renderD128",
    ]
    assert "--recipe" not in spec["containerEdits"]["hooks"][0]["args"]  # the ldcache stage reads none
