"""NFD custom rules: evaluation over raw features (pure), and over real fake host trees end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from sro.host.reading import Problem
from sro.host.root import HostRoot
from sro.nfd.expressions import parse_expr
from sro.nfd.matching import match_value
from sro.nfd.model import Rule
from sro.nfd.rules import parse_rules
from sro.nfd.templating import render_labels
from sro.node.discovery.commands import discover
from sro.node.discovery.config import Config, parse_config
from sro.node.discovery.custom import FeatureView, evaluate, sources_used
from sro.node.discovery.features import Features, SourceResult
from sro.node.discovery.labeling import build_labels, keep_stale
from sro.node.discovery.sources import SOURCE_NAMES, SOURCES

NFD = "feature.node.kubernetes.io/"
HOSTS = Path(__file__).resolve().parent.parent / "hosts"

RESULTS = (
    SourceResult("cpu", Features(flags={"cpuid": frozenset({"AVX", "AVX2", "SSE42"})},
                                 attributes={"topology": {"hardware_multithreading": "true"}})),
    SourceResult("kernel", Features(
        flags={"loadedmodule": frozenset({"mlx5_ib", "ib_uverbs", "rdma_ucm"})},
        attributes={"version": {"full": "6.1.0-18-amd64", "major": "6", "minor": "1", "revision": "0"},
                    "config": {"X86": "y", "MODULES_THING": "m", "LSM": "landlock,apparmor", "HZ": "250"}})),
    SourceResult("memory", Features(attributes={"numa": {"is_numa": "false", "node_count": "1"}})),
    SourceResult("pci", Features(instances={"device": (
        {"class": "0300", "vendor": "1a03", "device": "2000"},
        {"class": "0207", "vendor": "15b3", "device": "101b", "sriov_totalvfs": "8"},
        {"class": "0302", "vendor": "10de", "device": "20b0"},
        {"class": "0302", "vendor": "10de", "device": "2330"},
    )})),
    SourceResult("system", Features(attributes={"osrelease": {"ID": "debian", "VERSION_ID": "12.4"}})),
    SourceResult("usb", Features(instances={"device": ({"class": "ff", "vendor": "046b", "device": "ff01"},)})),
    SourceResult("local", Features(attributes={"label": {NFD + "rack": "r12"}, "feature": {NFD + "rack": "r12"}})),
    SourceResult("custom", Features(attributes={"name": {"nodename": "gpu-07"}})),
)  # fmt: skip


def labels_of(
    text: str, results: tuple[SourceResult, ...] = RESULTS, builtins: bool = False
) -> dict[str, str]:
    rules, problems = parse_rules(yaml.safe_load(text))
    assert problems == ()
    labels, warnings = evaluate(results, rules, builtins=builtins)
    assert warnings == []
    return labels


def one(feature: str, key: str, op: str, *values: str, version: bool = False) -> dict[str, str]:
    expr: dict[str, object] = {"op": op, "value": list(values)} if values else {"op": op}
    if version:
        expr["type"] = "version"
    doc = [
        {
            "name": "t",
            "labels": {"hit": "yes"},
            "matchFeatures": [{"feature": feature, "matchExpressions": {key: expr}}],
        }
    ]
    return labels_of(yaml.safe_dump(doc))


@pytest.mark.parametrize(
    ("feature", "key", "op", "values", "hit"),
    [
        ("pci.device", "vendor", "In", ("15b3", "8086"), True),
        ("pci.device", "vendor", "In", ("8086",), False),
        ("pci.device", "vendor", "NotIn", ("10de", "15b3", "1a03"), False),
        ("pci.device", "vendor", "NotIn", ("10de",), True),  # any one instance suffices
        ("pci.device", "device", "InRegexp", ("^23",), True),
        ("pci.device", "sriov_totalvfs", "Exists", (), True),
        ("pci.device", "sriov_totalvfs", "Gt", ("8",), False),
        ("pci.device", "sriov_totalvfs", "Ge", ("8",), True),
        ("pci.device", "sriov_totalvfs", "GtLt", ("4", "16"), True),
        ("pci.device", "serial", "Exists", (), False),
        ("usb.device", "vendor", "In", ("046b",), True),
        ("kernel.loadedmodule", "mlx5_ib", "Exists", (), True),
        ("kernel.loadedmodule", "nouveau", "DoesNotExist", (), True),
        ("kernel.loadedmodule", "nouveau", "Exists", (), False),
        ("kernel.config", "X86", "In", ("y",), True),
        ("kernel.config", "LSM", "InRegexp", ("apparmor",), True),
        ("kernel.config", "HZ", "Lt", ("300",), True),
        ("kernel.config", "HZ", "Le", ("249",), False),
        ("kernel.config", "LSM", "Gt", ("1",), False),  # not a number: no match, no crash
        ("kernel.config", "MISSING", "NotIn", ("y",), False),  # NFD: only DoesNotExist matches a missing key
        ("kernel.config", "MISSING", "DoesNotExist", (), True),
        ("kernel.version", "major", "GeLe", ("5", "6"), True),
        ("kernel.version", "minor", "GtLt", ("1", "3"), False),
        ("cpu.cpuid", "AVX2", "Exists", (), True),
        ("cpu.cpuid", "AVX512F", "Exists", (), False),
        ("cpu.topology", "hardware_multithreading", "IsTrue", (), True),
        ("memory.numa", "is_numa", "IsFalse", (), True),
        ("memory.numa", "node_count", "Gt", ("1",), False),
        ("system.osrelease", "ID", "In", ("debian",), True),
        ("system.osrelease", "VERSION_ID.major", "Ge", ("12",), True),
        ("system.osrelease", "VERSION_ID.minor", "In", ("4",), True),
        ("system.name", "nodename", "InRegexp", ("^gpu-0[0-9]$",), True),
        ("local.label", NFD + "rack", "In", ("r12",), True),
        ("storage.block", "rotational", "In", ("0",), False),  # source not in this pass: no match
    ],
)  # fmt: skip
def test_ops_on_each_feature(feature: str, key: str, op: str, values: tuple[str, ...], hit: bool) -> None:
    assert one(feature, key, op, *values) == ({NFD + "hit": "yes"} if hit else {})


@pytest.mark.parametrize(
    ("op", "values", "value", "hit"),
    [
        ("Gt", ("6.1",), "6.1.0-18-amd64", False),
        ("Ge", ("6.1",), "6.1.0-18-amd64", True),
        ("Lt", ("6.10",), "6.9.2", True),  # numeric per part, not string order
        ("GtLt", ("5.4", "6.2"), "6.1.0", True),
        ("GeLe", ("5", "5.15.200"), "5.15.0-1042-nvidia", True),
        ("Gt", ("1",), "not-a-version", False),
    ],
)
def test_version_type(op: str, values: tuple[str, ...], value: str, hit: bool) -> None:
    expr = parse_expr({"op": op, "value": list(values), "type": "version"}, "x")
    assert match_value(expr, True, value) is hit


def test_instance_expressions_hold_on_one_same_instance() -> None:
    both = "[{name: t, labels: {hit: 'y'}, matchFeatures: [{feature: pci.device, matchExpressions: {vendor: {op: In, value: ['15b3']}, class: {op: In, value: [%s]}}}]}]"
    assert labels_of(both % "'0207'") == {NFD + "hit": "y"}
    assert labels_of(both % "'0302'") == {}  # a 15b3 device and a 0302 device, but not one device with both


def test_match_features_is_and_match_any_is_or() -> None:
    text = """
