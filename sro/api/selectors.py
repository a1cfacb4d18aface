"""The label-selector language of `spec.driver.upgradePolicy` (drain and waitForCompletion
`podSelector`): equality-based items `key=value`, `key!=value`, `key`, `!key`, comma-separated.

Why apart from the spec's parsing: the parser checks a selector once when the spec is read, and the
upgrade's state machine matches pods against it on every pass; both need only this small language.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sro.api.specialresource import SpecError

_SELECTOR_ITEM = re.compile(r"^(!?)([A-Za-z0-9][-A-Za-z0-9_./]*)(?:\s*(==|=|!=)\s*([-A-Za-z0-9_.]*))?$")


def parse_selector(text: str, where: str) -> tuple[tuple[str, str, str], ...]:
    """An equality-based label selector as (key, op, value) items; op is =, != , exists or !exists."""
    items = []
    for raw in (p.strip() for p in text.split(",")):
        if not raw:
            continue
        m = _SELECTOR_ITEM.match(raw)
        if not m or (m.group(1) and m.group(3)):
            raise SpecError(
                f"{where}: {raw!r} is not a selector item; use key=value, key!=value, key or !key "
                "(comma-separated; set-based selectors are not supported)"
            )
        neg, key, op, value = m.groups()
        if op:
            items.append((key, "!=" if op == "!=" else "=", value or ""))
        else:
            items.append((key, "!exists" if neg else "exists", ""))
    return tuple(items)


def selector_matches(items: Sequence[tuple[str, str, str]], labels: Mapping[str, str]) -> bool:
    for key, op, value in items:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True
