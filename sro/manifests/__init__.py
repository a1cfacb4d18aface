"""Manifests as package data: one directory per component, YAML templates numbered in apply order.

`render("node-report", image=...)` loads `<component>/*.yaml` in file-name order, fills the Jinja2
placeholders (a missing value is an error, never an empty string) and returns the objects. The demo,
the e2e tests and the operator all render the same templates, so what is tested is what is deployed.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import jinja2
import yaml

_env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


def components() -> list[str]:
    root = resources.files(__name__)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))


def render_text(component: str, **values: Any) -> str:
    """The component's manifests as one multi-document YAML string."""
    root = resources.files(__name__) / component
    if not root.is_dir():
        raise ValueError(f"no manifests for component {component!r}; known: {', '.join(components())}")
    docs = []
    for f in sorted((p for p in root.iterdir() if p.name.endswith((".yaml", ".yml"))), key=lambda p: p.name):
        try:
            docs.append(_env.from_string(f.read_text()).render(**values).strip())
        except jinja2.UndefinedError as e:
            raise ValueError(f"{component}/{f.name}: {e.message}") from e
    return "\n---\n".join(docs) + "\n"


def render(component: str, **values: Any) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render_text(component, **values)) if d]
