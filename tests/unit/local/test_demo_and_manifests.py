"""Pure parts of the demo and the manifest loader."""

from __future__ import annotations

import pytest

from sro.demo.commands import summarize
from sro.manifests import components, render


def test_summarize_folds_cpuid_flags_into_one_row() -> None:
    labels = {f"feature.node.kubernetes.io/cpu-cpuid.F{i}": "true" for i in range(10)}
    labels["feature.node.kubernetes.io/kernel-version.major"] = "6"
    rows = summarize(labels)
    assert ("kernel-version.major", "6") in rows
    assert rows[-1][0] == "cpu-cpuid.*" and rows[-1][1].startswith("10 flags: F0, F1")


def test_node_report_renders_with_the_image_and_refuses_missing_values() -> None:
    assert "node-report" in components()
    objs = render("node-report", namespace="ns1", image="localhost/sro:9", pull_policy="Never")
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "localhost/sro:9" and ds["metadata"]["namespace"] == "ns1"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    with pytest.raises(ValueError, match="image"):
        render("node-report", namespace="ns1", pull_policy="Never")
    with pytest.raises(ValueError, match="no manifests"):
        render("no-such-component")


def test_manifests_command_renders_for_any_cluster_and_names_bad_input() -> None:
    from click.testing import CliRunner

    from sro.manifests.commands import manifests

    runner = CliRunner()
    ok = runner.invoke(
        manifests, ["render", "node-report", "--image", "reg.example/sro:1", "--namespace", "gpu"]
    )
    assert ok.exit_code == 0 and "image: reg.example/sro:1" in ok.output and "namespace: gpu" in ok.output
    bad = runner.invoke(manifests, ["render", "nope"])
    assert bad.exit_code != 0 and "no manifests for component 'nope'" in bad.output
    bad_set = runner.invoke(manifests, ["render", "node-report", "--set", "novalue"])
    assert bad_set.exit_code != 0 and "KEY=VALUE" in bad_set.output
