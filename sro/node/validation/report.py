"""Results of a validation and how they are printed.

Why one format for every check: the operator shows the tail of a validation pod's log (and its
termination message) to users, so each run ends the same way: one line per check, a final verdict
line, and on failure the reason as the first line of stderr, saying what is wrong and what to check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Status = Literal["pass", "fail", "skip"]
_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}


@dataclass(frozen=True)
class Result:
    """One check: `summary` says what was found; a failed one has a `reason` (what is wrong and
    what to check, one line); `details` are extra lines (per device, per library)."""

    check: str
    status: Status
    summary: str
    reason: str = ""
    details: tuple[str, ...] = ()

    @classmethod
    def passed(cls, check: str, summary: str, details: Sequence[str] = ()) -> Result:
        return cls(check, "pass", summary, details=tuple(details))

    @classmethod
    def failed(cls, check: str, summary: str, reason: str, details: Sequence[str] = ()) -> Result:
        return cls(check, "fail", summary, reason, tuple(details))

    @classmethod
    def skipped(cls, check: str, summary: str) -> Result:
        return cls(check, "skip", summary)


@dataclass(frozen=True)
class Report:
    what: str  # "driver" | "workload"
    header: str  # the recipe and roots the check ran with
    results: tuple[Result, ...]

    @property
    def failures(self) -> tuple[Result, ...]:
        return tuple(r for r in self.results if r.status == "fail")

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def verdict(self) -> str:
        """The final line (and the termination message)."""
        counted = [r for r in self.results if r.status != "skip"]
        if self.ok:
            return f"{self.what} validation passed ({len(counted)} checks): {self.header}"
        return f"{self.what} validation FAILED ({len(self.failures)} of {len(counted)} checks): {self.failures[0].reason}"

    def termination_message(self) -> str:
        """The verdict, then a `SKIP <check>: <why>` line per skipped check: what the operator reads
        from a finished validation pod (the first line of a failed one; the skips of a passed one)."""
        skipped = [f"{_MARK['skip']} {r.check}: {r.summary}" for r in self.results if r.status == "skip"]
        return "\n".join([self.verdict, *skipped])

    def stdout_lines(self) -> list[str]:
        lines = [f"sro validate {self.what}: {self.header}"]
        for r in self.results:
            lines.append(f"{_MARK[r.status]} {r.check}: {r.summary}")
            lines.extend(f"     {d}" for d in r.details)
        lines.append(self.verdict)
        return lines

    def stderr_lines(self) -> list[str]:
        """Empty when everything passed; else every failed check's reason, the first one first."""
        return [f"{r.check}: {r.reason}" for r in self.failures]