- name: t
  labels: {hit: "y"}
  matchFeatures:
    - {feature: cpu.cpuid, matchExpressions: {AVX: {op: Exists}}}
  matchAny:
    - matchFeatures: [{feature: kernel.loadedmodule, matchExpressions: {nouveau: {op: Exists}}}]
    - matchFeatures: [{feature: pci.device, matchExpressions: {vendor: {op: In, value: ["10de"]}}}]
"""
    assert labels_of(text) == {NFD + "hit": "y"}
    assert labels_of(text.replace("AVX:", "AVX512F:")) == {}
    assert labels_of(text.replace('"10de"', '"dead"')) == {}
    assert labels_of("[{name: always, labels: {a: b}}]") == {NFD + "a": "b"}  # no matcher: NFD matches


def test_match_name() -> None:
    text = "[{name: t, labels: {hit: y}, matchFeatures: [{feature: cpu.cpuid, matchName: {op: InRegexp, value: ['^AVX5']}}]}]"
    assert labels_of(text) == {}
    assert labels_of(text.replace("AVX5", "AVX")) == {NFD + "hit": "y"}


def test_dynamic_values_templates_and_backreferences() -> None:
    text = """
- name: lsm
  labels: {lsm: "@kernel.config.LSM", kernel: "@kernel.version.major"}
  vars: {gpu.vendor: "10de"}
- name: gpus
  labelsTemplate: |
    {{range .pci.device}}gpu-{{.device}}=present
    {{end}}
  matchFeatures:
    - {feature: pci.device, matchExpressions: {vendor: {op: In, value: ["10de"]}}}
- name: flags
  labelsTemplate: "{{range .cpu.cpuid -}}\\n    {{.Name}}=on\\n{{end}}"
  matchFeatures: [{feature: cpu.cpuid, matchName: {op: InRegexp, value: ["^AVX"]}}]
