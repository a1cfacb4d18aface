"""The lean records behave like the frozen dataclasses mypy checks them as; the hook stays lean."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from sro.api import recipes
from sro.node.runtime import hookrecipes, records
from sro.node.runtime.inventory import DeviceNode, DriverInventory, FileMount, InjectionPlan
from sro.node.runtime.specedits import HookCommand, package_root

TYPE_CHECKING = False
if TYPE_CHECKING:  # how the runtime modules use records: mypy sees dataclasses
    from dataclasses import dataclass as lean_dataclass
    from dataclasses import field as lean_field
else:
    lean_dataclass, lean_field = records.dataclass, records.field


@lean_dataclass(frozen=True)
class Lean:
    a: int
    b: str = "x"
    c: dict[str, int] = lean_field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Real:
    a: int
    b: str = "x"
    c: dict[str, int] = dataclasses.field(default_factory=dict)


def test_construction_defaults_and_factories_match_dataclasses() -> None:
    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1,), {}),
        ((1, "y"), {}),
        ((), {"a": 2, "c": {"k": 1}}),
        ((3,), {"b": "z"}),
    ]
    for args, kwargs in cases:
        lean, real = Lean(*args, **kwargs), Real(*args, **kwargs)
        assert (lean.a, lean.b, lean.c) == (real.a, real.b, real.c)
        assert repr(lean).replace("Lean", "Real") == repr(real)
    assert Lean(1).c is not Lean(1).c  # a fresh default per instance
    assert Lean.__match_args__ == Real.__match_args__  # type: ignore[attr-defined]


def test_equality_and_hash_are_by_fields_and_class() -> None:
    assert Lean(1, "y") == Lean(1, "y") and Lean(1) != Lean(2)
    assert hash(DeviceNode("/dev/a", "/h/a", 1, 2)) == hash(DeviceNode("/dev/a", "/h/a", 1, 2))
    assert len({FileMount("/a", "/b"), FileMount("/a", "/b"), FileMount("/a", "/c")}) == 2
    assert Lean(1) != Real(1)  # type: ignore[comparison-overlap]
    assert InjectionPlan() == InjectionPlan(device_nodes=(), mounts=(), ld_folders=())


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "missing required argument: 'a'"),
        ((1,), {"d": 1}, "unexpected keyword argument 'd'"),
        ((1,), {"a": 2}, "multiple values for argument 'a'"),
        ((1, "b", {}, 4), {}, "positional arguments"),
    ],
)
def test_bad_arguments_raise_type_error(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        Lean(*args, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Real(*args, **kwargs)  # type: ignore[arg-type]


def test_records_are_frozen() -> None:
    node = DeviceNode("/dev/a", "/h/a", 1, 2)
    with pytest.raises(AttributeError):
        node.major = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del node.minor  # type: ignore[misc]
    assert node.major == 3 - 2


def test_post_init_runs() -> None:
    with pytest.raises(ValueError, match="absolute"):
        HookCommand("python")
    assert HookCommand("/usr/bin/python3").root == package_root()


def test_non_default_after_default_is_refused() -> None:
    with pytest.raises(TypeError, match="non-default argument"):

        @lean_dataclass(frozen=True)
        class Bad:
            a: int = 1
            b: int  # type: ignore[misc]


def test_builtin_hook_recipes_equal_the_api_recipes() -> None:
    """hookrecipes is a dataclass-free copy of sro.api.recipes' built-ins: every field must agree."""
    assert set(hookrecipes.BUILTIN) == set(recipes.BUILTIN)
    names = [f.name for f in dataclasses.fields(recipes.Recipe)]
    assert list(hookrecipes.HookRecipe.__match_args__) == names  # type: ignore[attr-defined]
    for name, api in recipes.BUILTIN.items():
        lean = hookrecipes.BUILTIN[name]
        for f in names:
            assert getattr(lean, f) == getattr(api, f), f"{name}.{f}"
    assert hookrecipes.SIMULATED_DRIVER_ROOT == recipes.SIMULATED_DRIVER_ROOT
    assert hookrecipes.SIMULATED_DEVICE_LIST == recipes.SIMULATED_DEVICE_LIST


def test_inventory_with_mappings_compares() -> None:
    a = DriverInventory("r", (), (), libraries={"c": (FileMount("/a", "/a"),)})
    assert a == DriverInventory("r", (), (), libraries={"c": (FileMount("/a", "/a"),)})


HEAVY = (
    "dataclasses",
    "typing",
    "inspect",
    "enum",
    "re",
    "fnmatch",
    "glob",
    "copy",
    "contextlib",
    "signal",
    "collections",
    "json",
    "sro.api.recipes",
    "subprocess",
    "ast",
)


@pytest.mark.parametrize(
    "modules", ["hook", "hook inject driverfiles activation inventory hookrecipes", "hook wrapper specedits"]
)
def test_hook_import_graph_stays_lean(modules: str) -> None:
    """What the hook imports: none of the modules that cost it milliseconds at every container start."""
    code = (
        f"import sys; sys.path.insert(0, {package_root()!r});"
        f"from sro.node.runtime import {', '.join(modules.split())};"
        "hook.HookArgs('prestart').recipes;"
        "print(' '.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "sro.node.runtime.hook" in loaded
    assert not set(HEAVY) & loaded, sorted(set(HEAVY) & loaded)


@pytest.mark.parametrize(
    "doc",
    [
        {
            "ociVersion": "1.0.2",
            "process": {"env": ["A=é", 'B=\u2028"\\'], "args": ["true"]},
            "n": [1, 2.5, -3e20],
        },
        {"hooks": {"prestart": [{"path": "/x", "args": [], "timeout": 30}]}, "b": True, "c": None, "d": {}},
        [],
        {"k": float("inf")},
    ],
)
def test_lean_json_writer_matches_json(doc: Any) -> None:
    import json

    from sro.node.runtime import hook

    assert hook.dumps(doc) == json.dumps(doc)
    with pytest.raises(TypeError, match="not JSON serializable"):
        hook.dumps({"x": object()})


def test_hook_default_ldconfig_is_injects() -> None:
    from sro.node.runtime import hook, inject

    assert hook.HookArgs("prestart").ldconfig == inject.Options().ldconfig == hook.DEFAULT_LDCONFIG
    assert hook.parse_args(["prestart", "--ldconfig", "none"]).ldconfig is None
    assert hook.parse_args(["prestart", "--ldconfig", "/x/ldconfig"]).ldconfig == "/x/ldconfig"


def test_hook_debug_option_reaches_inject() -> None:
    from sro.node.runtime import hook

    assert hook.parse_args(["prestart", "--debug", "true"]).opts.debug is True
    assert hook.parse_args(["prestart"]).opts.debug is False
