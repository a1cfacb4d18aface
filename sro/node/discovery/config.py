"""NFD worker configuration (`nfd-worker.conf` YAML): the same keys and defaults, parsed strictly.

Why strict but forgiving: an admin switching from NFD brings their worker config; every key NFD
documents means the same here. A bad value must not stop discovery: it is reported as a Problem
naming the field (`sources.pci.deviceLabelFields[2]`) and that one field keeps its default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from sro.api.yamltext import yaml_error
from sro.host.reading import Problem
from sro.nfd.model import Rule
from sro.nfd.rules import parse_rules

# NFD's defaults (worker-configuration-reference).
PCI_CLASS_WHITELIST = ("03", "0b40", "12")
PCI_LABEL_FIELDS = ("class", "vendor")
PCI_FIELDS = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device")
USB_CLASS_WHITELIST = ("0e", "ef", "fe", "ff")
USB_LABEL_FIELDS = ("class", "vendor", "device")
USB_FIELDS = ("class", "vendor", "device", "serial")
CPUID_BLACKLIST = (
    "ADX", "AESNI", "AVX10", "BMI1", "BMI2", "CETIBT", "CETSS", "CLMUL", "CMOV", "CX16", "ERMS",
    "F16C", "HTT", "LZCNT", "MMX", "MMXEXT", "NX", "POPCNT", "RDRAND", "RDSEED", "RDTSCP", "SGX",
    "SGXLC", "SSE", "SSE2", "SSE3", "SSE4", "SSE42", "SSSE3", "TDX_GUEST",
)  # fmt: skip
KERNEL_CONFIG_OPTS = ("NO_HZ", "NO_HZ_IDLE", "NO_HZ_FULL", "PREEMPT")
SLEEP_INTERVAL = 60.0

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Config:
    label_whitelist: re.Pattern[str] | None = None
    sleep_interval: float = SLEEP_INTERVAL  # seconds; <= 0 means discover once
    feature_sources: tuple[str, ...] = ("all",)
    label_sources: tuple[str, ...] = ("all",)
    no_publish: bool = False
    # The NodeFeature API (NFD's `core` options of the same spirit): also write the node's raw
    # features as a NodeFeature object; with no_node_labels, write the labels there too and leave
    # the Node to the operator, which applies a NodeFeature's labels (NFD master's model).
    enable_nodefeature_api: bool = False
    no_node_labels: bool = False
    pci_class_whitelist: tuple[str, ...] = PCI_CLASS_WHITELIST
    pci_label_fields: tuple[str, ...] = PCI_LABEL_FIELDS
    usb_class_whitelist: tuple[str, ...] = USB_CLASS_WHITELIST
    usb_label_fields: tuple[str, ...] = USB_LABEL_FIELDS
    cpuid_blacklist: tuple[str, ...] = CPUID_BLACKLIST
    cpuid_whitelist: tuple[str, ...] = ()
    kernel_config_opts: tuple[str, ...] = KERNEL_CONFIG_OPTS
    kconfig_file: str = ""
    custom_rules: tuple[Rule, ...] = ()  # `sources.custom`; NFD's built-in rules apply besides these
    problems: tuple[Problem, ...] = field(default=(), compare=False)

    def feature_enabled(self, source: str) -> bool:
        return enabled(self.feature_sources, source)

    def label_enabled(self, source: str) -> bool:
        if source == "custom":  # a label source only in NFD: it reads the other sources' features
            return enabled(self.label_sources, source)
        return self.feature_enabled(source) and enabled(self.label_sources, source)


def enabled(selection: tuple[str, ...], source: str) -> bool:
    """NFD's source selection: names, `all`, and `-name` to take one away from `all`."""
    if f"-{source}" in selection:
        return False
    return "all" in selection or source in selection


