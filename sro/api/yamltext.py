"""One line for a YAML syntax error, and the one loader of a YAML file into a parsed value.

Why: PyYAML's own message spans several lines and quotes the document, while a command's error (and
a log line) must stay on one line and say where; every file sro reads as YAML (a recipe, the device
plugin's and the exporter's config, the simulated devices) goes through `load_yaml_file`, so each
error names the file and says what is wrong in the same words."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def yaml_error(e: yaml.YAMLError) -> str:
    """`line 2, column 1: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)`."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return f"{where}{e.problem}" + (f" ({e.context})" if e.context else "")
    return " ".join(str(e).split())


MAX_DEPTH = 64  # nesting of an untrusted document; far above any recipe's, far below the stack's


class _UntrustedLoader(yaml.SafeLoader):
    """SafeLoader without aliases (a "billion laughs" document of a few lines expands to gigabytes
    once walked) and with bounded nesting (`[[[...` past Python's stack raised RecursionError)."""

    depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        mark: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", mark)
        if self.depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self.depth -= 1


def load_untrusted(text: str) -> Any:
    """The YAML document in `text`, written by someone sro does not trust (a ConfigMap, a spec's
    config): yaml.YAMLError for any syntax error, an alias or nesting deeper than MAX_DEPTH."""
    return yaml.load(text, Loader=_UntrustedLoader)  # a SafeLoader


def load_yaml_file(
    path: Path,
    parse: Callable[[Any], T],
    error: type[Exception],
) -> T:
    """`parse` of the YAML document in `path`; `error` whose message starts with the path when the
    file cannot be read, is not YAML (said in one line) or `parse` raises `error`."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise error(f"{path}: not YAML: {yaml_error(e)}") from e
    try:
        return parse(doc)
    except error as e:
        raise error(f"{path}: {e}") from e
