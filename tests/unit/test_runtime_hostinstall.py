"""`sro runtime install | uninstall` on temporary trees: the files, their modes, the manifest,
idempotence, host paths when the host's / is elsewhere, and removal of exactly what was written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sro.api import passthrough
from sro.cli import cli
from sro.local.hostsetup import ensure_launcher
from sro.node.runtime import bundling, hostinstall, hostpaths, hostpython, rootmanifest, rootwrites
from sro.node.runtime.rootmanifest import InstallError, Settings

SIM = "simulated-gpu"
NV = "nvidia-gpu"
SIM_CDI = "cdi/sro.dev-simulated-gpu.json"


def _host(tmp_path: Path) -> Path:
    """A fake host's / : python3 (an absolute link, as some distros have), runc, the simulated
    driver's files and its device nodes (links to /dev/null: character devices without root)."""
    host = tmp_path / "host"
    (host / "usr" / "bin").mkdir(parents=True)
    (host / "usr" / "sbin").mkdir(parents=True)
    real = host / "usr" / "bin" / "python3.11"
    real.write_text("#!/bin/false\n")
    real.chmod(0o755)
    (host / "usr" / "bin" / "python3").symlink_to("/usr/bin/python3.11")
    (host / "usr" / "sbin" / "runc").write_text("")
    drv = host / "var" / "lib" / "sro" / "driver" / "simulated-gpu"
    (drv / "lib").mkdir(parents=True)
    (drv / "bin").mkdir()
    (drv / "lib" / "libsimgpu.so.1").write_bytes(b"\x7fELF")
    (drv / "bin" / "simgpu-smi").write_text("#!/bin/sh\n")
    (host / "dev").mkdir()
    for name in ("sro-simgpu0", "sro-simgpu1", "sro-simgpuctl"):
        (host / "dev" / name).symlink_to("/dev/null")
    return host


def _settings(root: Path, **kw: str) -> Settings:
    return Settings(host_dir=kw.pop("host_dir", str(root)), **kw)


def _only_passthrough_left(root: Path, runc: str = "/usr/sbin/runc") -> bool:
    """What a last uninstall leaves: the pass-through launcher, executable, and nothing else of sro's."""
    launcher = root / "sro-runtime"
    return (
        sorted(p.name for p in root.iterdir()) == ["sro-runtime"]
        and launcher.read_text() == passthrough.render(runc)
        and launcher.stat().st_mode & 0o7777 == 0o755
    )


def _files(root: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = (p.stat().st_mode & 0o7777, p.read_bytes())
    return out


def _install(
    root: Path, host: Path, recipes: dict[str, str | None] | None = None, **kw: str
) -> rootmanifest.Manifest:
    return hostinstall.install(
        str(root), recipes if recipes is not None else {SIM: None}, _settings(root, **kw), host_root=str(host)
    )


def test_install_writes_the_files_for_the_host_with_a_manifest(tmp_path: Path) -> None:
    host, root = _host(tmp_path), tmp_path / "mnt" / "runtime"
    m = _install(root, host, host_dir="/var/lib/sro/runtime")
    files = _files(root)
    assert sorted(files) == sorted(
        [bundling.ARCHIVE_NAME, "sro-runtime", "hooks.d/sro-hook.json", SIM_CDI, rootmanifest.MANIFEST]
    )
    assert files["sro-runtime"][0] == 0o755
    assert {mode for name, (mode, _) in files.items() if name != "sro-runtime"} == {0o644}
    doc = json.loads(files[rootmanifest.MANIFEST][1])
    assert doc["recipes"] == {SIM: {"driverRoot": None, "owners": ["default"]}}
    assert doc["settings"]["hostDir"] == "/var/lib/sro/runtime"
    assert set(doc["files"]) == set(files) - {rootmanifest.MANIFEST} == set(m.files)
    import hashlib

    for name, meta in doc["files"].items():
        assert meta["sha256"] == hashlib.sha256(files[name][1]).hexdigest()
        assert int(meta["mode"], 8) == files[name][0]

    archive = "/var/lib/sro/runtime/sro-hook.pyz"  # host paths everywhere, never where we see them
    launcher = files["sro-runtime"][1].decode()
    assert f"/usr/bin/python3 -I -S -c 'import sys;sys.path.insert(0,'\"'\"'{archive}'\"'\"')" in launcher
    assert '--mode hook --recipe simulated-gpu -- "$@"' in launcher and str(tmp_path) not in launcher
    hooksd = json.loads(files["hooks.d/sro-hook.json"][1])
    assert hooksd["hook"]["path"] == "/usr/bin/python3" and archive in hooksd["hook"]["args"][4]
    assert hooksd["hook"]["args"][5:] == ["prestart", "--recipe", SIM] and hooksd["stages"] == ["prestart"]
    spec = json.loads(files[SIM_CDI][1])
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "all"]
    edits = spec["containerEdits"]
    assert edits["deviceNodes"] == [
        {"path": "/dev/sro-simgpuctl", "type": "c", "major": 1, "minor": 3, "fileMode": 0o666}
    ]
    assert {x["hostPath"] for x in edits["mounts"]} == {
        "/var/lib/sro/driver/simulated-gpu/lib/libsimgpu.so.1",
        "/var/lib/sro/driver/simulated-gpu/bin/simgpu-smi",
    }
    assert edits["hooks"][0]["path"] == "/usr/bin/python3" and archive in edits["hooks"][0]["args"][4]
    assert str(tmp_path) not in files[SIM_CDI][1].decode()


