"""Data sro does not own never breaks a pass: garbage is handled as absent, said once.

Node labels and annotations (anyone who may patch a node writes them), NodeFeatures, ConfigMaps,
pod termination messages and the holder scan's output are parsed here with generated input
(Hypothesis, derandomized so CI sees the same examples every run): nothing but each parser's own
typed error escapes, and a pathological input of a few bytes does not grow into megabytes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sro.api import holders
from sro.api.names import (
    DRIVER,
    driver_revision_label,
    reached_annotation,
    state_label,
    upgrade_annotation,
    upgrade_state_label,
    validated_label,
)
from sro.api.recipes import RecipeError, recipe_from_dict
from sro.api.specialresource import SpecError
from sro.api.specparsing import parse_spec
from sro.api.yamltext import MAX_DEPTH, load_untrusted
from sro.nfd.nodefeatures import from_spec, merge
from sro.nfd.ownership import decode_owned
from sro.operator import unreadable
from sro.operator.reached import format_reached, parse_reached
from sro.operator.reconcile import reconcile
from sro.operator.upgrade.adapter import release_upgrade
from sro.operator.upgrade.record import UPGRADE_STATES, Record
from sro.operator.upgrade.scan import read_scan
from tests.unit.operator.test_reconcile import NOW, NS, SR, node, observed, sr

SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

DEEP = ["[" * 5000, "{" * 5000, '{"a":' * 5000, "[" * 5000 + "]" * 5000]
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)  # nine lines; walked, 10**9 strings
PATHOLOGICAL = [*DEEP, LAUGHS, "\x00" * 1000, "\ud800", "1" * 5000, "1e99999", '"' + "\\u0000" * 500 + '"']
IDS = [
    "deep-list",
    "deep-map",
    "deep-json-map",
    "deep-balanced",
    "laughs",
    "nuls",
    "surrogate",
    "digits",
    "1e99999",
    "escapes",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
texts = st.text(max_size=200) | st.sampled_from(PATHOLOGICAL)


def bounded(fn: Callable[[], Any], limit: int = 16 << 20) -> Any:
    """fn(), with its peak allocation checked under `limit` bytes."""
    tracemalloc.start()
    try:
        return fn()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < limit, f"peak {peak} bytes"


# ---- the upgrade record (sro.dev/<sr>.upgrade on a node) -------------------------------------------
@pytest.mark.parametrize("text", PATHOLOGICAL, ids=IDS)
def test_a_pathological_upgrade_record_is_absent(text: str) -> None:
    assert bounded(lambda: Record.from_json(text)) is None


def test_an_unreadable_upgrade_record_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    unreadable.forget()
    with caplog.at_level(logging.WARNING, logger="sro.operator.unreadable"):
        for _ in range(5):
            assert Record.from_json("[" * 5000, "node a") is None
    assert len(caplog.records) == 1 and "node a" in caplog.records[0].getMessage()
    assert "RecursionError" in caplog.records[0].getMessage()


@SETTINGS
@given(texts)
def test_any_upgrade_record_text_reads_or_is_absent(text: str) -> None:
    rec = Record.from_json(text)
    assert rec is None or rec.state in UPGRADE_STATES


@SETTINGS
@given(json_values, st.sampled_from(UPGRADE_STATES))
def test_any_json_with_a_state_reads_or_is_absent(doc: Any, state: str) -> None:
    if isinstance(doc, dict):
        doc["state"] = state
    rec = Record.from_json(json.dumps(doc))
    assert rec is None or rec == Record.from_json(rec.to_json())


def test_a_node_with_a_garbage_record_is_released_and_reconciled() -> None:
    """Before: RecursionError in every pass and in the finalizer's release; the node stayed cordoned."""
    garbage = node("a")
    garbage = type(garbage)(
        name="a",
        labels=garbage.labels,
        annotations={upgrade_annotation(SR): "[" * 5000},
        unschedulable=True,
    )
    patch = release_upgrade(SR, garbage)
    assert patch.annotations == {upgrade_annotation(SR): None}
    plan = reconcile(observed([garbage]), NS, NOW)
    assert plan.deployable