- name: after
  labels: {vendor.example.com/stacked: "true"}
  matchFeatures:
    - {feature: rule.matched, matchExpressions: {gpu-2330: {op: In, value: [present]}, gpu.vendor: {op: In, value: ["10de"]}}}
"""
    assert labels_of(text) == {
        NFD + "lsm": "landlock,apparmor", NFD + "kernel": "6",
        NFD + "gpu-20b0": "present", NFD + "gpu-2330": "present",
        NFD + "AVX": "on", NFD + "AVX2": "on",
        "vendor.example.com/stacked": "true",
    }  # fmt: skip


def test_unresolvable_and_reserved_labels_are_warnings() -> None:
    rules, _ = parse_rules(
        yaml.safe_load("[{name: t, labels: {a: '@kernel.config.NOPE', kubernetes.io/x: 'y', ok: 'z'}}]")
    )
    labels, warnings = evaluate(RESULTS, rules, builtins=False)
    assert labels == {NFD + "ok": "z"}
    assert [w.path for w in warnings] == ["sources.custom[0]", "sources.custom[0]"]
    assert "NOPE" in warnings[0].message and "reserved" in warnings[1].message
    bad, why = render_labels("{{range .pci.device}}no-equals-sign\n{{end}}", {"pci": {"device": [{}]}})
    assert bad == {} and "not key=value" in why[0]


def test_builtin_rdma_rules() -> None:
    labels, _ = evaluate(RESULTS, ())
    assert labels == {NFD + "custom-rdma.capable": "true", NFD + "custom-rdma.available": "true"}
    no_rdma = tuple(r for r in RESULTS if r.source not in ("pci", "kernel"))
    assert evaluate(no_rdma, ()) == ({}, [])


def test_later_rules_override_earlier_and_config_overrides_builtins() -> None:
    text = "[{name: a, labels: {custom-rdma.capable: 'no', x: '1'}}, {name: b, labels: {x: '2'}}]"
    rules, _ = parse_rules(yaml.safe_load(text))
    labels, _ = evaluate(RESULTS, rules)
    assert labels[NFD + "custom-rdma.capable"] == "no" and labels[NFD + "x"] == "2"


def test_kernel_config_values_are_nfds_raw_ones() -> None:
    view = FeatureView(RESULTS)
    fs = view.get("kernel.config")
    assert fs is not None and fs.attrs["X86"] == "y" and fs.attrs["HZ"] == "250"
    assert fs.attrs["MODULES_THING"] == "m", "rules tell built-in (y) from module (m)"
    assert view.get("pci.nothing") is None and view.get("storage.block") is None


def test_label_sources_and_degraded_reads() -> None:
    config = parse_config("sources: {custom: [{name: n, labels: {n: 'v'}}]}")
    labeling = build_labels(RESULTS, config, SOURCES)
    assert labeling.labels[NFD + "n"] == "v" and labeling.labels[NFD + "custom-rdma.capable"] == "true"
    off = parse_config(
        "core: {labelSources: [all, -custom]}\nsources: {custom: [{name: n, labels: {n: 'v'}}]}"
    )
    assert not any(k.endswith(("/n", "rdma.capable")) for k in build_labels(RESULTS, off, SOURCES).labels)
    # NFD runs custom rules even when featureSources names only some feature sources
    only_pci = parse_config("core: {featureSources: [pci, kernel]}")
    assert only_pci.label_enabled("custom")
    # a failed PCI read: the built-in rdma rule reads pci, so custom labels are kept from the last pass
    failed = tuple(
        SourceResult(r.source, r.features, (Problem("/sys/bus/pci", "EIO"),)) if r.source == "pci" else r
        for r in RESULTS
    )
    degraded = build_labels(failed, Config(), SOURCES)
    assert "custom" in degraded.degraded
    assert keep_stale(degraded, SOURCE_NAMES)(NFD + "custom-rdma.capable")
    assert "usb" not in sources_used(()) and {"pci", "kernel"} <= sources_used(())


def test_whitelist_and_validity_apply_to_custom_labels() -> None:
    config = parse_config(
        "core: {labelWhiteList: '^(custom-|n$|bad)'}\n"
        "sources: {custom: [{name: n, labels: {n: 'v', bad: 'has space', other.io/kept: 'k'}}]}"
    )
    labeling = build_labels(RESULTS, config, SOURCES)
    assert labeling.labels == {NFD + "n": "v", NFD + "custom-rdma.capable": "true",
                               NFD + "custom-rdma.available": "true"}  # fmt: skip
    assert any(NFD + "bad" in w.path for w in labeling.warnings)


def _host_with_modules(tmp_path: Path, modules: list[str]) -> HostRoot:
    root = tmp_path / "root"
    shutil.copytree(HOSTS / "nvidia-8gpu" / "root", root, symlinks=True)
    (root / "proc/modules").write_text("".join(f"{m} 57344 0 - Live 0x0000000000000000\n" for m in modules))
    return HostRoot.at(root)


def test_rdma_on_the_8gpu_host_tree(tmp_path: Path) -> None:
    """The 8-GPU tree's ConnectX NICs: capable always; available once ib_uverbs and rdma_ucm are loaded."""
    plain = discover(HostRoot.at(HOSTS / "nvidia-8gpu" / "root"), Config()).labels
    assert plain[NFD + "custom-rdma.capable"] == "true" and NFD + "custom-rdma.available" not in plain
    loaded = discover(_host_with_modules(tmp_path, ["mlx5_ib", "ib_uverbs", "rdma_ucm"]), Config()).labels
    assert loaded[NFD + "custom-rdma.available"] == "true"
    cpu_only = discover(HostRoot.at(HOSTS / "cpu-only" / "root"), Config()).labels
    assert not any("custom-rdma" in k for k in cpu_only)