def test_install_is_idempotent(tmp_path: Path) -> None:
    host, root = _host(tmp_path), tmp_path / "runtime"
    _install(root, host)
    before = {p: os.stat(root / p).st_mtime_ns for p in _files(root)}
    content = _files(root)
    log: list[str] = []
    hostinstall.install(str(root), {SIM: None}, _settings(root), host_root=str(host), log=log.append)
    assert _files(root) == content
    assert {p: os.stat(root / p).st_mtime_ns for p in _files(root)} == before
    assert all(line.startswith("unchanged ") for line in log), log


def test_recipes_share_the_files_and_uninstall_removes_one_at_a_time(tmp_path: Path) -> None:
    host, root = _host(tmp_path), tmp_path / "runtime"
    _install(root, host, {SIM: None})
    _install(root, host, {NV: None})  # no NVIDIA devices here: no spec, a note says why
    manifest = rootwrites.read_manifest(str(root))
    assert manifest is not None and set(manifest.recipes) == {SIM, NV}
    assert any(n.startswith(f"{NV}: no CDI spec") for n in manifest.notes)
    assert "--recipe nvidia-gpu --recipe simulated-gpu" in (root / "sro-runtime").read_text()
    (root / "cdi" / "someone-else.json").write_text("{}")
    (root / "mine.txt").write_text("not sro's")

    hostinstall.uninstall(str(root), (SIM,))
    assert not (root / SIM_CDI).exists() and (root / "cdi" / "someone-else.json").exists()
    assert "--recipe nvidia-gpu -- " in (root / "sro-runtime").read_text()
    assert json.loads((root / "hooks.d" / "sro-hook.json").read_text())["hook"]["args"][5:] == [
        "prestart",
        "--recipe",
        NV,
    ]
    manifest = rootwrites.read_manifest(str(root))
    assert manifest is not None and set(manifest.recipes) == {NV} and SIM_CDI not in manifest.files

    hostinstall.uninstall(str(root))
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == [
        "cdi",
        "cdi/someone-else.json",
        "mine.txt",
        "sro-runtime",  # the pass-through launcher, listed by no manifest
    ]
    assert hostinstall.uninstall(str(root)) is None  # nothing left to do
    assert (root / "sro-runtime").read_text() == passthrough.render("/usr/sbin/runc")


