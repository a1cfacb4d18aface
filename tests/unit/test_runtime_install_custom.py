"""`sro runtime install --recipe-file`: the recipe's canonical JSON in the root, its owners in the
manifest, `--recipe-file <host path>` in the launcher, hooks.d and CDI hook, its live CDI spec with
companion nodes, a different recipe of the same name refused, and the file gone with its last owner."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from sro.api.recipes import Recipe, recipe_from_file, recipe_to_dict
from sro.cli import cli
from sro.node.runtime import hostinstall, rootmanifest
from sro.node.runtime.rootmanifest import InstallError, Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FPGA, NIC, SIM = "example-fpga", "example-smartnic", "simulated-gpu"
FPGA_JSON = f"recipes/{FPGA}.json"
HOST_DIR = "/var/lib/sro/runtime"


def _recipe(name: str) -> Recipe:
    return recipe_from_file(EXAMPLES / name.removeprefix("example-") / "recipe.yaml")


def _host(tmp_path: Path) -> Path:
    """A fake host's /: python3, runc, the fpga's driver (2 cards, card 0 with its render node) and
    the smartnic's (2 VFs and the control node); device nodes are links to character devices."""
    host = tmp_path / "host"
    for d in ("usr/bin", "usr/sbin", "dev/dri"):
        (host / d).mkdir(parents=True)
    (host / "usr" / "bin" / "python3").write_text("#!/bin/false\n")
    (host / "usr" / "bin" / "python3").chmod(0o755)
    (host / "usr" / "sbin" / "runc").write_text("")
    for name, lib, binary in ((FPGA, "libxrt_core.so.2", "xbutil"), (NIC, "libexnic.so.1", "exnic-ctl")):
        drv = host / "var" / "lib" / "sro" / "driver" / name
        (drv / "lib").mkdir(parents=True)
        (drv / "bin").mkdir()
        (drv / "lib" / lib).write_bytes(b"\x7fELF")
        (drv / "bin" / binary).write_text("#!/bin/sh\n")
    for node, target in (
        ("xclmgmt0", "null"),
        ("xclmgmt1", "zero"),
        ("dri/renderD128", "full"),
        ("sro-vf0", "random"),
        ("sro-vf1", "urandom"),
        ("sro-nicctl", "tty"),
    ):
        (host / "dev" / node).symlink_to(f"/dev/{target}")
    return host


def _install(
    tmp_path: Path, custom: dict[str, Recipe], owner: str = "default", cdi_dir: str = ""
) -> rootmanifest.Manifest:
    settings = Settings(host_dir=HOST_DIR, cdi_dir=cdi_dir)
    return hostinstall.install(
        str(tmp_path / "runtime"), {}, settings, str(tmp_path / "host"), owner=owner, custom=custom
    )


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_install_writes_the_recipe_and_names_it_everywhere(tmp_path: Path) -> None:
    _host(tmp_path)
    live = tmp_path / "cdi"
    fpga = _recipe(FPGA)
    m = _install(tmp_path, {FPGA: fpga}, owner="sro-runtime-fpga", cdi_dir=str(live))
    root = tmp_path / "runtime"
    files = _files(root)
    assert files[FPGA_JSON] == json.dumps(recipe_to_dict(fpga), sort_keys=True).encode()
    assert "cdi/example.com-fpga.json" in files
    doc = json.loads(files[rootmanifest.MANIFEST])
    assert doc["recipes"] == {
        FPGA: {"driverRoot": None, "owners": ["sro-runtime-fpga"], "recipeFile": FPGA_JSON}
    }
    assert FPGA_JSON in doc["files"] and m.owners == {FPGA: ("sro-runtime-fpga",)}
    host_json = f"{HOST_DIR}/{FPGA_JSON}"
    assert f"--mode hook --recipe-file {host_json} -- " in files["sro-runtime"].decode()
    hooksd = json.loads(files["hooks.d/sro-hook.json"])
    assert hooksd["hook"]["args"][5:] == ["prestart", "--recipe-file", host_json]
    root_spec = json.loads(files["cdi/example.com-fpga.json"])
    assert root_spec["containerEdits"]["hooks"][0]["args"][-4:-2] == ["--recipe-file", host_json]
    spec = yaml.safe_load((live / "example.com-fpga.yaml").read_text())
    assert spec["kind"] == "example.com/fpga"
    nodes = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}
    assert nodes["0"] == ["/dev/xclmgmt0", "/dev/dri/renderD128"] and nodes["1"] == ["/dev/xclmgmt1"]
    assert {x["containerPath"] for x in spec["containerEdits"]["mounts"]} == {
        "/lib/libxrt_core.so.2",
        "/bin/xbutil",
    }
    # the file the hook is given is one the hook loads
    from sro.node.runtime.hookrecipes import load_file

    loaded = load_file(str(root / FPGA_JSON))
    assert loaded.name == FPGA and loaded.companion_nodes == fpga.companion_nodes


