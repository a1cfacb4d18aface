"""Only `SRO_UPDATE_GOLDEN=1` rewrites golden files: `0`, an empty value or any other word compares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.golden_files import VARIABLE, update_goldens

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("value", ["0", "", "false", "no", "true", "yes", " 1", "1 ", "01", "2"])
def test_no_value_but_1_rewrites(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(VARIABLE, value)
    assert not update_goldens()


def test_1_rewrites_and_unset_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "1")
    assert update_goldens()
    monkeypatch.delenv(VARIABLE)
    assert not update_goldens()


def test_every_golden_test_asks_the_one_rule() -> None:
    """No test reads the variable itself (one did, and took `0` for yes)."""
    reading = re.compile(r"environ[^\n]{0,40}" + VARIABLE + "|getenv[^\n]{0,20}" + VARIABLE)
    own = TESTS / "golden_files.py"
    readers = [p for p in TESTS.rglob("*.py") if p != own and reading.search(p.read_text())]
    assert readers == [], f"read {VARIABLE} through tests.golden_files.update_goldens: {readers}"
    users = [
        p for p in TESTS.rglob("test_*.py") if p != Path(__file__) and "update_goldens()" in p.read_text()
    ]
    assert len(users) >= 7  # the golden tests: CDI, discovery (2), exporter, node pools, bundle, NFD rules
