"""One finding that names where it is: a file, a config field or a rule field, and what is wrong there.

Why in api/: the host readers report failed reads with it, and the NFD rule engine (`sro.nfd`), which
both the node agent and the operator import, reports bad rule fields with it; neither may import the
other's layer, so the record lives in the pure layer they share.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """A read that failed or gave something unusable; `path` names the file (or config field)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"
