"""One structural check of a value against an OpenAPI v3 schema, for tests of what sro writes or
documents (a CRD's spec examples, the status the operator writes): types, required keys, enums and
unknown keys, as the API server's validator sees them; `empty_is_null` adds Kubernetes 1.20's
refusal of "" where a string is due (kubernetes#99804), which real clusters do not make."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PRESERVE = "x-kubernetes-preserve-unknown-fields"


def fits(schema: Mapping[str, Any], value: Any, path: str, *, empty_is_null: bool = False) -> list[str]:
    """What in `value` the schema refuses, each as "<path>: <why>"; [] when it fits."""
    errors: list[str] = []
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        errors += [f"{path}.{r}: required" for r in schema.get("required") or [] if r not in value]
        for k, v in value.items():
            sub = props.get(k, extra if isinstance(extra, dict) else None)
            if sub is not None:
                errors += fits(sub, v, f"{path}.{k}", empty_is_null=empty_is_null)
            elif not schema.get(PRESERVE):
                errors.append(f"{path}.{k}: not in the schema")
    elif kind == "array":
        if not isinstance(value, list):
            return [f"{path}: not an array"]
        for i, v in enumerate(value):
            errors += fits(schema["items"], v, f"{path}[{i}]", empty_is_null=empty_is_null)
    elif kind == "string":
        if not isinstance(value, str):
            errors.append(f"{path}: not a string")
        elif empty_is_null and value == "":
            errors.append(f"{path}: empty string (read as null by Kubernetes 1.20)")
        elif "enum" in schema and value not in schema["enum"]:
            errors.append(f"{path}: not one of the enum")
    elif kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{path}: not an integer")
    elif kind == "boolean" and not isinstance(value, bool):
        errors.append(f"{path}: not a boolean")
    return errors
