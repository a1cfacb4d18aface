"""Spec strings enter the rendered objects as data, never as YAML text (issue 21 §2).

Every string field of a spec (and of a custom recipe) is fed a value with newlines, `: `, braces,
`#`, quotes and `{{ }}`; the objects rendered from it must have exactly the keys of the objects
rendered from plain values (no `hostPID`, `hostNetwork` or other service account sneaks in), and
each value must arrive unchanged where it belongs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from sro.api.names import DEVICE_PLUGIN_VALIDATION, DRIVER_VALIDATION
from sro.api.specparsing import parse_spec
from sro.operator.admission import resolve_recipe
from sro.operator.reconcile import reconcile
from sro.operator.rendering import Context, plain_scalar
from sro.operator.states import KERNEL_LABEL, OS_ID_LABEL
from tests.unit.operator.test_reconcile import IMAGE, NOW, NS, SR, node, observed, sr, state

STATES = ("driver", "driverValidation", "runtime", "devicePlugin", "devicePluginValidation", "monitoring")


def nasty(tag: str) -> str:
    return (
        f"{tag}:x\nhostPID: true\nhostNetwork: true\nserviceAccountName: evil\n"
        f"  - \"q\" 's' # c: {{a}} [b] {{{{ sr }}}} {{% if 1 %}}\n: ]"
    )


def plain(tag: str) -> str:
    return f"plain-{tag}"


def spec_with(value: Any, recipe: str) -> dict[str, Any]:
    """A spec whose every string field is `value(<field path>)`."""
    spec: dict[str, Any] = {"recipe": recipe, "nodeSelector": {"pool": value("nodeSelector.pool")}}
    for st in STATES:
        spec[st] = {
            "enabled": True,
            "image": value(f"{st}.image"),
            "args": [value(f"{st}.args0"), value(f"{st}.args1")],
            "env": [{"name": "E1", "value": value(f"{st}.env")}],
        }
    spec["driver"]["version"] = value("driver.version")
    spec["devicePlugin"]["config"] = value("devicePlugin.config") + "\n"
    spec["devicePluginValidation"]["cudaSample"] = value("devicePluginValidation.cudaSample")
    spec["priorityClassName"] = "high"  # a name the schema checks elsewhere; set as data by decorate
    if recipe == "nvidia-gpu":
        spec["driver"]["imageTemplate"] = "reg/driver:{version}-{os_id}"
    else:
        spec["driver"]["devicesConfig"] = value("driver.devicesConfig")
    return spec


def custom_recipe(value: Any) -> dict[str, Any]:
    return {
        "name": "fancy-gpu",
        "resource": "fancy.example.com/gpu",  # a nasty one is refused: not an extended resource name
        "pciVendor": "1234",
        "visibleDevicesEnv": "FANCY_VISIBLE_DEVICES",
        "deviceNode": "/dev/fancy{index}",
        "driverRoot": "/run/" + value("recipe.driverRoot"),
    }


def objects(value: Any, recipe: str) -> list[dict[str, Any]]:
    """Every object the reconcile applies, plus each validation pod, for a spec of `value`s."""
    spec = spec_with(value, recipe)
    custom = None
    if recipe == "fancy-gpu":
        spec["recipeConfigMap"] = "fancy"
        custom = custom_recipe(value)
    labels = {"pool": value("nodeSelector.pool"), OS_ID_LABEL: "debian"}
    the_sr = sr(spec)
    plan = reconcile(observed([node("a", **labels)], the_sr=the_sr, custom_recipe=custom), NS, NOW)
    assert plan.deployable, plan.status["conditions"]
    parsed = parse_spec(SR, spec)
    ctx = Context(SR, the_sr.uid, parsed, resolve_recipe(parsed, custom), NS, IMAGE)
    pods = [state(s).pod(ctx, "a", "inputs") for s in (DRIVER_VALIDATION, DEVICE_PLUGIN_VALIDATION)]
    return [*plan.apply, *pods]


def paths(obj: Any, at: str = "") -> Iterator[str]:
    """Every key path of `obj` (list items by index): its shape, without the values."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = "<value>" if "plain-" in k or "hostPID: true" in k else k  # a resource name as a key
            yield f"{at}.{key}"
            yield from paths(v, f"{at}.{key}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield f"{at}[{i}]"
            yield from paths(v, f"{at}[{i}]")


def strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"] if obj["kind"] != "Pod" else obj["spec"]
    return spec


@pytest.mark.parametrize("recipe", ["simulated-gpu", "nvidia-gpu", "fancy-gpu"])
def test_spec_strings_arrive_as_data_in_every_field(recipe: str) -> None:
    good, bad = objects(plain, recipe), objects(nasty, recipe)
    assert [o["kind"] for o in good] == [o["kind"] for o in bad]
    for g, b in zip(good, bad, strict=True):
        # the same shape: no key added or lost anywhere (hostPID, hostNetwork, a second document...)
        assert sorted(paths(g)) == sorted(paths(b)), (b["kind"], b["metadata"]["name"])
        if b["kind"] in ("DaemonSet", "Pod"):
            ps = pod_spec(b)
            assert "hostPID" not in ps or ps["hostPID"] is False
            assert "hostNetwork" not in ps
            assert ps["serviceAccountName"] == pod_spec(g)["serviceAccountName"]
    # every value where it belongs, unchanged
    by_state: dict[str, list[dict[str, Any]]] = {}
    for b in bad:
        by_state.setdefault(b["metadata"]["labels"]["sro.dev/state"], []).append(b)
    field_of = {
        "driver": "driver",
        "driver-validation": "driverValidation",
        "runtime": "runtime",
        "device-plugin": "devicePlugin",
        "device-plugin-validation": "devicePluginValidation",
        "monitoring": "monitoring",
    }
    for st, fld in field_of.items():
        workloads = [o for o in by_state[st] if o["kind"] in ("DaemonSet", "Pod")]
        assert workloads, st
        for w in workloads:
            c = pod_spec(w)["containers"][0]
            if st == "driver" and recipe == "nvidia-gpu":
                assert c["image"] == "reg/driver:" + nasty("driver.version") + "-debian"
            else:
                assert c["image"] == nasty(f"{fld}.image"), st
            assert c["args"][-2:] == [nasty(f"{fld}.args0"), nasty(f"{fld}.args1")]
            assert {"name": "E1", "value": nasty(f"{fld}.env")} in c["env"]
    cm = next(o for o in by_state["device-plugin"] if o["kind"] == "ConfigMap")
    assert cm["data"]["config.yaml"] == nasty("devicePlugin.config") + "\n"
    assert sorted(cm["data"]) == ["config.yaml", "runtimes.yaml"]  # the operator's own, beside it
    if recipe == "simulated-gpu":
        driver = next(o for o in by_state["driver"] if o["kind"] == "DaemonSet")
        assert "--driver-version=" + nasty("driver.version") in pod_spec(driver)["containers"][0]["command"]
        dcm = next(o for o in by_state["driver"] if o["kind"] == "ConfigMap")
        assert nasty("driver.devicesConfig") + "\n" in dcm["data"].values()
    if recipe == "nvidia-gpu":
        workload = next(o for o in by_state["device-plugin-validation"] if o["kind"] == "Pod")
        command = pod_spec(workload)["containers"][0]["command"]
        assert "--cuda-sample=" + nasty("devicePluginValidation.cudaSample") in command
    if recipe == "fancy-gpu":
        resource = "fancy.example.com/gpu"
        workload = next(o for o in by_state["device-plugin-validation"] if o["kind"] == "Pod")
        assert pod_spec(workload)["containers"][0]["resources"]["limits"][resource] == "1"
        root = "/run/" + nasty("recipe.driverRoot")
        every = {s for o in bad for s in strings(o)}
        assert root in every and any(s.endswith(root) for s in every if s.startswith("/host"))
        # the admitted recipe goes to the agents as JSON, the value in it whole
        (shipped,) = [o for o in bad if o["kind"] == "ConfigMap" and "recipe.json" in o.get("data", {})]
        assert json.loads(shipped["data"]["recipe.json"])["driverRoot"] == root
        bad = [o for o in bad if o is not shipped]
    # nothing of a value leaked as a piece of text anywhere: each string that holds a piece of one
    # holds it whole
    every = [s for o in bad for s in strings(o)]
    for s in every:
        if "hostPID: true" in s:
            assert s.count("hostPID: true") == 1 and s.count(nasty("")[1:]) == 1, s
    assert nasty("nodeSelector.pool") in every  # the first state's node affinity, as a value


def test_plain_values_are_rendered_as_before() -> None:
    """Names and paths still go in as text (templates compare some, e.g. driver_root != "/")."""
    for value in (
        "localhost/sro:test",
        "/",
        "/run/nvidia",
        "registry.example/nvidia/driver:550.54-debian12",
        "550.54.14",
    ):
        assert plain_scalar(value), value
    for value in (
        "true",
        "1.0",
        "550.54",
        "123",
        "null",
        "a: b",
        "a\nb",
        "#x",
        "{x}",
        "'x'",
        "x y",
        "~",
        "2001-12-14",
        "550.54",
    ):
        assert not plain_scalar(value), value


def test_the_kernel_label_is_not_a_spec_value() -> None:
    """Sanity: the driver DaemonSet name comes from the kernel label through slug(), never raw."""
    plan = reconcile(observed([node("a", kernel="6.1\nhostPID: true")]), NS, NOW)
    names = [o["metadata"]["name"] for o in plan.apply]
    assert all("\n" not in n for n in names) and any(KERNEL_LABEL in str(o) for o in plan.apply)


def test_a_newline_in_the_device_plugin_image_adds_nothing_to_its_pod() -> None:
    """The issue's example: an image that, pasted as text, would give the plugin's pod hostPID,
    hostNetwork and another service account."""
    image = (
        "img:1\n      hostPID: true\n      hostNetwork: true\n      serviceAccountName: default\n"
        "      initContainers:\n        - name: y\n          image: img:1"
    )
    spec = {"recipe": "simulated-gpu", "devicePlugin": {"image": image}}
    plan = reconcile(observed([node("a")], the_sr=sr(spec)), NS, NOW)
    ds = next(
        o
        for o in plan.apply
        if o["kind"] == "DaemonSet" and o["metadata"]["labels"]["sro.dev/state"] == "device-plugin"
    )
    ps = pod_spec(ds)
    assert "hostPID" not in ps and "hostNetwork" not in ps and ps["serviceAccountName"] == "sro-device-plugin"
    assert ps["containers"][0]["image"] == image
