"""A state's objects are rendered once per distinct input and copied out: the same objects as a fresh
render, never shared between callers, and never another input's."""

from __future__ import annotations

from typing import Any

from sro.api.names import DEVICE_PLUGIN
from sro.api.specparsing import parse_spec
from sro.operator import rendering
from sro.operator.admission import resolve_recipe
from sro.operator.rendering import Context, render_state

SR = "gpus"


def context(spec: dict[str, Any] | None = None) -> Context:
    parsed = parse_spec(SR, spec or {"recipe": "simulated-gpu"})
    return Context(SR, "uid-gpus", parsed, resolve_recipe(parsed, None), "sro-system", "localhost/sro:test")


def plugin(ctx: Context, **values: Any) -> list[dict[str, Any]]:
    return render_state(ctx, DEVICE_PLUGIN, "device-plugin", name="sro-gpus-device-plugin", **values)


def test_a_second_render_is_the_same_objects_and_its_own_copy() -> None:
    rendering._RENDERED.clear()
    ctx = context()
    first = plugin(ctx, plugin_config="version: v1\nflags: {migStrategy: none}\n", cdi_nodes=["a"])
    assert len(rendering._RENDERED) == 1
    second = plugin(ctx, plugin_config="version: v1\nflags: {migStrategy: none}\n", cdi_nodes=["a"])
    assert second == first and len(rendering._RENDERED) == 1
    second[0]["metadata"]["name"] = "changed"
    second[-1]["spec"]["template"]["spec"]["containers"].clear()
    third = plugin(ctx, plugin_config="version: v1\nflags: {migStrategy: none}\n", cdi_nodes=["a"])
    assert third == first  # what a caller did to its copy reaches nobody else


def test_another_input_is_rendered_for_itself() -> None:
    rendering._RENDERED.clear()
    ctx = context()
    one = plugin(ctx, plugin_config="version: v1\n", cdi_nodes=["a"])
    two = plugin(ctx, plugin_config="version: v1\n", cdi_nodes=["a", "b"])
    other_image = plugin(
        context({"recipe": "simulated-gpu", "devicePlugin": {"image": "r/p:2"}}), cdi_nodes=["a"]
    )
    assert one != two and len(rendering._RENDERED) == 3
    images = {
        c["image"]
        for d in other_image
        if d["kind"] == "DaemonSet"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"r/p:2"}


def test_keys_tell_apart_what_a_template_could_print_differently() -> None:
    key = rendering._render_key
    assert key("c", "s", None, {"v": [1, 2]}) != key("c", "s", None, {"v": (1, 2)})
    assert key("c", "s", None, {"v": {"a": 1, "b": 2}}) != key("c", "s", None, {"v": {"b": 2, "a": 1}})
    assert key("c", "s", None, {"v": True}) != key("c", "s", None, {"v": 1})
    assert key("c", "s", None, {"v": 1}) != key("c", "s", None, {"v": 1.0})
    assert key("c", "s", {"0500_x.yaml": "a"}, {}) != key("c", "s", None, {})
    assert key("c", "s", None, {"v": object()}) is None  # not plain data: rendered each time, not cached