def test_a_recipe_stays_while_an_owner_still_uses_it(tmp_path: Path) -> None:
    host, root = _host(tmp_path), tmp_path / "runtime"
    settings = _settings(root)
    for owner in ("sr-a", "sr-b"):
        hostinstall.install(str(root), {SIM: None}, settings, host_root=str(host), owner=owner)
    content = _files(root)
    manifest = rootwrites.read_manifest(str(root))
    assert manifest is not None and manifest.owners == {SIM: ("sr-a", "sr-b")}
    log: list[str] = []
    hostinstall.uninstall(str(root), (SIM,), log=log.append, owner="nobody")
    hostinstall.uninstall(str(root), (SIM,), log=log.append, owner="sr-a")
    assert _files(root).keys() == content.keys() and (root / SIM_CDI).exists()
    assert any("not installed by nobody" in line for line in log), log
    assert any("stays installed: still used by sr-b" in line for line in log), log
    hostinstall.uninstall(str(root), (SIM,), owner="sr-b")
    assert _only_passthrough_left(root)
    for owner in ("sr-a", "sr-b"):
        hostinstall.install(str(root), {SIM: None}, settings, host_root=str(host), owner=owner)
    hostinstall.uninstall(str(root), owner=None)  # every claim: `uninstall --any-owner`
    assert _only_passthrough_left(root)


def test_uninstall_leaves_files_replaced_by_someone_else(tmp_path: Path) -> None:
    host, root = _host(tmp_path), tmp_path / "runtime"
    _install(root, host)
    (root / "sro-runtime").unlink()
    (root / "sro-runtime").symlink_to("/bin/true")
    log: list[str] = []
    hostinstall.uninstall(str(root), log=log.append)
    assert (root / "sro-runtime").is_symlink() and not (root / rootmanifest.MANIFEST).exists()
    assert any("left" in line and "symlink" in line for line in log)


def test_a_manifest_sro_cannot_read_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "runtime"
    root.mkdir()
    (root / "x").write_text("keep")
    bad = {"kind": rootmanifest.MANIFEST_KIND, "settings": {"hostDir": str(root)}, "files": {"../x": {}}}
    (root / rootmanifest.MANIFEST).write_text(json.dumps(bad))
    with pytest.raises(InstallError, match="not a manifest sro can read"):
        hostinstall.uninstall(str(root))
    assert (root / "x").read_text() == "keep" and (root / rootmanifest.MANIFEST).exists()


def test_missing_python_fails_before_anything_is_written(tmp_path: Path) -> None:
    host, root = _host(tmp_path), tmp_path / "runtime"
    with pytest.raises(InstallError, match=r"no Python interpreter at /usr/bin/python3\.13 .*--python"):
        _install(root, host, python="/usr/bin/python3.13")
    (host / "usr" / "bin" / "python3.11").chmod(0o644)
    with pytest.raises(InstallError, match="/usr/bin/python3"):
        _install(root, host)
    assert not root.exists() or not any(root.iterdir())


def test_python_links_resolve_inside_the_host_root(tmp_path: Path) -> None:
    host = _host(tmp_path)
    assert hostpaths.on_host(str(host), "/usr/bin/python3") == str(host / "usr" / "bin" / "python3.11")
    (host / "usr" / "bin" / "up").symlink_to("../../../../../../../../usr/bin/python3.11")
    assert hostpaths.on_host(str(host), "/usr/bin/up") == str(host / "usr" / "bin" / "python3.11")


def test_settings_and_hook_options() -> None:
    with pytest.raises(InstallError, match="--python must be an absolute path"):
        Settings(host_dir="/x", python="python3")
    with pytest.raises(InstallError, match="--mode"):
        Settings(host_dir="/x", mode="other")
    opts = hostinstall.hook_options({SIM: "/opt/sim", NV: None}, "/host-dev")
    assert opts == [
        "--recipe",
        NV,
        "--recipe",
        SIM,
        "--driver-root",
        f"{SIM}=/opt/sim",
        "--dev-root",
        "/host-dev",
    ]