# ---- the reached annotation, the NodeFeatureRule ownership record ----------------------------------
@SETTINGS
@given(texts)
def test_any_reached_annotation_reads(text: str) -> None:
    reached = parse_reached(text)
    assert parse_reached(format_reached(reached)) == reached


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=IDS)
def test_a_pathological_ownership_record_owns_nothing(text: str) -> None:
    owned = bounded(lambda: decode_owned(text))
    assert not (owned.labels or owned.annotations or owned.extended_resources or owned.taints)


@SETTINGS
@given(texts)
def test_any_ownership_record_reads(text: str) -> None:
    decode_owned(text)


# ---- pod termination messages: the holder scan ---------------------------------------------------
@pytest.mark.parametrize("text", PATHOLOGICAL, ids=IDS)
def test_a_pathological_scan_message_is_a_failed_scan(text: str) -> None:
    with pytest.raises(ValueError, match="not a holder summary"):
        holders.from_message(text)
    free, words = bounded(lambda: read_scan(text))
    assert not free and words.startswith("the holder scan failed") and len(words) < 300


@SETTINGS
@given(texts | json_values.map(json.dumps))
def test_any_scan_message_reads_or_fails_the_scan(text: str) -> None:
    with contextlib.suppress(ValueError):  # the typed error, and nothing else
        holders.from_message(text)
    free, words = read_scan(text)
    assert isinstance(free, bool) and isinstance(words, str)


# ---- ConfigMaps: custom recipes ------------------------------------------------------------------
@pytest.mark.parametrize("text", [*DEEP, "- " * (MAX_DEPTH + 1) + "x"], ids=[*IDS[:4], "deep-block"])
def test_untrusted_yaml_refuses_deep_nesting(text: str) -> None:
    with pytest.raises(yaml.YAMLError, match="nested deeper than"):
        load_untrusted(text)


def test_untrusted_yaml_refuses_aliases_before_they_expand() -> None:
    with pytest.raises(yaml.YAMLError, match="aliases"):
        bounded(lambda: load_untrusted(LAUGHS), limit=1 << 20)
    with pytest.raises(yaml.YAMLError, match="aliases"):
        load_untrusted("name: &n fpga\nresource: *n\n")


def test_untrusted_yaml_reads_an_ordinary_recipe() -> None:
    text = "name: fpga\nresource: example.com/fpga\npciVendor: '1d0f'\nvisibleDevicesEnv: F_VISIBLE_DEVICES\ndeviceNode: /dev/f{index}\n"
    assert recipe_from_dict(load_untrusted(text)).resource == "example.com/fpga"


@SETTINGS
@given(json_values)
def test_any_recipe_document_is_a_recipe_or_a_recipe_error(doc: Any) -> None:
    with contextlib.suppress(RecipeError):  # the typed error, and nothing else
        recipe_from_dict(doc)


# ---- NodeFeatures (written by any vendor's agent) ------------------------------------------------
@SETTINGS
@given(json_values, st.text(max_size=10))
def test_any_node_feature_reads(doc: Any, name: str) -> None:
    obj = {"metadata": {"name": name, "labels": {"nfd.node.kubernetes.io/node-name": "a"}}, "spec": doc}
    from_spec(obj)
    merge([obj])


# ---- the spec --------------------------------------------------------------------------------------
@SETTINGS
@given(json_values)
def test_any_spec_parses_or_says_spec_error(doc: Any) -> None:
    spec = {"recipe": "simulated-gpu", **doc} if isinstance(doc, dict) else doc
    with contextlib.suppress(SpecError):  # the typed error, and nothing else
        parse_spec(SR, spec)


