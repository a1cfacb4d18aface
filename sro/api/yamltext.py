"""One line for a YAML syntax error: PyYAML's own message spans several lines and quotes the
document, while a command's error (and a log line) must stay on one line and say where."""

from __future__ import annotations

import yaml


def yaml_error(e: yaml.YAMLError) -> str:
    """`line 2, column 1: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)`."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return f"{where}{e.problem}" + (f" ({e.context})" if e.context else "")
    return " ".join(str(e).split())
