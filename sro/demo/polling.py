"""Waiting for the demo cluster to reach a state: one poll loop for every stage.

Why one: each stage waits for something the cluster does (a pod to finish, a taint to appear), and
a timeout must end the demo with the same one-line error, plus what to look at where a stage has it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sro.local.cluster import ClusterError

POLL = 0.5  # seconds between looks


def until(
    what: str, check: Callable[[], Any], timeout: float = 90, detail: Callable[[], str] | None = None
) -> Any:
    """Poll `check` until it returns something true and return that; past `timeout` seconds raise
    ClusterError naming `what` (and, with `detail`, what it says to look at)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            message = f"timed out after {timeout:.0f}s waiting for {what}"
            raise ClusterError(message + (f"\n{detail()}" if detail is not None else ""))
        time.sleep(POLL)
