"""A custom recipe through the hook with real runc: the fpga example installed as `sro runtime install`
writes it (canonical JSON, named by --recipe-file), one card asked for, its management node AND its
render node in the container and allowed by the device cgroup, the other card's neither; the library
and the binary of the recipe mounted; a recipe file the hook refuses fails the start naming the file
and the field, and nothing of it is injected.

The card nodes are real character devices on the simulated driver's major (no kernel driver behind
it: an allowed open says ENXIO, a denied one EPERM), in a temporary dev root."""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from sro.api.recipes import Recipe, recipe_from_file
from sro.node.runtime import hostinstall, installedrecipes, rootmanifest
from tests.root.conftest import PYTHON, RUNC, Bundle, Driver, leftover_processes, mount_points

pytestmark = pytest.mark.root

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CARDS = {"xclmgmt0": 20, "xclmgmt1": 21, "dri/renderD128": 28, "dri/renderD129": 29}


@pytest.fixture
def fpga(tmp_path: Path, driver: Driver) -> tuple[Recipe, Path, Path, Path]:
    """(the recipe, its installed JSON, its driver root, the dev root) on this host."""
    drv, dev = tmp_path / "fpga-driver", tmp_path / "fpga-dev"
    (drv / "lib").mkdir(parents=True)
    (drv / "bin").mkdir()
    shutil.copy2(driver.driver_root / "lib" / "libsimgpu.so.1", drv / "lib" / "libxrt_core.so.2")  # an ELF
    xbutil = drv / "bin" / "xbutil"
    xbutil.write_text("#!/bin/sh\necho 'xbutil: SIMULATED'; ls /dev/xclmgmt* /dev/dri\n")
    xbutil.chmod(0o755)
    (dev / "dri").mkdir(parents=True)
    for name, minor in CARDS.items():
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(driver.major, minor))
    recipe = replace(recipe_from_file(EXAMPLES / "fpga" / "recipe.yaml"), driver_root=str(drv))
    installed = tmp_path / "runtime" / "recipes" / f"{recipe.name}.json"
    installed.parent.mkdir(parents=True)
    installed.write_bytes(installedrecipes.document(recipe).data)
    return recipe, installed, drv, dev


def _entry(installed: Path, dev: Path) -> dict[str, object]:
    from sro.node.runtime.specedits import HookCommand

    opts = ("--recipe-file", str(installed), "--dev-root", str(dev), "--ldconfig", "none")
    return HookCommand(PYTHON, (*opts, "--accept-envvar-unprivileged", "true")).entry("prestart")


CHECK = (
    "ls /dev/xclmgmt* /dev/dri/* 2>&1 | tr '\\n' ' '; echo;"
    " cat /dev/xclmgmt1 2>&1; cat /dev/dri/renderD129 2>&1; cat /dev/xclmgmt0 2>&1;"
    " test -s /lib/libxrt_core.so.2 && echo LIB; xbutil examine"
)


def test_one_card_gets_its_management_and_render_nodes(
    bundle: Bundle, fpga: tuple[Recipe, Path, Path, Path]
) -> None:
    _, installed, _, dev = fpga
    bundle.add_hook("prestart", _entry(installed, dev))
    before = mount_points()
    res = bundle.run(CHECK, env=["EXAMPLE_FPGA_VISIBLE_DEVICES=1"])
    out = res.stdout + res.stderr
    listed = out.splitlines()[0]
    assert "/dev/xclmgmt1" in listed and "/dev/dri/renderD129" in listed, out
    assert "xclmgmt0" not in listed and "renderD128" not in listed, out  # only the card asked for
    # both nodes allowed by the device cgroup: no driver behind the major -> ENXIO, never EPERM
    assert out.count("No such device or address") == 2, out
    assert "Operation not permitted" not in out and "cat: can't open '/dev/xclmgmt0'" in out, out
    assert "LIB" in out and "xbutil: SIMULATED" in out, out
    assert mount_points() == before


def test_a_cdi_name_of_the_recipe_kind_selects_the_card(
    bundle: Bundle, fpga: tuple[Recipe, Path, Path, Path]
) -> None:
    _, installed, _, dev = fpga
    bundle.add_hook("prestart", _entry(installed, dev))
    ls = "ls /dev /dev/dri 2>/dev/null | tr '\\n' ' '"
    out = bundle.run(ls, env=[]).stdout
    assert "xclmgmt" not in out and "renderD" not in out, out  # nothing asked, nothing given
    bundle.spec["annotations"] = {"cdi.k8s.io/fpga": "example.com/fpga=0"}
    out = bundle.run(ls, env=[]).stdout
    assert "xclmgmt0" in out and "renderD128" in out, out
    assert "xclmgmt1" not in out and "renderD129" not in out, out


def test_a_refused_recipe_file_fails_the_start_and_injects_nothing(
    bundle: Bundle, fpga: tuple[Recipe, Path, Path, Path]
) -> None:
    _, installed, _, dev = fpga
    doc = json.loads(installed.read_text())
    installed.write_text(json.dumps({**doc, "binaries": {"runtime": ["../../../bin/sh"]}}))
    bundle.add_hook("prestart", _entry(installed, dev))
    res = bundle.run("echo STARTED", env=["EXAMPLE_FPGA_VISIBLE_DEVICES=0"])
    assert res.returncode != 0 and "STARTED" not in res.stdout
    assert f"sro hook: --recipe-file {installed}: binaries" in res.stderr, res.stderr
    assert not (bundle.rootfs / "dev" / "xclmgmt0").exists()
    assert not (bundle.rootfs / "bin" / "xbutil").exists()


@pytest.mark.parametrize("mode", ["hook", "cdi"])
def test_installed_recipe_file_through_the_launcher(
    tmp_path: Path, bundle: Bundle, fpga: tuple[Recipe, Path, Path, Path], mode: str
) -> None:
    """`sro runtime install` of the recipe (the host's python on the zipapp, as on a node): the
    launcher names --recipe-file and card 1 arrives with its render node, in both modes."""
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no /usr/bin/python3 on this machine")
    recipe, _, drv, dev = fpga
    root = tmp_path / "installed"
    settings = rootmanifest.Settings(
        host_dir=str(root), runc=RUNC, mode=mode, dev_root=str(dev), accept_envvar_unprivileged=True
    )
    hostinstall.install(str(root), {recipe.name: str(drv)}, settings, custom={recipe.name: recipe})
    launcher = root / "sro-runtime"
    assert f"--recipe-file {root}/recipes/example-fpga.json" in launcher.read_text()
    res = bundle.launch(
        launcher, f"fpga-{mode}", CHECK, ["PATH=/bin:/sbin", "EXAMPLE_FPGA_VISIBLE_DEVICES=1"], tmp_path
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    listed = out.splitlines()[0]
    assert "/dev/xclmgmt1" in listed and "/dev/dri/renderD129" in listed and "xclmgmt0" not in listed, out
    assert out.count("No such device or address") == 2 and "xbutil: SIMULATED" in out, out
    assert leftover_processes(str(bundle.path)) == []
    hostinstall.uninstall(str(root), purge=True)
    assert not any(root.iterdir())
