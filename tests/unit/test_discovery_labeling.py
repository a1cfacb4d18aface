"""NFD worker config parsing (bad fields named, defaults kept) and the pure labeling step."""

from __future__ import annotations

import pytest

from sro.host.reading import Problem
from sro.nfd.matching import label_problem
from sro.node.discovery.config import (
    CPUID_BLACKLIST,
    PCI_CLASS_WHITELIST,
    PCI_LABEL_FIELDS,
    Config,
    parse_config,
    parse_duration,
)
from sro.node.discovery.features import Features, SourceResult
from sro.node.discovery.labeling import build_labels, keep_stale, source_of_key
from sro.node.discovery.sources import SOURCE_NAMES, SOURCES

NFD = "feature.node.kubernetes.io/"


def test_defaults_are_nfds() -> None:
    c = parse_config("")
    assert c.pci_class_whitelist == PCI_CLASS_WHITELIST == ("03", "0b40", "12")
    assert c.pci_label_fields == PCI_LABEL_FIELDS == ("class", "vendor")
    assert c.usb_class_whitelist == ("0e", "ef", "fe", "ff")
    assert "SSE42" in c.cpuid_blacklist and "AVX512F" not in CPUID_BLACKLIST
    assert c.kernel_config_opts == ("NO_HZ", "NO_HZ_IDLE", "NO_HZ_FULL", "PREEMPT")
    assert c.sleep_interval == 60 and c.problems == ()


def test_full_config() -> None:
    c = parse_config(
        """
core:
  labelWhiteList: '^pci-'
  sleepInterval: 1m30s
  featureSources: [all, -usb]
  labelSources: [pci, cpu]
  noPublish: true
sources:
  pci: {deviceClassWhitelist: ["0200", "12"], deviceLabelFields: [device, class]}
  usb: {deviceClassWhitelist: [ff], deviceLabelFields: [vendor]}
  cpu: {cpuid: {attributeWhitelist: [AVX512F]}}
  kernel: {configOpts: [X86], kconfigFile: /tmp/kconfig}
"""
    )
    assert c.problems == ()
    assert c.label_whitelist is not None and c.label_whitelist.pattern == "^pci-"
    assert c.sleep_interval == 90 and c.no_publish
    assert not c.feature_enabled("usb") and c.feature_enabled("pci")
    assert c.label_enabled("pci") and not c.label_enabled("kernel")
    assert c.pci_label_fields == ("class", "device")  # NFD's canonical order, not as written
    assert c.usb_label_fields == ("vendor",) and c.cpuid_whitelist == ("AVX512F",)
    assert c.kernel_config_opts == ("X86",) and c.kconfig_file == "/tmp/kconfig"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("core: {labelWhiteList: '(['}", "core.labelWhiteList"),
        ("core: {sleepInterval: soon}", "core.sleepInterval"),
        ("core: {noPublish: maybe}", "core.noPublish"),
        ("core: [1, 2]", "core"),
        ("sources: {pci: {deviceClassWhitelist: '03'}}", "sources.pci.deviceClassWhitelist"),
        ("sources: {pci: {deviceClassWhitelist: ['03', 'zz']}}", "sources.pci.deviceClassWhitelist[1]"),
        ("sources: {pci: {deviceLabelFields: [colour]}}", "sources.pci.deviceLabelFields"),
        (
            "sources: {cpu: {cpuid: {attributeBlacklist: [AVX, {x: 1}]}}}",
            "sources.cpu.cpuid.attributeBlacklist[1]",
        ),
        ("sources: {custom: {name: x}}", "sources.custom"),
        ("core: {labelSources: [pci, ~]}", "core.labelSources[1]"),
        ("{{{ not yaml", "(document)"),
        ("- a list", "(document)"),
    ],
)
def test_invalid_field_is_named_and_the_rest_kept(text: str, field: str) -> None:
    c = parse_config(text, "nfd-worker.conf")
    assert any(p.path == f"nfd-worker.conf: {field}" for p in c.problems), c.problems
    if "deviceLabelFields" in field:
        assert c.pci_label_fields == PCI_LABEL_FIELDS
    if field == "sources.pci.deviceClassWhitelist[1]":
        assert c.pci_class_whitelist == ("03",)


def test_durations() -> None:
    assert parse_duration("60s") == 60 and parse_duration("500ms") == 0.5 and parse_duration("1h2m3s") == 3723
    assert parse_duration(5) == 5 and parse_duration("0") == 0 and parse_duration("-1s") == -1
    with pytest.raises(ValueError):
        parse_duration("10 seconds")


def _result(source: str, labels: dict[str, str], problems: tuple[Problem, ...] = ()) -> SourceResult:
    return SourceResult(source, Features(attributes={"label": labels}), problems)


def test_whitelist_matches_basename_and_invalid_labels_are_dropped() -> None:
    local = _result("local", {NFD + "pci-fake.present": "true", NFD + "other": "1",
                              NFD + "bad": "no spaces allowed", "example.com/" + "x" * 70: "1"})  # fmt: skip
    labeling = build_labels([local], parse_config("core: {labelWhiteList: '^(pci-|bad|x)'}"), SOURCES)
    assert dict(labeling.labels) == {NFD + "pci-fake.present": "true"}
    assert {p.path for p in labeling.warnings} == {f"label {NFD}bad", "label example.com/" + "x" * 70}


def test_label_validity_rules() -> None:
    assert label_problem(NFD + "cpu-cpuid.AVX", "true") is None
    assert label_problem("example.com/ok", "") is None
    assert label_problem(NFD + "-leading", "true") is not None
    assert label_problem("Bad_Prefix.com/x", "1") is not None
    assert label_problem(NFD + "x", "v" * 64) is not None


def test_degraded_sources_and_stale_keys() -> None:
    failed = _result("local", {}, (Problem("/etc/x", "unreadable"),))
    labeling = build_labels([failed], Config(), SOURCES)
    assert labeling.degraded == {"local"}
    keep = keep_stale(labeling, SOURCE_NAMES)
    assert keep(NFD + "my-feature") and not keep(NFD + "pci-0300_10de.present")
    assert source_of_key(NFD + "cpu-cpuid.AVX", SOURCE_NAMES) == "cpu"
    assert source_of_key("nvidia.com/gpu.count", SOURCE_NAMES) == "accelerators"
    assert source_of_key("sro.dev/simulated-gpu.count", SOURCE_NAMES) == "accelerators"
    assert source_of_key("example.com/thing", SOURCE_NAMES) == "local"