def test_owners_refusal_and_removal_with_the_last_owner(tmp_path: Path) -> None:
    _host(tmp_path)
    root = tmp_path / "runtime"
    fpga, nic = _recipe(FPGA), _recipe(NIC)
    _install(tmp_path, {FPGA: fpga}, "a")
    _install(tmp_path, {FPGA: fpga, NIC: nic}, "b")  # the same recipe: a second owner
    doc = json.loads((root / rootmanifest.MANIFEST).read_text())
    assert doc["recipes"][FPGA]["owners"] == ["a", "b"] and doc["recipes"][NIC]["owners"] == ["b"]
    launcher = (root / "sro-runtime").read_text()
    assert f"--recipe-file {HOST_DIR}/{FPGA_JSON} --recipe-file {HOST_DIR}/recipes/{NIC}.json" in launcher

    before = _files(root)
    other = replace(fpga, binaries={"runtime": ("xbutil", "xclbinutil")})
    with pytest.raises(InstallError, match=r"recipe 'example-fpga' is installed .* by a, b: refusing"):
        _install(tmp_path, {FPGA: other}, "c")
    assert _files(root) == before  # nothing written
    with pytest.raises(InstallError, match="by b: refusing"):
        _install(tmp_path, {FPGA: other}, "a")  # a's own, but b has it too
    with pytest.raises(InstallError, match="a built-in recipe's name"):
        _install(tmp_path, {SIM: replace(fpga, name=SIM)}, "a")

    hostinstall.uninstall(str(root), (FPGA,), owner="a")
    assert (root / FPGA_JSON).exists()  # b still has it
    hostinstall.uninstall(str(root), (FPGA,), owner="b")
    assert not (root / FPGA_JSON).exists() and (root / f"recipes/{NIC}.json").exists()
    assert "example.com-fpga" not in (root / "sro-runtime").read_text() + str(_files(root))
    assert f"--recipe-file {HOST_DIR}/recipes/{NIC}.json" in (root / "sro-runtime").read_text()
    hostinstall.uninstall(str(root), (), owner="b")
    assert sorted(p.name for p in root.iterdir()) == ["sro-runtime"]  # the pass-through launcher


def test_the_only_owner_may_change_its_recipe(tmp_path: Path) -> None:
    _host(tmp_path)
    root = tmp_path / "runtime"
    fpga = _recipe(FPGA)
    _install(tmp_path, {FPGA: fpga}, "a")
    changed = replace(fpga, default_capabilities=("runtime", "extra"))
    _install(tmp_path, {FPGA: changed}, "a")
    assert json.loads((root / FPGA_JSON).read_text())["defaultCapabilities"] == ["runtime", "extra"]


def test_refresh_keeps_the_recipe_and_its_live_spec(tmp_path: Path) -> None:
    host = _host(tmp_path)
    live = tmp_path / "cdi"
    _install(tmp_path, {FPGA: _recipe(FPGA)}, cdi_dir=str(live))
    root = tmp_path / "runtime"
    (live / "example.com-fpga.yaml").unlink()
    (host / "dev" / "dri" / "renderD129").symlink_to("/dev/random")  # card 1's render node appears
    done = hostinstall.refresh(str(root), str(host))
    assert done is not None and done.repaired == (f"{live}/example.com-fpga.yaml: removed",)
    spec = yaml.safe_load((live / "example.com-fpga.yaml").read_text())
    nodes = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}
    assert nodes["1"] == ["/dev/xclmgmt1", "/dev/dri/renderD129"]
    assert (root / FPGA_JSON).exists() and FPGA_JSON in done.files
    from sro.node.runtime.cdikeeper import watched_paths

    assert str(host / "dev" / "dri") in watched_paths(done, str(host), str(root))


def test_cli_installs_a_recipe_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    host = _host(tmp_path)
    root = tmp_path / "runtime"
    base = ["runtime", "install", "--root", str(root), "--host-root", str(host), "--host-root-path", HOST_DIR]
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (EXAMPLES / "fpga" / "recipe.yaml").read_text().replace("/dev/xclmgmt{index}", "/etc/x{index}")
    )
    res = CliRunner().invoke(cli, [*base, "--recipe-file", str(bad)])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and str(bad) in res.output, res.output
    assert "deviceNode" in res.output and not root.exists()
    good = str(EXAMPLES / "fpga" / "recipe.yaml")
    res = CliRunner().invoke(cli, [*base, "--recipe-file", good, "--recipe-file", good])
    assert res.exit_code == 1 and "given twice" in res.output and not root.exists()
    res = CliRunner().invoke(cli, [*base, "--recipe-file", good])
    assert res.exit_code == 0, res.output
    doc = json.loads((root / rootmanifest.MANIFEST).read_text())
    assert list(doc["recipes"]) == [FPGA]  # a recipe file alone installs no built-in
    res = CliRunner().invoke(cli, ["runtime", "uninstall", "--root", str(root), "--recipe", FPGA])
    assert res.exit_code == 0 and not (root / FPGA_JSON).exists(), res.output
