"""The alert rules pass `promtool check rules` and `promtool test rules`, and the promtool tests cover
every alert both ways: a case where it fires and one where it stays quiet."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.real_prometheus import PROMTOOL, RULES

PROMTOOL_TESTS = sorted((Path(__file__).resolve().parents[1] / "promtool").glob("*.yaml"))

needs_promtool = pytest.mark.skipif(
    not Path(PROMTOOL).exists(), reason=f"needs promtool ({PROMTOOL}; Debian package `prometheus`)"
)


def _alerts() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


@needs_promtool
def test_promtool_check_rules() -> None:
    run = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in run.stdout


@needs_promtool
@pytest.mark.parametrize("test_file", PROMTOOL_TESTS, ids=[p.name for p in PROMTOOL_TESTS])
def test_promtool_test_rules(test_file: Path) -> None:
    run = subprocess.run(
        [PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_every_alert_has_firing_and_quiet_cases() -> None:
    cases: dict[str, set[str]] = defaultdict(set)
    for f in PROMTOOL_TESTS:
        doc = yaml.safe_load(f.read_text())
        assert any(Path(rf).name == RULES.name for rf in doc["rule_files"]), (
            f"{f.name} does not load {RULES.name}"
        )
        for test in doc["tests"]:
            for case in test.get("alert_rule_test", []):
                cases[case["alertname"]].add("fires" if case.get("exp_alerts") else "quiet")
    missing = {
        name: {"fires", "quiet"} - cases[name] for name in _alerts() if cases[name] != {"fires", "quiet"}
    }
    assert not missing, f"alerts without a firing or a quiet promtool case: {missing}"
    assert set(cases) <= set(_alerts()), f"cases for unknown alerts: {set(cases) - set(_alerts())}"


def test_every_alert_has_severity_and_says_where_and_what_to_do() -> None:
    for name, rule in _alerts().items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        summary, description = rule["annotations"]["summary"], rule["annotations"]["description"]
        if name != "SroExporterAbsent":  # no target at all: there is no node to name
            assert "$labels." in summary and "$labels." in description, name
        assert len(description) > 100, f"{name}: the description should say what to do"


def test_device_alerts_count_a_shared_gpu_once() -> None:
    """A time-sliced GPU has a series per pod: device rules aggregate by device before comparing."""
    for name, rule in _alerts().items():
        if "DCGM_" in rule["expr"] or "sro_device_" in rule["expr"]:
            assert "by (Hostname, gpu, UUID" in rule["expr"], name
