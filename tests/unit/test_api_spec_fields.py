"""The CRD's schema and the operator's spec parser agree on every field of a SpecialResource's spec.

Both come from one field table (`sro.api.specfields`); these tests hold them to it from the outside:
they walk the rendered CRD schema and feed `parse_spec` documents built from it, so a field the parser
reads that the schema lacks (or the reverse), or a type, default, enum, pattern or bound that one of
them states differently, fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from sro.api.crd import crd
from sro.api.specialresource import SpecError, SpecialResourceSpec
from sro.api.specparsing import parse_spec

SCHEMA: Mapping[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
HANDLERS = ("httpGet", "tcpSocket", "exec")
DELETE = object()
OVERRIDES = {"spec.recipe": "simulated-gpu"}  # a recipe the name pattern allows


class Recording(dict[str, Any]):
    """A spec object that notes the path of every field read from it."""

    def __init__(self, path: str, seen: set[str], items: Mapping[str, Any]) -> None:
        super().__init__(items)
        self.path, self.seen = path, seen

    def get(self, key: str, default: Any = None) -> Any:
        self.seen.add(f"{self.path}.{key}")
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.seen.add(f"{self.path}.{key}")
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.seen.add(f"{self.path}.{key}")
        return super().__contains__(key)


def build(
    s: Mapping[str, Any],
    path: str = "spec",
    *,
    handler: str = "httpGet",
    change: Mapping[str, Any] | None = None,
    seen: set[str] | None = None,
) -> Any:
    """A valid value for schema `s`, every field present; `change` replaces (or DELETEs) some by path."""
    change = change or {}
    seen = set() if seen is None else seen
    if path in OVERRIDES:
        return OVERRIDES[path]
    if "enum" in s:
        return s["enum"][0]
    if "default" in s and s.get("type") != "object":
        return s["default"]
    if s.get("x-kubernetes-int-or-string"):
        return 1
    kind = s.get("type")
    if kind == "string":
        return "x"
    if kind == "boolean":
        return True
    if kind == "integer":
        return s.get("minimum", 0)
    if kind == "array":
        item = f"{path}[0]"
        return [
            change[item]
            if item in change
            else build(s["items"], item, handler=handler, change=change, seen=seen)
        ]
    out: dict[str, Any] = {}
    props = s.get("properties", {})
    if "additionalProperties" in s:
        props = {"k": s["additionalProperties"]}
    for name, sub in props.items():
        if path.endswith("Probe") and name in HANDLERS and name != handler:
            continue
        child = f"{path}.{name}"
        value = (
            change[child] if child in change else build(sub, child, handler=handler, change=change, seen=seen)
        )
        if value is not DELETE:
            out[name] = value
    return Recording(path, seen, out)


def fields(s: Mapping[str, Any], path: str = "spec") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every field under schema `s` as (path, schema); map entries as `.k`, array items as `[0]`."""
    if s.get("x-kubernetes-preserve-unknown-fields"):
        return
    for name, sub in s.get("properties", {}).items():
        yield f"{path}.{name}", sub
        yield from fields(sub, f"{path}.{name}")
    if "additionalProperties" in s:
        yield f"{path}.k", s["additionalProperties"]
        yield from fields(s["additionalProperties"], f"{path}.k")
    if "items" in s:
        yield from fields(s["items"], f"{path}[0]")


def handler_for(path: str) -> str:
    return next((h for h in HANDLERS if f".{h}" in path), "httpGet")


def parse(change: Mapping[str, Any], path: str = "") -> SpecialResourceSpec:
    return parse_spec("gpus", build(SCHEMA, handler=handler_for(path), change=change))


FIELDS = dict(fields(SCHEMA))
NAMED = [p for p in FIELDS if not p.endswith(".k")]  # fields, not map entries


def test_the_parser_reads_every_field_of_the_schema_and_no_other() -> None:
    read: set[str] = set()
    for handler in HANDLERS:
        seen: set[str] = set()
        parse_spec("gpus", build(SCHEMA, handler=handler, seen=seen))
        read |= seen
    assert read - set(NAMED) == set(), "the parser reads fields the CRD's schema does not have"
    assert set(NAMED) - read == set(), "the CRD's schema has fields the parser never reads"


def test_a_full_spec_of_every_field_parses() -> None:
    for handler in HANDLERS:
        assert parse_spec("gpus", build(SCHEMA, handler=handler)).recipe == "simulated-gpu"


@pytest.mark.parametrize("path", [p for p, s in FIELDS.items() if "default" in s])
def test_an_absent_field_reads_as_the_schema_default(path: str) -> None:
    assert parse({path: DELETE}, path) == parse({path: FIELDS[path]["default"]}, path)


WRONG = {"string": 5, "boolean": "yes", "integer": "1", "object": "x", "array": "x"}


@pytest.mark.parametrize("path", list(FIELDS))
def test_a_value_of_the_wrong_type_is_refused_naming_the_field(path: str) -> None:
    s = FIELDS[path]
    wrong = True if s.get("x-kubernetes-int-or-string") else WRONG[s["type"]]
    with pytest.raises(SpecError, match="^" + re.escape(path)):
        parse({path: wrong}, path)


@pytest.mark.parametrize("path", [p for p, s in FIELDS.items() if "enum" in s])
def test_enums_agree(path: str) -> None:
    for value in FIELDS[path]["enum"]:
        parse({path: value}, path)
    with pytest.raises(SpecError, match="must be one of"):
        parse({path: "Bogus"}, path)


@pytest.mark.parametrize("path", [p for p, s in FIELDS.items() if "pattern" in s])
def test_patterns_agree(path: str) -> None:
    with pytest.raises(SpecError, match=path):
        parse({path: "Not A-Name!"}, path)
    with pytest.raises(SpecError, match=path):
        parse({path: "-1"}, path)  # neither a DNS label nor a count


@pytest.mark.parametrize("path", [p for p, s in FIELDS.items() if "minimum" in s or "maximum" in s])
def test_number_bounds_agree(path: str) -> None:
    s = FIELDS[path]
    if "minimum" in s:
        parse({path: s["minimum"]}, path)
        with pytest.raises(SpecError, match=re.escape(path)):
            parse({path: s["minimum"] - 1}, path)
    if "maximum" in s:
        parse({path: s["maximum"]}, path)
        with pytest.raises(SpecError, match=re.escape(path)):
            parse({path: s["maximum"] + 1}, path)


@pytest.mark.parametrize("path", [p for p, s in FIELDS.items() if "maxLength" in s])
def test_lengths_agree(path: str) -> None:
    most = FIELDS[path]["maxLength"]
    parse({path: "a" * most}, path)
    with pytest.raises(SpecError, match=re.escape(path)):
        parse({path: "a" * (most + 1)}, path)


def _required() -> Iterator[str]:
    for path, s in [("spec", SCHEMA), *FIELDS.items()]:
        inner = s.get("items", s)
        base = f"{path}[0]" if "items" in s else path
        for name in inner.get("required", ()):
            yield f"{base}.{name}"


@pytest.mark.parametrize("path", list(_required()))
def test_required_fields_agree(path: str) -> None:
    with pytest.raises(SpecError, match=re.escape(path) + ": required"):
        parse({path: DELETE}, path)