def test_on_this_host_the_python_runs_the_archive_before_it_is_installed(tmp_path: Path) -> None:
    root = tmp_path / "runtime"
    m = hostinstall.install(str(root), {SIM: None}, _settings(root, python=sys.executable), with_cdi=False)
    assert set(m.files) == {bundling.ARCHIVE_NAME, "sro-runtime", "hooks.d/sro-hook.json"}
    assert not list(root.glob(".check-*"))
    fake = tmp_path / "old-python"
    fake.write_text("#!/bin/sh\necho 'SyntaxError: invalid syntax' >&2; exit 1\n")
    fake.chmod(0o755)
    with pytest.raises(InstallError, match=f"{fake} cannot run the hook .*SyntaxError"):
        hostinstall.install(str(root), {SIM: None}, _settings(root, python=str(fake)), with_cdi=False)
    assert (root / "sro-runtime").read_text().count(sys.executable) == 1  # the old install stands


def test_cli_install_uninstall_and_missing_python(tmp_path: Path) -> None:
    host, root = _host(tmp_path), tmp_path / "runtime"
    runner = CliRunner()
    args = ["runtime", "install", "--root", str(root), "--host-root", str(host), "--recipe", SIM]
    res = runner.invoke(cli, [*args, "--host-root-path", "/var/lib/sro/runtime"])
    assert res.exit_code == 0, res.output
    assert (root / "sro-runtime").exists() and (root / SIM_CDI).exists()
    res = runner.invoke(cli, [*args, "--python", "/opt/none/python3"])
    assert res.exit_code == 1 and "no Python interpreter at /opt/none/python3" in res.output
    res = runner.invoke(cli, ["runtime", "uninstall", "--root", str(root), "--owner", "other"])
    assert res.exit_code == 0 and (root / "sro-runtime").exists(), res.output
    res = runner.invoke(cli, ["runtime", "uninstall", "--root", str(root)])
    assert res.exit_code == 0, res.output
    assert _only_passthrough_left(root) and "pass-through launcher" in res.output
    res = runner.invoke(cli, ["runtime", "uninstall", "--root", str(root)])  # it stays
    assert res.exit_code == 0 and _only_passthrough_left(root), res.output
    res = runner.invoke(cli, ["runtime", "uninstall", "--root", str(root), "--purge"])
    assert res.exit_code == 0, res.output
    assert not any(root.iterdir())


