"""The hook zipapp: exactly the modules the hook and the wrapper need, runnable with `python -I -S`
from a directory where no sro is importable, with bytecode that zipimport takes as it is."""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from sro.node.runtime import bundling

PYTHON = sys.executable  # the venv's: with -I -S it sees no site-packages, so no sro but the archive's
HEAVY = ("click", "yaml", "grpc", "lightkube", "kopf", "jinja2", "rich", "prometheus_client")


def _imports(tree: ast.Module) -> set[str]:
    """Modules imported at run time: `if TYPE_CHECKING:` blocks are left out, function bodies not."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if (
                isinstance(node, ast.If)
                and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"
            ):
                visit(node.orelse)
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Import):
                    found.update(a.name for a in sub.names)
                elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                    found.add(sub.module)
                    found.update(f"{sub.module}.{a.name}" for a in sub.names)

    visit(tree.body)
    return found


def _module_names() -> set[str]:
    return {bundling._module_name(m) for m in bundling.MODULES}


def test_modules_are_closed_under_their_imports_and_stdlib_only() -> None:
    names = _module_names()
    for rel in bundling.MODULES:
        tree = ast.parse((resources.files("sro") / rel).read_bytes())
        for imported in _imports(tree):
            top = imported.split(".")[0]
            if top == "sro":
                # `from sro.x import name` is either the module sro.x.name or a name in sro.x
                assert imported in names or imported.rsplit(".", 1)[0] in names, f"{rel} imports {imported}"
                *package, last = imported.split(".")[1:] or [""]
                is_module = bool(last) and resources.files("sro").joinpath(*package, f"{last}.py").is_file()
                assert imported in names or not is_module, f"{rel} imports the module {imported}"
            else:
                assert top in sys.stdlib_module_names, f"{rel} imports {imported} (not the stdlib)"
                assert top not in HEAVY


def test_build_is_deterministic_and_holds_source_and_bytecode() -> None:
    data = bundling.build("/var/lib/sro/runtime/sro-hook.pyz")
    assert data == bundling.build("/var/lib/sro/runtime/sro-hook.pyz")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
        assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
        for rel in bundling.MODULES:
            assert f"sro/{rel}" in names and f"sro/{rel}c" in names
        assert "__main__.py" in names
        assert len(names) == 2 * len(bundling.MODULES) + 2
        pyc = zf.read("sro/node/runtime/hook.pyc")
    assert pyc[:4] == __import__("importlib.util").util.MAGIC_NUMBER
    assert int.from_bytes(pyc[4:8], "little") == 0b01  # unchecked hash: no source comparison
    with pytest.raises(ValueError, match="absolute"):
        bundling.build("sro-hook.pyz")


def _archive(tmp_path: Path, data: bytes | None = None) -> Path:
    path = tmp_path / "rt" / bundling.ARCHIVE_NAME
    path.parent.mkdir()
    path.write_bytes(data if data is not None else bundling.build(str(path)))
    return path


def _isolated(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-I", "-S", *args], cwd=cwd, capture_output=True, text=True, input=stdin, timeout=60, env={}
    )


def test_check_runs_isolated_from_the_archive_alone(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    assert _isolated("-c", "import sro", cwd=tmp_path).returncode != 0  # nothing else to import sro from
    out = _isolated(str(archive), "check", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    ok, tag, _version, where = out.stdout.split()
    assert ok == "ok" and tag == bundling.CACHE_TAG and where.startswith(f"{archive}/sro/__init__.py")
    assert _isolated(str(archive), cwd=tmp_path).returncode == 2  # usage


def test_hook_from_the_archive_lets_a_container_asking_nothing_through(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}, "process": {"env": ["A=1"]}}))
    state = json.dumps({"bundle": str(bundle), "pid": 1})
    from sro.node.runtime.specedits import bootstrap

    boot = bootstrap("sro.node.runtime.hook", str(archive))
    out = _isolated(
        "-X", "importtime", "-c", boot, "prestart", "--recipe", "simulated-gpu", cwd=tmp_path, stdin=state
    )
    assert out.returncode == 0, out.stderr
    imported = {
        line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")
    }
    assert "sro.node.runtime.hook" in imported
    assert not {m.split(".")[0] for m in imported} & set(HEAVY)
    via_main = _isolated(str(archive), "hook", "prestart", cwd=tmp_path, stdin=state)
    assert via_main.returncode == 0, via_main.stderr
    bad = _isolated(str(archive), "hook", "prestart", cwd=tmp_path, stdin="{")
    assert bad.returncode == 1 and "sro hook: state JSON on stdin" in bad.stderr


def test_bytecode_of_another_python_falls_back_to_the_source(tmp_path: Path) -> None:
    good = bundling.build(str(tmp_path / "rt" / bundling.ARCHIVE_NAME))
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"\x00\x00" + data[2:] if info.filename.endswith(".pyc") else data)
    archive = _archive(tmp_path, buf.getvalue())
    out = _isolated(str(archive), "check", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
