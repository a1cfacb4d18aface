"""One NFD match expression (`{op, value, type}`): its check and pre-compilation, and NFD's versions.

Why its own module: the rule parser (`sro.nfd.rules`) and the legacy `matchOn` translation
(`sro.nfd.legacy`) both build expressions, and evaluation (`sro.nfd.matching`) compares versions the
same way the parser reads them. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sro.api.nfd_crds import MATCH_OPS
from sro.nfd.model import Expr, RuleError, refuse_unknown

NO_VALUES = ("Exists", "DoesNotExist", "IsTrue", "IsFalse")
ONE_OR_MORE = ("In", "NotIn", "InRegexp")
NUMERIC = {"Gt": 1, "Ge": 1, "Lt": 1, "Le": 1, "GtLt": 2, "GeLe": 2}
_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """NFD's `type: version`: `%d.%d.%d`, `%d.%d` or `%d`; anything after the numbers is ignored."""
    m = _VERSION.match(text.strip())
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0))


def scalar(v: object) -> str:
    """A YAML scalar as NFD reads it: a string, booleans lowercase (`true`, not `True`)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def parse_expr(spec: object, path: str) -> Expr:
    if not isinstance(spec, Mapping):
        raise RuleError(path, f"expected a mapping with `op` and `value`, got {spec!r}")
    refuse_unknown(spec, ("op", "value", "type"), path)
    op = spec.get("op")
    if op not in MATCH_OPS:
        raise RuleError(f"{path}.op", f"unknown op {op!r} (valid: {', '.join(MATCH_OPS)})")
    raw = spec.get("value")
    values: tuple[str, ...]
    if raw is None:
        values = ()
    elif isinstance(raw, list):
        if any(isinstance(v, Mapping | list) or v is None for v in raw):
            raise RuleError(f"{path}.value", "expected a list of strings")
        values = tuple(scalar(v) for v in raw)
    elif isinstance(raw, Mapping):
        raise RuleError(f"{path}.value", "expected a list of strings, got a mapping")
    else:
        values = (scalar(raw),)
    kind = spec.get("type")
    if kind not in (None, "", "version"):
        raise RuleError(f"{path}.type", f"unknown type {kind!r} (valid: version)")
    version = kind == "version"
    if version and op not in NUMERIC:
        raise RuleError(f"{path}.type", f"type version applies to {', '.join(NUMERIC)} only, not {op}")
    if op in NO_VALUES and values:
        raise RuleError(f"{path}.value", f"{op} takes no values, got {list(values)}")
    if op in ONE_OR_MORE and not values:
        raise RuleError(f"{path}.value", f"{op} needs at least one value")
    if op in NUMERIC:
        if len(values) != NUMERIC[op]:
            raise RuleError(f"{path}.value", f"{op} needs exactly {NUMERIC[op]} value(s), got {len(values)}")
        nums: list[object] = []
        for v in values:
            n = parse_version(v) if version else _int(v)
            if n is None:
                what = "a version" if version else "an integer"
                raise RuleError(f"{path}.value", f"{op} needs {what}, got {v!r}")
            nums.append(n)
        if len(nums) == 2 and not nums[0] < nums[1]:  # type: ignore[operator]
            raise RuleError(
                f"{path}.value", f"{op} needs the first value below the second, got {list(values)}"
            )
    patterns: tuple[re.Pattern[str], ...] = ()
    if op == "InRegexp":
        compiled = []
        for i, v in enumerate(values):
            try:
                compiled.append(re.compile(v))
            except re.error as e:
                raise RuleError(f"{path}.value[{i}]", f"invalid regular expression {v!r} ({e})") from None
        patterns = tuple(compiled)
    return Expr(op, values, version, patterns)


def _int(text: str) -> int | None:
    try:
        return int(text.strip(), 10)
    except ValueError:
        return None
