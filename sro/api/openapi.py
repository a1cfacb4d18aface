"""A field of a custom resource, described once: its OpenAPI v3 schema and its check come from it.

Why: the API server checks a custom resource against the CRD's schema, and sro's own readers check
the same fields again (unit tests and hollow clusters feed them objects no API server saw). Both
from one `Field` table, they cannot disagree on a type, a default, an enum, a pattern or a bound.
Also here: the CustomResourceDefinition document around a schema, shared by every CRD sro installs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sro.api.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE

STRING: Final = "string"
BOOLEAN: Final = "boolean"
INTEGER: Final = "integer"
OBJECT: Final = "object"
ARRAY: Final = "array"
INT_OR_STRING: Final = "int-or-string"  # x-kubernetes-int-or-string: a number or a string


# `{type: string}`, one object wherever a schema says only that (YAML output shares it by anchor).
STRING_SCHEMA: Final[dict[str, Any]] = {"type": STRING}


@dataclass(frozen=True)
class Field:
    """One field as the schema and the reader both see it.

    `fields` are an object's properties; `items` an array's item; `values` a map's values
    (additionalProperties). `required` is within the object the field is in. `ceiling` bounds a number for the reader only, where the schema leaves
    it open (a sanity limit the published schema never had); `opaque` objects are kept whole,
    unchecked (x-kubernetes-preserve-unknown-fields)."""

    name: str
    type: str
    description: str = ""
    default: Any = None
    enum: tuple[str, ...] = ()
    pattern: str = ""
    min_length: int | None = None
    max_length: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    ceiling: int | None = None
    required: bool = False
    fields: tuple[Field, ...] = ()
    items: Field | None = None
    values: Field | None = None
    opaque: bool = False
    absent: Any = None  # read when absent and the schema states no default (what Kubernetes assumes)

    def __getitem__(self, name: str) -> Field:
        """The property `name` of this object (of its items, for an array)."""
        for f in (self.items or self).fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")

    def empty(self) -> Any:
        """What the reader takes for the field when it is absent: its default, else `absent`, else
        an empty value (None for a number)."""
        for value in (self.default, self.absent):
            if value is not None:
                return value
        return {STRING: "", OBJECT: {}, ARRAY: []}.get(self.type)


def schema(f: Field) -> dict[str, Any]:
    """The field's OpenAPI v3 schema, as a CRD's structural schema spells it."""
    out: dict[str, Any] = (
        {"x-kubernetes-int-or-string": True} if f.type == INT_OR_STRING else {"type": f.type}
    )
    for key, value in (
        ("enum", list(f.enum)),
        ("minLength", f.min_length),
        ("maxLength", f.max_length),
        ("pattern", f.pattern),
        ("minimum", f.minimum),
        ("maximum", f.maximum),
        ("default", f.default),
        ("description", f.description),
    ):
        if value is not None and value != [] and value != "":
            out[key] = value
    if f.items is not None:
        out["items"] = schema(f.items)
    if f.values is not None:
        out["additionalProperties"] = schema(f.values)
    required = [c.name for c in f.fields if c.required]
    if required:
        out["required"] = required
    if f.fields:
        out["properties"] = {c.name: schema(c) for c in f.fields}
    if f.opaque:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


class FieldError(ValueError):
    """A value the field's schema refuses; the message starts with the field's path."""


def _whole_number(value: Any, f: Field, path: str) -> None:
    low, high = f.minimum, f.maximum if f.maximum is not None else f.ceiling
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        span = f"from {low} to {high}" if low is not None and high is not None else "in bounds"
        raise FieldError(f"{path}: expected a whole number {span}, got {value!r}")


def check(value: Any, f: Field, path: str) -> None:
    """Refuse `value` (never None: absent) where the field's schema would; FieldError names the path."""
    if f.type == STRING:
        if not isinstance(value, str):
            raise FieldError(f"{path}: expected a string, got {value!r}")
        if f.min_length is not None and len(value) < f.min_length:
            raise FieldError(f"{path}: must have at least {f.min_length} character(s)")
        if f.max_length is not None and len(value) > f.max_length:
            raise FieldError(f"{path}: {value!r} is longer than {f.max_length} characters")
    elif f.type == BOOLEAN:
        if not isinstance(value, bool):
            raise FieldError(f"{path}: expected true or false, got {value!r}")
    elif f.type == INTEGER:
        _whole_number(value, f, path)
    elif f.type == INT_OR_STRING:
        if not isinstance(value, int | str) or isinstance(value, bool):
            raise FieldError(f"{path}: expected a number or a string, got {value!r}")
        if isinstance(value, int):
            return
    elif f.type == OBJECT:
        if not isinstance(value, Mapping):
            raise FieldError(f"{path}: expected an object, got {value!r}")
        _check_object(value, f, path)
    elif f.type == ARRAY:
        _check_array(value, f, path)
    if f.enum and value not in f.enum:
        raise FieldError(f"{path}: must be one of {', '.join(f.enum)}, got {value!r}")
    if f.pattern and isinstance(value, str) and not re.search(f.pattern, value):
        raise FieldError(f"{path}: {value!r} does not match {f.pattern}")


