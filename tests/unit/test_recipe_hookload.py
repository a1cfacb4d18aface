"""The OCI hook's loader of an installed recipe file (`hookrecipes.load_file`).

It runs on every container start, so it must refuse exactly what `recipe_from_dict` refuses (one list
of bad documents, tests/unit/test_recipe_file.py's BAD), with one line naming the file and the field,
never a traceback; what it accepts must be the very recipe the API parses; and it must stay lean:
no `re`, `typing`, `dataclasses` or `json` imported by loading a file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sro.api.recipes import BUILTIN, recipe_from_dict, recipe_to_dict
from sro.node.runtime import hookrecipes
from sro.node.runtime.specedits import package_root
from tests.unit.test_recipe_file import BAD, EXAMPLES
from tests.unit.test_runtime_records import HEAVY


def _write(tmp_path: Path, doc: Any, name: str = "recipe.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize(("doc", "field", "also"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_the_hook_refuses_what_the_api_refuses(
    tmp_path: Path, doc: dict[str, Any], field: str, also: str
) -> None:
    path = _write(tmp_path, doc)
    with pytest.raises(ValueError) as e:
        hookrecipes.load_file(path)
    message = str(e.value)
    assert message.startswith(f"{path}: {field}: " if field else f"{path}: "), message
    assert also in message and "\n" not in message


@pytest.mark.parametrize(
    "recipe", [*BUILTIN.values(), *(recipe_from_dict(d) for d in EXAMPLES.values())], ids=lambda r: r.name
)
def test_an_installed_recipe_loads_as_the_api_parses_it(tmp_path: Path, recipe: Any) -> None:
    path = _write(tmp_path, recipe_to_dict(recipe))
    lean = hookrecipes.load_file(path)
    for name in hookrecipes.HookRecipe.__match_args__:  # type: ignore[attr-defined]
        assert getattr(lean, name) == getattr(recipe, name), name
    if recipe.name in hookrecipes.BUILTIN:
        assert lean == hookrecipes.BUILTIN[recipe.name]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_an_admins_document_loads_too(tmp_path: Path, name: str) -> None:
    lean = hookrecipes.load_file(_write(tmp_path, EXAMPLES[name]))
    assert lean.name == EXAMPLES[name]["name"] and lean.simulated


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b"[1, 2]", "a recipe must be a mapping, got list"),
        (b"null", "a recipe must be a mapping, got NoneType"),
        (b" " * ((1 << 20) + 1), "not a regular file of at most"),
    ],
    ids=["truncated", "binary", "list", "null", "huge"],
)
def test_a_file_that_is_no_recipe_is_one_line(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "recipe.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^{path}: ") as e:
        hookrecipes.load_file(str(path))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_missing_file_or_a_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"^{tmp_path}/gone.json: cannot read the recipe: No such file"):
        hookrecipes.load_file(str(tmp_path / "gone.json"))
    with pytest.raises(ValueError, match=f"^{tmp_path}: "):
        hookrecipes.load_file(str(tmp_path))


def test_from_doc_names_the_field_without_a_path() -> None:
    with pytest.raises(ValueError, match=r"^companionNodes\[0\]: "):
        hookrecipes.from_doc(EXAMPLES["fpga"] | {"companionNodes": ["/dev/r{index+5000}"]})


def test_loading_recipe_files_keeps_the_hook_lean(tmp_path: Path) -> None:
    paths = [_write(tmp_path, recipe_to_dict(recipe_from_dict(d)), f"{n}.json") for n, d in EXAMPLES.items()]
    code = (
        f"import sys; sys.path.insert(0, {package_root()!r});"
        "from sro.node.runtime import hook, hookrecipes;"
        f"[hookrecipes.load_file(p) for p in {paths!r}];"
        "print(' '.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "sro.api.recipecheck" in loaded
    heavy = {*HEAVY, "json", "sro.api.recipes"}
    assert not heavy & loaded, sorted(heavy & loaded)
