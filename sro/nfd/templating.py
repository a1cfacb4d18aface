"""`labelsTemplate` of NFD custom rules: the subset of Go's text/template that NFD's examples use.

Why a subset: rules written for NFD template over the elements a rule matched, e.g.
`{{range .pci.device}}vendor-{{.vendor}}-device-{{.device}}=present` newline `{{end}}`. Supported: text,
`{{range .<domain>.<feature>}} ... {{end}}` (nestable), `{{.Field}}` / `{{.}}`, and the `{{-`/`-}}`
whitespace trims. Anything else is refused when the config is parsed, naming the action, rather than
rendered wrong. The output is NFD's: one `key=value` per line, blank lines skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

_ACTION = re.compile(r"\{\{(-\s)?\s*(.*?)\s*(\s-)?\}\}", re.S)
_PATH = re.compile(r"^\.([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)?$")


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Field:
    path: tuple[str, ...]


@dataclass(frozen=True)
class Range:
    path: tuple[str, ...]
    body: tuple[Node, ...]


Node = Text | Field | Range


@lru_cache(maxsize=256)
def compile_template(source: str) -> tuple[Node, ...]:
    """Parse a template; ValueError names the unsupported or unbalanced action."""
    pieces: list[str | tuple[str, bool, bool]] = []
    pos = 0
    for m in _ACTION.finditer(source):
        pieces.append(source[pos : m.start()])
        pieces.append((m.group(2), bool(m.group(1)), bool(m.group(3))))
        pos = m.end()
    pieces.append(source[pos:])
    if "{{" in "".join(p for p in pieces if isinstance(p, str)):
        raise ValueError("unclosed action `{{`")
    # whitespace trims act on the neighbouring text
    for i, p in enumerate(pieces):
        if isinstance(p, tuple):
            _, left, right = p
            if left and i > 0 and isinstance(pieces[i - 1], str):
                pieces[i - 1] = str(pieces[i - 1]).rstrip()
            if right and i + 1 < len(pieces) and isinstance(pieces[i + 1], str):
                pieces[i + 1] = str(pieces[i + 1]).lstrip()
    stack: list[tuple[tuple[str, ...], list[Node]]] = [((), [])]
    for p in pieces:
        if isinstance(p, str):
            if p:
                stack[-1][1].append(Text(p))
            continue
        action = p[0]
        if action == "end":
            if len(stack) == 1:
                raise ValueError("`{{end}}` without `{{range}}`")
            path, body = stack.pop()
            stack[-1][1].append(Range(path, tuple(body)))
        elif action.startswith("range "):
            stack.append((_path(action[6:].strip()), []))
        elif _PATH.match(action):
            stack[-1][1].append(Field(_path(action)))
        else:
            raise ValueError(f"unsupported action `{{{{{action}}}}}` (supported: range, end, .Field)")
    if len(stack) != 1:
        raise ValueError("`{{range}}` without `{{end}}`")
    return tuple(stack[0][1])


def _path(text: str) -> tuple[str, ...]:
    if not _PATH.match(text):
        raise ValueError(f"unsupported pipeline {text!r} (only .field.path)")
    return tuple(p for p in text[1:].split(".") if p)


def _lookup(data: object, path: Sequence[str]) -> object:
    for part in path:
        if not isinstance(data, Mapping) or part not in data:
            return None
        data = data[part]
    return data


def _render(nodes: Sequence[Node], data: object, out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, Text):
            out.append(node.text)
        elif isinstance(node, Field):
            value = _lookup(data, node.path)
            out.append("<no value>" if value is None else str(value))  # what Go prints
        else:
            items = _lookup(data, node.path)
            if isinstance(items, Mapping):
                items = [items[k] for k in sorted(items)]
            for item in items if isinstance(items, list | tuple) else ():
                _render(node.body, item, out)


def render_labels(source: str, data: Mapping[str, object]) -> tuple[dict[str, str], list[str]]:
    """Render and split into labels; a line without `=` is reported and skipped."""
    try:
        nodes = compile_template(source)
    except ValueError as e:  # parse_rules refuses these; kept for rules built in code
        return {}, [str(e)]
    out: list[str] = []
    _render(nodes, data, out)
    labels: dict[str, str] = {}
    bad: list[str] = []
    for line in "".join(out).splitlines():
        line = line.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key:
            bad.append(f"expanded line {line[:80]!r} is not key=value; skipped")
            continue
        labels[key.strip()] = value.strip()
    return labels, bad
