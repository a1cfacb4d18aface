"""`sro discover` through the real CLI entry point (click), on the fake host trees."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from sro.cli import cli

HOSTS = Path(__file__).resolve().parent.parent / "hosts"
GPU = str(HOSTS / "nvidia-8gpu" / "root")


def test_labels_output_matches_golden() -> None:
    result = CliRunner().invoke(cli, ["discover", "--host-root", GPU])
    assert result.exit_code == 0, result.output
    assert result.output == (HOSTS / "nvidia-8gpu" / "expected-labels.txt").read_text()


def test_json_yaml_and_features_outputs() -> None:
    runner = CliRunner()
    as_json = json.loads(runner.invoke(cli, ["discover", "--host-root", GPU, "-o", "json"]).output)
    as_yaml = yaml.safe_load(runner.invoke(cli, ["discover", "--host-root", GPU, "--output", "yaml"]).output)
    assert as_json == as_yaml
    assert as_json["feature.node.kubernetes.io/pci-0302_10de.present"] == "true"
    features = json.loads(runner.invoke(cli, ["discover", "--host-root", GPU, "--features"]).output)
    devices = features["pci"]["instances"]["device"]
    assert sum(d["vendor"] == "10de" and d["class"] == "0302" for d in devices) == 8


def test_config_option_and_bad_config(tmp_path: Path) -> None:
    runner = CliRunner()
    conf = HOSTS / "nvidia-8gpu" / "gpu-operator.conf"
    out = runner.invoke(cli, ["discover", "--host-root", GPU, "--config", str(conf)]).output
    assert "feature.node.kubernetes.io/pci-10de.present=true" in out
    bad = tmp_path / "bad.conf"
    bad.write_text("sources: {pci: {deviceLabelFields: [colour]}}\n")
    result = runner.invoke(cli, ["discover", "--host-root", GPU, "--config", str(bad)])
    assert result.exit_code == 0
    assert "feature.node.kubernetes.io/pci-0302_10de.present=true" in result.stdout  # default kept
    assert "sources.pci.deviceLabelFields" in result.stderr
    missing = runner.invoke(cli, ["discover", "--config", str(tmp_path / "nope.conf")])
    assert missing.exit_code == 2 and "nope.conf" in missing.output


def test_publish_needs_a_node_name() -> None:
    result = CliRunner(env={"NODE_NAME": ""}).invoke(cli, ["discover", "--publish", "--oneshot"])
    assert result.exit_code == 2 and "--node-name" in result.output