# ---- the reconcile over generated cluster states ------------------------------------------------
OUR_KEYS = [
    upgrade_annotation(SR),
    reached_annotation(SR),
    driver_revision_label(SR),
    upgrade_state_label(SR),
    state_label(SR, DRIVER),
    validated_label(SR),
]
our_keys = st.sampled_from(OUR_KEYS)
keys = our_keys | st.text(max_size=30)
values = st.sampled_from(PATHOLOGICAL) | st.text(max_size=60)


@SETTINGS
@given(
    st.lists(
        st.tuples(st.dictionaries(keys, values, max_size=6), st.dictionaries(our_keys, values, max_size=6)),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),
)
def test_the_reconcile_survives_any_node_labels_and_annotations(
    nodes: list[tuple[dict[str, str], dict[str, str]]], unschedulable: bool
) -> None:
    infos = []
    for i, (labels, annots) in enumerate(nodes):
        base = node(f"n{i}")
        infos.append(
            type(base)(
                name=base.name,
                labels={**base.labels, **labels},
                annotations=annots,
                unschedulable=unschedulable,
            )
        )
    plan = reconcile(observed(infos), NS, NOW)
    assert plan.status["conditions"]
    for info in infos:
        release_upgrade(SR, info)


def test_the_spec_of_a_special_resource_from_the_cluster_is_parsed_whatever_it_holds() -> None:
    plan = reconcile(observed([node("a")], the_sr=sr({"recipe": ["[" * 50]})), NS, NOW)
    assert not plan.deployable


class _ConfigMaps:
    def __init__(self, text: str) -> None:
        self.text = text

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return {"data": {"recipe.yaml": self.text}}


@pytest.mark.parametrize(
    ("text", "words"),
    [("[" * 5000, "nested deeper than"), (LAUGHS, "aliases"), ("name: [", "invalid YAML")],
    ids=["deep", "laughs", "syntax"],
)
async def test_a_garbage_recipe_config_map_is_refused_naming_it(text: str, words: str) -> None:
    """Before: yaml.safe_load's RecursionError escaped the pass (only YAMLError was caught)."""
    from sro.operator.admission import resolve_recipe
    from sro.operator.cluster.specialresources import SpecialResourceIO

    io = SpecialResourceIO.__new__(SpecialResourceIO)
    io.objects, io.namespace = _ConfigMaps(text), NS  # type: ignore[assignment]
    doc = await io._recipe("mine")
    assert doc is not None and words in doc["recipe.yaml"]
    spec = parse_spec(SR, {"recipe": "fpga", "recipeConfigMap": "mine"})
    with pytest.raises(SpecError, match=r"spec\.recipeConfigMap 'mine'"):
        resolve_recipe(spec, doc)


@pytest.mark.parametrize("text", [*DEEP, "\ud800"], ids=[*IDS[:4], "surrogate"])
def test_a_garbage_device_plugin_config_announces_no_extra_name(text: str) -> None:
    """Before: RecursionError out of yaml.safe_load escaped the taint check (only YAMLError caught)."""
    from sro.operator.partitioning import announced_names

    assert announced_names("sro.dev/simulated-gpu", text) == ([], False)


# ---- NodeFeatureRules (any namespace user with the CRD's rights) and custom.d rule files ---------
RULE_WORDS = ["name", "labels", "matchFeatures", "matchAny", "feature", "matchExpressions", "op", "value"]
rule_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(RULE_WORDS) | st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=30,
)


@SETTINGS
@given(st.lists(rule_values, max_size=3))
def test_any_node_feature_rule_parses_into_rules_and_problems(rules: list[Any]) -> None:
    from sro.operator.nodefeaturerules import parse_rule_object

    parse_rule_object({"metadata": {"name": "x"}, "spec": {"rules": rules}})


@pytest.mark.parametrize("text", [*DEEP, LAUGHS], ids=IDS[:5])
def test_a_garbage_rules_file_is_a_problem(text: str) -> None:
    """Before: yaml.safe_load's RecursionError escaped (only YAMLError was caught)."""
    from sro.nfd.rules import parse_rules_file

    rules, problems = parse_rules_file(text, "custom.d/x.yaml")
    assert rules == () and problems
