"""NFD's legacy rule format (`matchOn`: pciId, usbId, loadedKMod, cpuId, kConfig, nodename),
translated into `matchFeatures` terms so that evaluation knows one format only.

Why apart: only the worker's custom rules may use it (NodeFeatureRule objects may not), and it is
NFD's older language with its own fields. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sro.nfd.expressions import parse_expr, scalar
from sro.nfd.model import Expr, Rule, RuleError, Term, exists, refuse_unknown


# Legacy `matchOn` matchers -> (feature, how each listed item becomes an expression).
def parse_legacy(doc: Mapping[str, Any], name: str, path: str) -> Rule:
    """NFD's legacy rule: `custom-<name>=<value|true>` when any matcher of `matchOn` holds (OR of ANDs)."""
    refuse_unknown(doc, ("name", "value", "matchOn"), path, " in a legacy (matchOn) rule")
    matchers = doc.get("matchOn")
    if not isinstance(matchers, list) or not matchers:
        raise RuleError(f"{path}.matchOn", "expected a non-empty list of matchers")
    groups = []
    for j, m in enumerate(matchers):
        mpath = f"{path}.matchOn[{j}]"
        if not isinstance(m, Mapping) or not m:
            raise RuleError(mpath, "expected a mapping of pciId, usbId, loadedKMod, cpuId, kConfig, nodename")
        groups.append(tuple(_legacy_term(str(k), v, f"{mpath}.{k}") for k, v in m.items()))
    value = doc.get("value", "true")
    if isinstance(value, Mapping | list) or value is None:
        raise RuleError(f"{path}.value", f"expected a string, got {value!r}")
    key = name.strip() if "/" in name else f"custom-{name.strip()}"  # NFD prefixes legacy names only
    return Rule(name.strip(), path, labels=((key, scalar(value)),), match_any=tuple(groups))


def _legacy_term(kind: str, value: object, path: str) -> Term:
    if kind in ("pciId", "usbId"):
        feature = "pci.device" if kind == "pciId" else "usb.device"
        fields = ("class", "vendor", "device") if kind == "usbId" else ("class", "vendor", "device",
                                                                     "subsystem_vendor", "subsystem_device")  # fmt: skip
        if not isinstance(value, Mapping) or not value:
            raise RuleError(path, f"expected a mapping of {', '.join(fields)} -> list of ids")
        exprs = []
        for key, ids in value.items():
            if key not in fields:
                raise RuleError(f"{path}.{key}", f"unknown field (valid: {', '.join(fields)})")
            exprs.append((str(key), Expr("In", _legacy_list(ids, f"{path}.{key}", lower=True))))
        return Term(feature, tuple(exprs))
    items = _legacy_list(value, path)
    if kind == "loadedKMod":
        return Term("kernel.loadedmodule", exists(*items))
    if kind == "cpuId":
        return Term("cpu.cpuid", exists(*items))
    if kind == "kConfig":
        exprs = []
        for item in items:
            flag, sep, want = item.partition("=")
            # a bare option means "set": built in or a module
            exprs.append((flag, Expr("In", (want,) if sep else ("y", "m"))))
        return Term("kernel.config", tuple(exprs))
    if kind == "nodename":
        return Term(
            "system.name", (("nodename", parse_expr({"op": "InRegexp", "value": list(items)}, path)),)
        )
    raise RuleError(path, "unknown matcher (valid: pciId, usbId, loadedKMod, cpuId, kConfig, nodename)")


def _legacy_list(value: object, path: str, lower: bool = False) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not value
        or any(isinstance(v, Mapping | list) or v is None for v in value)
    ):
        raise RuleError(path, "expected a non-empty list of strings")
    return tuple(scalar(v).lower() if lower else scalar(v) for v in value)
