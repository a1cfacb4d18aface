"""The reached annotation on a node: when it first matched and when it reached each state.

Why a codec of its own: the walk writes it, a node that is not Ready is held on what it says, and
the status rows' `since` comes from it; the value is `key=time,key=time` (`selected`, the state
names, `validated`), short enough for an annotation at any number of states.
"""

from __future__ import annotations

from collections.abc import Mapping

SELECTED = "selected"  # key in the reached annotation: when the node first matched


def parse_reached(value: str) -> dict[str, str]:
    out = {}
    for item in value.split(","):
        key, sep, when = item.partition("=")
        if sep and key:
            out[key] = when
    return out


def format_reached(reached: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in reached.items())
