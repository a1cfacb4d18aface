"""Manifests as package data: one directory per component, YAML templates numbered in apply order.

`render("node-report", image=...)` loads `<component>/*.yaml` in file-name order, fills the Jinja2
placeholders (a missing value is an error, never an empty string) and returns the objects. The demo,
the e2e tests and the operator all render the same templates, so what is tested is what is deployed.
A template may embed another package file verbatim with `{{ package_file("monitoring/rules/x.yaml") }}`
(alert rules and dashboards are kept as plain files, which promtool and the tests read directly).

The operator renders a validation pod per node and state on every pass that needs one (a thousand
at a thousand nodes), so the package's templates are read once, each template text is compiled
once, and the YAML is parsed with libyaml where PyYAML has it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jinja2
import yaml

from sro.manifests.sandbox import BoundedSandbox, render_bounded

# Sandboxed and bounded (sro.manifests.sandbox): custom manifests are an admin's text run in the operator.
_env = BoundedSandbox(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


def package_file(path: str) -> str:
    """The text of a data file under this package (`monitoring/rules/sro-alerts.yaml`)."""
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts:
        raise ValueError(f"package_file: {path!r} is not a relative path inside sro/manifests")
    f = resources.files(__name__).joinpath(*parts)
    if not f.is_file():
        raise ValueError(f"package_file: no file {path!r} in sro/manifests")
    return f.read_text()


_env.globals["package_file"] = package_file
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the same safe subset, in C


@functools.lru_cache(maxsize=512)
def _compiled(text: str) -> jinja2.Template:
    return _env.from_string(text)


def render_template(text: str, values: Mapping[str, Any]) -> str:
    """One template's text rendered with `values` in the manifests' Jinja2 environment (raises
    jinja2's errors): for callers that take a component's files one at a time (`sro install`)."""
    return render_bounded(_compiled(text), dict(values))


def components() -> list[str]:
    root = resources.files(__name__)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))


def templates(component: str) -> dict[str, str]:
    """File name -> template text of the component, in apply order."""
    return dict(_templates(component))


@functools.lru_cache(maxsize=64)
def _templates(component: str) -> dict[str, str]:
    root = resources.files(__name__) / component
    if not root.is_dir():
        raise ValueError(f"no manifests for component {component!r}; known: {', '.join(components())}")
    files = sorted((p for p in root.iterdir() if p.name.endswith((".yaml", ".yml"))), key=lambda p: p.name)
    return {f.name: f.read_text() for f in files}


def render_text(component: str, **values: Any) -> str:
    """The component's manifests as one multi-document YAML string."""
    return render_text_with(component, None, values)


def render_text_with(component: str, overrides: Mapping[str, str] | None, values: Mapping[str, Any]) -> str:
    """`render_text`, where `overrides` (file name -> template) replace the file of the same name or
    add new ones, in file-name order: an admin's custom manifests for a state use the same renderer.
    """
    merged = {**templates(component), **(overrides or {})}
    docs = []
    for name in sorted(merged):
        try:
            docs.append(render_bounded(_compiled(merged[name]), dict(values)).strip())
        except jinja2.TemplateError as e:
            where = f"{component}/{name}" + (" (custom)" if overrides and name in overrides else "")
            raise ValueError(f"{where}: {getattr(e, 'message', None) or e}") from e
    return "\n---\n".join(docs) + "\n"


def render(component: str, overrides: Mapping[str, str] | None = None, **values: Any) -> list[dict[str, Any]]:
    text = render_text_with(component, overrides, values)
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d]
    except yaml.YAMLError as e:
        raise ValueError(f"{component}: the rendered manifests are not valid YAML: {e}") from e