def parse_duration(value: object) -> float:
    """A Go duration (`60s`, `1m30s`, `500ms`) or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {value!r}")
    return sign * total


class _Fields:
    """Reads typed fields out of the YAML tree, recording a Problem per bad one."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.problems: list[Problem] = []

    def bad(self, path: str, message: str) -> None:
        self.problems.append(Problem(f"{self.where}: {path}", message))

    def section(self, doc: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        value = doc.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.bad(path, f"expected a mapping, got {type(value).__name__}")
            return {}
        return value

    def strings(
        self, doc: Mapping[str, Any], key: str, path: str, default: tuple[str, ...], *, lower: bool = False
    ) -> tuple[str, ...]:
        if key not in doc or doc[key] is None:
            return default
        value = doc[key]
        if not isinstance(value, list):
            self.bad(path, f"expected a list of strings, got {type(value).__name__}; using the default")
            return default
        out = []
        for i, item in enumerate(value):
            if isinstance(item, str | int) and not isinstance(item, bool) and str(item).strip():
                out.append(str(item).strip().lower() if lower else str(item).strip())
            else:
                self.bad(f"{path}[{i}]", f"expected a string, got {item!r}; ignored")
        return tuple(out)


def parse_config(text: str, where: str = "config") -> Config:
    """Parse an NFD worker config document; never raises, problems name the bad field."""
    f = _Fields(where)
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        f.bad("(document)", f"not valid YAML ({yaml_error(e)}); using all defaults")
        return Config(problems=tuple(f.problems))
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        f.bad("(document)", "expected a mapping with `core` and `sources`; using all defaults")
        return Config(problems=tuple(f.problems))
    kwargs: dict[str, Any] = {}
    core = f.section(doc, "core", "core")
    sources = f.section(doc, "sources", "sources")

    wl = core.get("labelWhiteList")
    if wl not in (None, ""):
        try:
            kwargs["label_whitelist"] = re.compile(str(wl))
        except re.error as e:
            f.bad("core.labelWhiteList", f"invalid regular expression ({e}); no whitelist applied")
    if core.get("sleepInterval") is not None:
        try:
            kwargs["sleep_interval"] = parse_duration(core["sleepInterval"])
        except ValueError as e:
            f.bad("core.sleepInterval", f"{e}; using {SLEEP_INTERVAL:g}s")
    # `core.sources` is NFD's deprecated spelling of labelSources + featureSources.
    legacy = f.strings(core, "sources", "core.sources", ("all",), lower=True)
    kwargs["feature_sources"] = f.strings(core, "featureSources", "core.featureSources", legacy, lower=True)
    kwargs["label_sources"] = f.strings(core, "labelSources", "core.labelSources", legacy, lower=True)
    for key, arg in (
        ("noPublish", "no_publish"),
        ("enableNodeFeatureApi", "enable_nodefeature_api"),
        ("noNodeLabels", "no_node_labels"),
    ):
        if key in core:
            if isinstance(core[key], bool):
                kwargs[arg] = core[key]
            else:
                f.bad(f"core.{key}", f"expected true or false, got {core[key]!r}")
    if kwargs.get("no_node_labels") and not kwargs.get("enable_nodefeature_api"):
        f.bad("core.noNodeLabels", "needs core.enableNodeFeatureApi: true (labels would go nowhere); ignored")
        kwargs["no_node_labels"] = False

    pci = f.section(sources, "pci", "sources.pci")
    kwargs["pci_class_whitelist"] = _hex_list(
        f, pci, "deviceClassWhitelist", "sources.pci", PCI_CLASS_WHITELIST
    )
    kwargs["pci_label_fields"] = _label_fields(f, pci, "sources.pci", PCI_FIELDS, PCI_LABEL_FIELDS)
    usb = f.section(sources, "usb", "sources.usb")
    kwargs["usb_class_whitelist"] = _hex_list(
        f, usb, "deviceClassWhitelist", "sources.usb", USB_CLASS_WHITELIST
    )
    kwargs["usb_label_fields"] = _label_fields(f, usb, "sources.usb", USB_FIELDS, USB_LABEL_FIELDS)

    cpuid = f.section(f.section(sources, "cpu", "sources.cpu"), "cpuid", "sources.cpu.cpuid")
    kwargs["cpuid_blacklist"] = f.strings(
        cpuid, "attributeBlacklist", "sources.cpu.cpuid.attributeBlacklist", CPUID_BLACKLIST
    )
    kwargs["cpuid_whitelist"] = f.strings(
        cpuid, "attributeWhitelist", "sources.cpu.cpuid.attributeWhitelist", ()
    )

    kernel = f.section(sources, "kernel", "sources.kernel")
    kwargs["kernel_config_opts"] = f.strings(
        kernel, "configOpts", "sources.kernel.configOpts", KERNEL_CONFIG_OPTS
    )
    if kernel.get("kconfigFile"):
        kwargs["kconfig_file"] = str(kernel["kconfigFile"])
    rules, bad_rules = parse_rules(sources.get("custom"), "sources.custom")
    kwargs["custom_rules"] = rules
    f.problems.extend(Problem(f"{where}: {p.path}", p.message) for p in bad_rules)
    return Config(**kwargs, problems=tuple(f.problems))


def _hex_list(
    f: _Fields, doc: Mapping[str, Any], key: str, where: str, default: tuple[str, ...]
) -> tuple[str, ...]:
    values = f.strings(doc, key, f"{where}.{key}", default, lower=True)
    good = []
    for i, v in enumerate(values):
        if all(c in "0123456789abcdef" for c in v) and 1 <= len(v) <= 6:
            good.append(v)
        else:
            f.bad(f"{where}.{key}[{i}]", f"{v!r} is not a hex class code; ignored")
    return tuple(good)


def _label_fields(
    f: _Fields, doc: Mapping[str, Any], where: str, valid: tuple[str, ...], default: tuple[str, ...]
) -> tuple[str, ...]:
    """NFD orders the fields canonically (not as written), drops unknown ones, and falls back."""
    values = f.strings(doc, "deviceLabelFields", f"{where}.deviceLabelFields", default)
    unknown = [v for v in values if v not in valid]
    if unknown:
        f.bad(f"{where}.deviceLabelFields", f"unknown field(s) {', '.join(unknown)} ignored (valid: {valid})")
    fields = tuple(v for v in valid if v in values)
    if not fields:
        f.bad(f"{where}.deviceLabelFields", f"no valid field left; using the default {list(default)}")
        return default
    return fields
