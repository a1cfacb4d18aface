"""The node's device-health report: the device plugin's file, discovery's NodeFeature features.

Why a file and then a NodeFeature: the operator repairs nodes (cordon, evict, reset, reboot) from
the faults their devices report, but least privilege forbids the agent that sees the faults — the
device plugin, which mounts no API token — from writing to the API. So the plugin writes its view
as one JSON file per recipe in a hostPath directory (`HEALTH_DIR`, written atomically: a reader
sees the old report or the new one, never half of one), and discovery, which already owns this
node's NodeFeature, carries it there as NFD features (strings only, as NFD's schema asks). The
operator reads NodeFeatures anyway; `reports_from_nodefeature` gives it the reports back.

What a report says (`HealthReport`): the devices the recipe's plugin serves, the active faults
(`DeviceFault`: only devices with a fault the health rules of `sro.devices.health` count — a
sticky fault still active or within its quiet period; Xids the health config ignores never
appear), which pods hold which device (from the kubelet's pod-resources API: the evictions of a
`restart-workload` or `reset-device` repair touch only them) and the boot the report was made in
(`boot_id`: a reboot is over when it changes). Device ids are the physical device's index as
the driver numbers it ("3"), the name `sro simulate fault --device 3`, `nvidia-smi -i 3` and the
`GpuHealthy` condition's message use; a time-sliced replica or a MIG device is reported as its
GPU, which is what a reset acts on.

Pure except `write_report`, `read_reports` and `boot_id` (small, named I/O). Every decoder
returns None (or skips the bad part) on malformed input and never raises: the report crosses
two processes and the API, and a bad one must cost one node's report, not the operator's pass.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sro.api.nfd_crds import NODE_NAME_LABEL
from sro.api.timestamps import parse_stamp

log = logging.getLogger(__name__)

HEALTH_DIR: Final = "/var/lib/sro/health"
SIM_BOOT_ID: Final = "run/sro/boot_id"  # under a simulated driver's root: its boot's id
PROC_BOOT_ID: Final = "/proc/sys/kernel/random/boot_id"
SUFFIX: Final = ".json"
MAX_BYTES: Final = 1 << 20  # a report is a few KiB; anything this big is not one

HEALTH_FEATURE: Final = "sro.dev/health"  # instances: one per faulty device
HOLDERS_FEATURE: Final = "sro.dev/holders"  # instances: one per (device, pod)
BOOT_FEATURE: Final = "sro.dev/boot"  # attributes: recipe -> boot id
DEVICES_FEATURE: Final = "sro.dev/health.devices"  # attributes: recipe -> "id1,id2"
RESOURCE_FEATURE: Final = "sro.dev/health.resource"  # attributes: recipe -> resource name
UPDATED_FEATURE: Final = "sro.dev/health.updated"  # attributes: recipe -> RFC 3339 time

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")  # a recipe's name (a DNS label-ish)
_ID = re.compile(r"^[^,\s]{1,128}$")  # a device id: no separator, no blanks
_POD = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_XIDS = re.compile(r"^(\d{1,6}(,\d{1,6})*)?$")
_DETAIL_MAX = 1024


@dataclass(frozen=True)
class DeviceFault:
    """One device's active fault: the Xids seen on it (none for a fault without one, e.g. the
    health event source lost) and the health rules' reason, for people."""

    device: str
    xids: tuple[int, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class HealthReport:
    """One recipe's device plugin's view of its node's devices."""

    recipe: str
    resource: str
    node: str
    boot_id: str
    updated: str  # RFC 3339, UTC, `...Z`
    devices: tuple[str, ...] = ()
    faults: tuple[DeviceFault, ...] = ()
    holders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def fault_of(self, device: str) -> DeviceFault | None:
        return next((f for f in self.faults if f.device == device), None)

    def same_content(self, other: HealthReport | None) -> bool:
        """Equal but for `updated`: the writer rewrites the file only when this is False."""
        return other is not None and _doc(self, with_updated=False) == _doc(other, with_updated=False)

    def to_json(self) -> str:
        return json.dumps(_doc(self), sort_keys=True, indent=1) + "\n"


def _doc(r: HealthReport, with_updated: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "recipe": r.recipe,
        "resource": r.resource,
        "node": r.node,
        "bootID": r.boot_id,
        "devices": list(r.devices),
        "faults": [
            {"device": f.device, "xids": list(f.xids), "detail": f.detail}
            for f in sorted(r.faults, key=lambda f: _device_order(f.device))
        ],
        "holders": {d: sorted(p) for d, p in sorted(r.holders.items()) if p},
    }
    if with_updated:
        doc["updated"] = r.updated
    return doc


def _device_order(device: str) -> tuple[int, str]:
    return (0, device.zfill(8)) if device.isdigit() else (1, device)


# --- the file's codec ----------------------------------------------------------------------


def _str(value: object, pattern: re.Pattern[str] | None = None, empty: bool = False) -> str | None:
    if not isinstance(value, str) or (not value and not empty):
        return None
    if pattern is not None and value and not pattern.match(value):
        return None
    return value


def _xids(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list) or len(value) > 64:
        return None
    if any(isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < 1_000_000 for x in value):
        return None
    return tuple(value)


def _fault(value: object, devices: frozenset[str]) -> DeviceFault | None:
    if not isinstance(value, Mapping) or set(value) - {"device", "xids", "detail"}:
        return None
    device = _str(value.get("device"), _ID)
    xids = _xids(value.get("xids", []))
    detail = _str(value.get("detail", ""), empty=True)
    if device is None or device not in devices or xids is None or detail is None:
        return None
    return DeviceFault(device, xids, detail[:_DETAIL_MAX])


def _holders(value: object, devices: frozenset[str]) -> dict[str, tuple[str, ...]] | None:
    if not isinstance(value, Mapping):
        return None
    out: dict[str, tuple[str, ...]] = {}
    for device, pods in value.items():
        if not isinstance(device, str) or device not in devices or not isinstance(pods, list):
            return None
        if any(_str(p, _POD) is None for p in pods):
            return None
        out[device] = tuple(sorted(set(pods)))
    return out


def _updated(value: object) -> str | None:
    text = _str(value)
    return text if text is not None and text.endswith("Z") and parse_stamp(text) is not None else None


def from_json(text: object) -> HealthReport | None:
    """The report `text` holds, or None for anything that is not a whole, valid one."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            return None
    if not isinstance(text, str) or len(text) > MAX_BYTES:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return from_doc(doc)


def from_doc(doc: object) -> HealthReport | None:
    """The report a decoded JSON document is, or None."""
    known = {"recipe", "resource", "node", "bootID", "updated", "devices", "faults", "holders"}
    if not isinstance(doc, Mapping) or set(doc) - known:
        return None
    recipe = _str(doc.get("recipe"), _NAME)
    resource = _str(doc.get("resource"))
    node = _str(doc.get("node", ""), empty=True)
    boot = _str(doc.get("bootID", ""), empty=True)
    updated = _updated(doc.get("updated"))
    devices = doc.get("devices", [])
    if None in (recipe, resource, node, boot, updated) or not isinstance(devices, list):
        return None
    if any(_str(d, _ID) is None for d in devices) or len(set(devices)) != len(devices):
        return None
    known_devices = frozenset(devices)
    raw_faults = doc.get("faults", [])
    if not isinstance(raw_faults, list):
        return None
    faults = [_fault(f, known_devices) for f in raw_faults]
    holders = _holders(doc.get("holders", {}), known_devices)
    if any(f is None for f in faults) or holders is None:
        return None
    if len({f.device for f in faults if f is not None}) != len(faults):
        return None
    assert recipe and resource and node is not None and boot is not None and updated
    return HealthReport(
        recipe,
        resource,
        node,
        boot,
        updated,
        tuple(devices),
        tuple(f for f in faults if f is not None),
        holders,
    )


# --- the NodeFeature's features ------------------------------------------------------------


def to_features(reports: Iterable[HealthReport]) -> dict[str, Any]:
    """The reports as NodeFeature `spec.features` sections (strings only); {} for no report."""
    ordered = sorted(reports, key=lambda r: r.recipe)
    if not ordered:
        return {}
    health = [
        {
            "attributes": {
                "recipe": r.recipe,
                "device": f.device,
                "xids": ",".join(str(x) for x in f.xids),
                "detail": f.detail,
            }
        }
        for r in ordered
        for f in sorted(r.faults, key=lambda f: _device_order(f.device))
    ]
    holders = [
        {"attributes": {"recipe": r.recipe, "device": device, "pod": pod}}
        for r in ordered
        for device in sorted(r.holders, key=_device_order)
        for pod in sorted(r.holders[device])
    ]
    return {
        "instances": {HEALTH_FEATURE: {"elements": health}, HOLDERS_FEATURE: {"elements": holders}},
        "attributes": {
            BOOT_FEATURE: {"elements": {r.recipe: r.boot_id for r in ordered}},
            DEVICES_FEATURE: {"elements": {r.recipe: ",".join(r.devices) for r in ordered}},
            RESOURCE_FEATURE: {"elements": {r.recipe: r.resource for r in ordered}},
            UPDATED_FEATURE: {"elements": {r.recipe: r.updated for r in ordered}},
        },
    }


def merge_features(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`base` (NodeFeature `spec.features`) with `extra`'s named features added (theirs win)."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in base.items()}
    for section, named in extra.items():
        current = out.get(section)
        out[section] = {**(current if isinstance(current, Mapping) else {}), **named}
        out[section] = dict(sorted(out[section].items()))
    return out


def _section(features: Mapping[str, Any], kind: str, name: str) -> Any:
    section = features.get(kind)
    body = section.get(name) if isinstance(section, Mapping) else None
    return body.get("elements") if isinstance(body, Mapping) else None


def _attrs(features: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    elements = _section(features, "attributes", name)
    return elements if isinstance(elements, Mapping) else {}


def _instances(features: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    elements = _section(features, "instances", name)
    if not isinstance(elements, list):
        return []
    return [
        e["attributes"]
        for e in elements
        if isinstance(e, Mapping) and isinstance(e.get("attributes"), Mapping)
    ]


def _node_of(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata")
    if not isinstance(md, Mapping):
        return ""
    labels = md.get("labels")
    node = labels.get(NODE_NAME_LABEL) if isinstance(labels, Mapping) else None
    if not isinstance(node, str) or not node:
        node = md.get("name")
    return node if isinstance(node, str) else ""


def reports_from_nodefeature(obj: Mapping[str, Any]) -> dict[str, HealthReport]:
    """recipe -> its report, from a NodeFeature object; a malformed part is skipped, never raised."""
    try:
        return _reports(obj)
    except Exception:  # a shape no check above foresaw: one node's report lost, not the caller's pass
        log.debug("malformed health report in a NodeFeature; ignored", exc_info=True)
        return {}


def _reports(obj: Mapping[str, Any]) -> dict[str, HealthReport]:
    if not isinstance(obj, Mapping):
        return {}
    spec = obj.get("spec")
    features = spec.get("features") if isinstance(spec, Mapping) else None
    if not isinstance(features, Mapping):
        return {}
    node = _node_of(obj)
    boots, resources, updated = (
        _attrs(features, BOOT_FEATURE),
        _attrs(features, RESOURCE_FEATURE),
        _attrs(features, UPDATED_FEATURE),
    )
    out: dict[str, HealthReport] = {}
    for recipe, listed in _attrs(features, DEVICES_FEATURE).items():
        if _str(recipe, _NAME) is None or not isinstance(listed, str):
            continue
        devices = tuple(d for d in listed.split(",") if d) if listed else ()
        resource = _str(resources.get(recipe))
        stamp = _updated(updated.get(recipe))
        boot = _str(boots.get(recipe, ""), empty=True)
        if resource is None or stamp is None or boot is None:
            continue
        if any(_ID.match(d) is None for d in devices) or len(set(devices)) != len(devices):
            continue
        known = frozenset(devices)
        faults: dict[str, DeviceFault] = {}
        for a in _instances(features, HEALTH_FEATURE):
            if a.get("recipe") != recipe:
                continue
            device, xids, detail = a.get("device"), a.get("xids", ""), a.get("detail", "")
            if not isinstance(device, str) or device not in known or device in faults:
                continue
            if not isinstance(xids, str) or not _XIDS.match(xids) or not isinstance(detail, str):
                continue
            faults[device] = DeviceFault(
                device, tuple(int(x) for x in xids.split(",") if x), detail[:_DETAIL_MAX]
            )
        holders: dict[str, set[str]] = {}
        for a in _instances(features, HOLDERS_FEATURE):
            device, pod = a.get("device"), a.get("pod")
            if a.get("recipe") != recipe or not isinstance(device, str) or device not in known:
                continue
            if isinstance(pod, str) and _POD.match(pod):
                holders.setdefault(device, set()).add(pod)
        out[recipe] = HealthReport(
            recipe,
            resource,
            node,
            boot,
            stamp,
            devices,
            tuple(faults[d] for d in sorted(faults, key=_device_order)),
            {d: tuple(sorted(p)) for d, p in sorted(holders.items())},
        )
    return out


# --- I/O: the report file, the boot id -------------------------------------------------------


def report_path(directory: Path, recipe: str) -> Path:
    return directory / f"{recipe}{SUFFIX}"


def write_report(directory: Path, report: HealthReport) -> Path:
    """Write `report` as `<directory>/<recipe>.json` atomically (a temporary file renamed over it)."""
    if _NAME.match(report.recipe) is None:
        raise ValueError(f"recipe name {report.recipe!r} cannot name a report file")
    directory.mkdir(parents=True, exist_ok=True)
    target = report_path(directory, report.recipe)
    fd, tmp = tempfile.mkstemp(prefix=f".{report.recipe}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(report.to_json())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_reports(directory: Path) -> list[HealthReport]:
    """Every valid report in `directory` (none when it is missing); a bad file is logged, skipped."""
    try:
        files = sorted(
            p for p in directory.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith(".")
        )
    except OSError:
        return []
    out = []
    for path in files:
        try:
            text = path.read_bytes()[: MAX_BYTES + 1]
        except OSError as e:
            log.warning("health report %s: cannot read: %s", path, e.strerror)
            continue
        report = from_json(text)
        if report is None or report_path(directory, report.recipe) != path:
            log.warning("health report %s: not a valid report; ignored", path)
            continue
        out.append(report)
    return out


def snapshot(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """The reports' (name, mtime_ns, size): a change in it means a report changed (for a poll)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return ()
    out = []
    for e in entries:
        if not e.name.endswith(SUFFIX) or e.name.startswith("."):
            continue
        try:
            st = e.stat()
        except OSError:
            continue
        out.append((e.name, st.st_mtime_ns, st.st_size))
    return tuple(sorted(out))


def boot_id(driver_root: str | Path, proc_boot_id: str | Path = PROC_BOOT_ID) -> str:
    """This node's boot: a simulated driver's own (`<driver_root>/run/sro/boot_id`, which its
    simulated reboot renews) where there is one, else the kernel's; "" when neither is readable."""
    for path in (Path(driver_root) / SIM_BOOT_ID, Path(proc_boot_id)):
        try:
            text = path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            return text
    return ""