def _check_object(value: Mapping[str, Any], f: Field, path: str) -> None:
    if f.opaque:
        return
    for child in f.fields:
        got = value.get(child.name)
        if got is not None:
            check(got, child, f"{path}.{child.name}")
        elif child.required:
            raise FieldError(f"{path}.{child.name}: required")
    if f.values is not None:
        for key, got in value.items():
            check(got, f.values, f"{path}.{key}")


def _check_array(value: Any, f: Field, path: str) -> None:
    item = f.items
    if item is not None and item.type == STRING:
        if (
            not isinstance(value, Sequence)
            or isinstance(value, str)
            or not all(isinstance(v, str) for v in value)
        ):
            raise FieldError(f"{path}: expected a list of strings, got {value!r}")
        return
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise FieldError(f"{path}: expected a list, got {value!r}")
    for i, v in enumerate(value):
        if item is not None:
            check(v, item, f"{path}[{i}]")


def read(doc: Mapping[str, Any], f: Field, path: str) -> Any:
    """`doc`'s value of the field, checked (FieldError naming `path.<name>`), or `f.empty()`."""
    value = doc.get(f.name)
    if value is None:
        if f.required:
            raise FieldError(f"{path}.{f.name}: required")
        return f.empty()
    check(value, f, f"{path}.{f.name}")
    return value


def crd_document(
    group: str,
    version: str,
    kind: str,
    plural: str,
    scope: str,
    spec: Mapping[str, Any],
    *,
    short_names: Sequence[str] = (),
    list_kind: bool = False,
    spec_required: bool = False,
    status: Mapping[str, Any] | None = None,
    printer_columns: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A CustomResourceDefinition (apiextensions.k8s.io/v1) of one served, stored version."""
    names: dict[str, Any] = {"plural": plural, "singular": kind.lower(), "kind": kind}
    if list_kind:
        names["listKind"] = f"{kind}List"
    if short_names:
        names["shortNames"] = list(short_names)
    top: dict[str, Any] = {"type": OBJECT}
    if spec_required:
        top["required"] = ["spec"]
    top["properties"] = {
        "apiVersion": STRING_SCHEMA,
        "kind": STRING_SCHEMA,
        "metadata": {"type": OBJECT},
        "spec": dict(spec),
    }
    served: dict[str, Any] = {"name": version, "served": True, "storage": True}
    if status is not None:
        served["subresources"] = {"status": {}}
        top["properties"]["status"] = dict(status)
    if printer_columns:
        served["additionalPrinterColumns"] = [dict(c) for c in printer_columns]
    served["schema"] = {"openAPIV3Schema": top}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
        "spec": {"group": group, "scope": scope, "names": names, "versions": [served]},
    }
