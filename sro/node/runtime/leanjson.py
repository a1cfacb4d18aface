"""JSON and the two os.path helpers every hook run needs (leanpath has the rest), without `json` or `os`.

Why: both run on every container start that could ask for devices, and `import json` compiles
regexes (~7 ms) while `import os` pulls in os.path and _collections_abc (~1.5 ms); the C scanner and
encoder `json` itself uses (`_json`) and two string functions do the same work here. Tests compare
every one of them with the real thing (test_hook_bad_input, test_runtime_records, test_runtime_hookcost).
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time
if TYPE_CHECKING:
    from typing import Any


class _ScanContext:
    """What the C JSON scanner reads off a JSONDecoder: plain json.loads() semantics."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(
        {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.get
    )


def loads(raw: bytes) -> Any:
    """json.loads without importing `json`: its module compiles regexes (~7 ms of every hook run).

    Uses the C scanner `json` itself uses; on any error (and where `_json` is missing) the real
    json.loads runs, so malformed input gets exactly json's error message.
    """
    try:
        from _json import make_scanner

        text = raw.decode("utf-8").strip(" \t\n\r")
        obj, end = make_scanner(_ScanContext())(text, 0)  # type: ignore[arg-type]
        if end == len(text):
            return obj
    except Exception:
        pass
    import json

    return json.loads(raw)


def path_isabs(path: str) -> bool:
    """os.path.isabs (POSIX) without importing `os` (its import, os.path and _collections_abc, is ~1.5 ms)."""
    return path.startswith("/")


def path_join(a: str, b: str) -> str:
    """os.path.join(a, b) (POSIX) without importing `os`."""
    if b.startswith("/"):
        return b
    return a + b if not a or a.endswith("/") else a + "/" + b


def _not_json(obj: object) -> object:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def dumps(doc: Any) -> str:
    """json.dumps(doc) (default separators) without importing `json`, through its C encoder."""
    try:
        from _json import encode_basestring_ascii, make_encoder
    except ImportError:  # pragma: no cover - CPython always has _json
        import json

        return json.dumps(doc)
    encoder = make_encoder({}, _not_json, encode_basestring_ascii, None, ": ", ", ", False, False, True)
    return "".join(encoder(doc, 0))