def test_bad_rules_never_stop_a_pass() -> None:
    config = parse_config(
        (HOSTS / "nvidia-8gpu" / "custom.conf").read_text()
        + "    - {name: broken, labels: {x: y}, matchFeatures: [{feature: pci.device, matchExpressions: {vendor: {op: Equal}}}]}\n",
        "nfd-worker.conf",
    )
    assert [p.path for p in config.problems] == [
        "nfd-worker.conf: sources.custom[7].matchFeatures[0].matchExpressions.vendor.op"
    ]
    labeling = discover(HostRoot.at(HOSTS / "nvidia-8gpu" / "root"), config)
    assert labeling.labels[NFD + "rdma.infiniband"] == "true" and labeling.problems == ()
    assert any("Equal" in w.message for w in labeling.warnings)


def test_rules_in_code_are_frozen() -> None:
    rule = Rule("x", "here")
    with pytest.raises(AttributeError):
        rule.name = "y"  # type: ignore[misc]


CUSTOM_D = "etc/kubernetes/node-feature-discovery/custom.d"
RULE = "- {{name: {0}, labels: {{{0}: 'true'}}, matchFeatures: [{{feature: kernel.loadedmodule, matchExpressions: {{mlx5_ib: {{op: Exists}}}}}}]}}\n"


def test_custom_d_files_as_nfd_reads_them(tmp_path: Path) -> None:
    host = _host_with_modules(tmp_path, ["mlx5_ib"])
    d = tmp_path / "root" / CUSTOM_D
    (d / "cm" / "deeper").mkdir(parents=True)
    (d / "top.yaml").write_text(RULE.format("top"))
    (d / "cm" / "mounted.yaml").write_text(RULE.format("mounted"))
    (d / "cm" / "deeper" / "too-deep.yaml").write_text(RULE.format("deep"))  # NFD reads one level only
    (d / ".hidden.yaml").write_text(RULE.format("hidden"))
    (d / "broken.yaml").write_text("- {name: [")
    (d / "badrule.yaml").write_text(
        RULE.format("good") + "- {name: bad, labels: {a: b}, matchFeatures: [{feature: nope}]}\n"
    )
    labeling = discover(host, Config())
    custom = {
        k for k in labeling.labels if k.rpartition("/")[2] in ("top", "mounted", "good", "deep", "hidden")
    }
    assert custom == {NFD + "top", NFD + "mounted", NFD + "good"}
    warned = {w.path: w.message for w in labeling.warnings}
    assert "not valid YAML" in warned[str(d / "broken.yaml")]
    assert "unknown feature 'nope'" in warned[f"{d / 'badrule.yaml'}[1].matchFeatures[0].feature"]
    assert labeling.problems == () and "custom" not in labeling.degraded


def test_custom_d_read_failure_keeps_old_custom_labels(tmp_path: Path) -> None:
    host = _host_with_modules(tmp_path, [])
    d = tmp_path / "root" / CUSTOM_D
    d.mkdir(parents=True)
    (d / "huge.yaml").write_text("#" * (300 * 1024))  # over the size limit: a failed read
    labeling = discover(host, Config())
    assert "custom" in labeling.degraded and labeling.problems


def test_fake_hosts_rules_produce_no_warnings() -> None:
    fpga = discover(HostRoot.at(HOSTS / "fpga-solarflare" / "root"), Config())
    assert fpga.warnings == () and fpga.labels[NFD + "nic.solarflare"] == "true"
    conf = parse_config((HOSTS / "nvidia-8gpu" / "custom.conf").read_text())
    gpu = discover(HostRoot.at(HOSTS / "nvidia-8gpu" / "root"), conf)
    assert gpu.warnings == () and gpu.labels["example.com/gpudirect-rdma"] == "true"