def test_cli_wait_removes_what_it_installed_on_sigterm(tmp_path: Path) -> None:
    host, root, ready = _host(tmp_path), tmp_path / "runtime", tmp_path / "ready"
    argv = [sys.executable, "-m", "sro", "runtime", "install", "--root", str(root), "--host-root", str(host)]
    proc = subprocess.Popen(
        [*argv, "--recipe", SIM, "--wait", "--ready-file", str(ready), "--owner", "ds-a"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists() and (root / rootmanifest.MANIFEST).exists()
        assert '"ds-a"' in (root / rootmanifest.MANIFEST).read_text()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "SIGTERM: removing" in err and not ready.exists() and _only_passthrough_left(root)


def _run(launcher: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    return subprocess.run([str(launcher), *args], capture_output=True, text=True, timeout=30, env=env)


def test_the_last_uninstall_leaves_a_pass_through_launcher_to_runc(tmp_path: Path) -> None:
    runc = "/usr/sbin/runc"
    if not os.access(runc, os.X_OK):
        pytest.skip(f"no {runc} on this machine")
    root = tmp_path / "runtime"
    settings = _settings(root, python=sys.executable, runc=runc)
    hostinstall.install(str(root), {SIM: None}, settings, with_cdi=False)
    launcher = root / "sro-runtime"
    full = launcher.read_text()
    inode = launcher.stat().st_ino
    log: list[str] = []
    hostinstall.uninstall(str(root), log=log.append)
    assert _only_passthrough_left(root, runc) and launcher.stat().st_ino != inode  # renamed over it
    assert any("pass-through launcher" in line for line in log), log
    res = _run(launcher, "--version")
    assert res.returncode == 0 and res.stdout == _run(Path(runc), "--version").stdout, res.stderr
    assert res.stdout.startswith("runc version")

    m = hostinstall.install(str(root), {SIM: None}, settings, with_cdi=False)  # replaces it
    assert launcher.read_text() == full and "sro-runtime" in m.files
    hostinstall.uninstall(str(root), purge=True)  # the manifest's last recipe, --purge: all goes
    assert not any(root.iterdir())


def test_purge_removes_only_a_pass_through_launcher(tmp_path: Path) -> None:
    root = tmp_path / "runtime"
    root.mkdir()
    launcher = root / "sro-runtime"
    launcher.write_text('#!/bin/sh\nexec /opt/other/runtime "$@"\n')  # not sro's: stays
    log: list[str] = []
    assert hostinstall.uninstall(str(root), log=log.append, purge=True) is None
    assert launcher.exists() and any("not a launcher sro wrote" in line for line in log), log
    launcher.write_text(passthrough.render("/usr/sbin/runc"))
    hostinstall.uninstall(str(root), purge=False)
    assert launcher.exists()  # a plain uninstall never removes it
    hostinstall.uninstall(str(root), purge=True)
    assert not launcher.exists()
    assert passthrough.is_passthrough(passthrough.render("/opt/x y/runc").encode())
    assert "exec '/opt/x y/runc' \"$@\"" in passthrough.render("/opt/x y/runc")
    with pytest.raises(ValueError, match="absolute"):
        passthrough.render("runc")


def test_local_up_writes_the_pass_through_launcher_only_where_none_is(tmp_path: Path) -> None:
    launcher = tmp_path / "var" / "lib" / "sro" / "runtime" / "sro-runtime"
    assert ensure_launcher(launcher, "/usr/sbin/runc")
    assert launcher.read_text() == passthrough.render("/usr/sbin/runc")
    assert launcher.stat().st_mode & 0o7777 == 0o755
    assert sorted(p.name for p in launcher.parent.iterdir()) == ["sro-runtime"]  # no temporary left
    launcher.write_text("the real one")
    assert not ensure_launcher(launcher, "/usr/sbin/runc") and launcher.read_text() == "the real one"


# ---- the live hooks.d entry in CRI-O's directory (OpenShift) -------------------------------------


def test_crio_hooks_dir_gets_the_same_entry_and_loses_it_first(tmp_path: Path) -> None:
    host, root, crio = _host(tmp_path), tmp_path / "runtime", tmp_path / "etc-containers-oci-hooks.d"
    crio.mkdir()
    (crio / "someone-else.json").write_text("{}")
    m = _install(root, host, crio_hooks_dir=str(crio))
    live = crio / "sro-hook.json"
    assert live.read_bytes() == (root / "hooks.d" / "sro-hook.json").read_bytes()
    assert set(m.external) == {str(live)}
    doc = json.loads((root / rootmanifest.MANIFEST).read_text())
    assert doc["settings"]["crioHooksDir"] == str(crio) and set(doc["external"]) == {str(live)}
    # a second recipe rewrites it for both; dropping one rewrites it again
    _install(root, host, {NV: None}, crio_hooks_dir=str(crio))
    assert "nvidia-gpu" in live.read_text() and "simulated-gpu" in live.read_text()
    hostinstall.uninstall(str(root), (NV,))
    assert "nvidia-gpu" not in live.read_text()
    log: list[str] = []
    hostinstall.uninstall(str(root), (SIM,), log=log.append)
    assert not live.exists() and (crio / "someone-else.json").exists() and crio.is_dir()
    assert log.index(f"removed {live}") < min(
        i for i, line in enumerate(log) if line.startswith(f"removed {root}")
    )


def test_crio_hooks_dir_entry_goes_when_the_setting_does(tmp_path: Path) -> None:
    host, root, crio = _host(tmp_path), tmp_path / "runtime", tmp_path / "hooks.d"
    _install(root, host, crio_hooks_dir=str(crio))
    assert (crio / "sro-hook.json").exists()
    _install(root, host)
    assert not (crio / "sro-hook.json").exists()


def test_crio_hooks_dir_entry_changed_by_someone_is_left(tmp_path: Path) -> None:
    host, root, crio = _host(tmp_path), tmp_path / "runtime", tmp_path / "hooks.d"
    _install(root, host, crio_hooks_dir=str(crio))
    (crio / "sro-hook.json").write_text('{"theirs": true}')
    log: list[str] = []
    hostinstall.uninstall(str(root), log=log.append)
    assert (crio / "sro-hook.json").read_text() == '{"theirs": true}'
    assert any("changed since sro wrote it" in line for line in log)


@pytest.mark.parametrize(
    ("layout", "version"),
    [
        ({"usr/bin/python3": "->python3.9", "usr/bin/python3.9": ""}, (3, 9)),  # RHCOS 9
        ({"usr/libexec/platform-python": "", "usr/lib64/python3.6/os.py": ""}, None),  # RHCOS 8: no python3
        ({"usr/bin/python3": "", "usr/lib64/python3.9/os.py": ""}, (3, 9)),
        ({"usr/bin/python3": "", "usr/lib/python3.11/os.py": "", "usr/lib64/python3.9/os.py": ""}, None),
        ({"usr/bin/python3": "->python3.12", "usr/bin/python3.12": ""}, (3, 12)),
    ],
)
def test_host_python_version_from_files(
    tmp_path: Path, layout: dict[str, str], version: tuple[int, int] | None
) -> None:
    for rel, what in layout.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if what.startswith("->"):
            p.symlink_to(what[2:])
        else:
            p.write_text(what)
    assert hostpython.host_python_version(str(tmp_path), "/usr/bin/python3") == version


@pytest.mark.parametrize("python", ["python3.9", None])
def test_no_live_entry_for_an_interpreter_that_cannot_run_the_hook(
    tmp_path: Path, python: str | None
) -> None:
    """RHCOS: python 3.9 (RHEL 9-based) or none that says its version: nothing at all is written."""
    host, root, crio = _host(tmp_path), tmp_path / "runtime", tmp_path / "hooks.d"
    (host / "usr" / "bin" / "python3").unlink()
    if python:
        (host / "usr" / "bin" / python).write_text("")
        (host / "usr" / "bin" / python).chmod(0o755)
        (host / "usr" / "bin" / "python3").symlink_to(python)
    else:
        (host / "usr" / "bin" / "python3").write_text("")
        (host / "usr" / "bin" / "python3").chmod(0o755)
    (host / "usr" / "bin" / "python3.11").unlink()
    with pytest.raises(InstallError, match="every container on this node") as e:
        _install(root, host, crio_hooks_dir=str(crio))
    assert "nothing was written" in str(e.value) and ("3.9" in str(e.value)) == bool(python)
    assert not crio.exists() and not (root / rootmanifest.MANIFEST).exists()
    # without the live entry the same node installs (only the handler's launcher uses the python)
    _install(root, host)
    assert (root / rootmanifest.MANIFEST).exists()


def test_crio_hooks_dir_must_be_absolute() -> None:
    with pytest.raises(InstallError, match="crio-hooks-dir"):
        Settings(host_dir="/x", crio_hooks_dir="etc/containers")


def test_manifest_refuses_an_external_file_that_is_not_a_hooks_entry(tmp_path: Path) -> None:
    host, root, crio = _host(tmp_path), tmp_path / "runtime", tmp_path / "hooks.d"
    _install(root, host, crio_hooks_dir=str(crio))
    doc = json.loads((root / rootmanifest.MANIFEST).read_text())
    doc["external"] = {"/etc/passwd": {"sha256": "x", "mode": "0644"}}
    (root / rootmanifest.MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(InstallError, match="not a manifest sro can read"):
        hostinstall.uninstall(str(root))
    assert Path("/etc/passwd").exists()


def test_crio_hooks_dir_may_be_the_roots_own(tmp_path: Path) -> None:
    """With a MachineConfig pointing CRI-O at sro's hooks.d, --crio-hooks-dir names it: the entry is
    written once, still guarded by the interpreter check, and removed cleanly."""
    host, root = _host(tmp_path), tmp_path / "runtime"
    own = root / "hooks.d"
    m = _install(root, host, crio_hooks_dir=str(own))
    assert set(m.external) == {str(own / "sro-hook.json")} and (own / "sro-hook.json").exists()
    log: list[str] = []
    hostinstall.uninstall(str(root), log=log.append)
    assert not (own / "sro-hook.json").exists() and not any(line.startswith(f"left {own}") for line in log)
