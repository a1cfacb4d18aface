"""One collection's findings as Prometheus exposition text (pure; text format 0.0.4).

Why render it ourselves, and once per collection: dcgm-exporter prints counters under DCGM's own
names without a `_total` suffix (`DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`, `# TYPE ... counter`), which
prometheus_client's counter families refuse to do, and dashboards query those exact names. The text
is rendered when a collection ends and kept as bytes in the immutable snapshot, so a scrape only
copies bytes (the benchmark measures it against a static-text endpoint).

Labels, as dcgm-exporter writes them (its rendermetrics template): `gpu` (index), `UUID`,
`pci_bus_id` (NVML's `00000000:3B:00.0` form), `device` (`nvidia0`, `sro-simgpu0`), `modelName`,
`GPU_I_PROFILE` and `GPU_I_ID` for a MIG device (with its GPU's index, UUID, bus id and device),
`Hostname`, then the rest in sorted order: `DCGM_FI_DRIVER_VERSION`, `container`, `namespace`,
`pod`, `simulated="true"` on every series of a simulated device, and `vgpu` for a time-sliced replica.
Per-pod series follow `attribution` (one per holding container). sro's own metrics carry `Hostname`.
A custom recipe's device series also carry `resource` (`recipeview`); with `metrics: health` there
are no `DCGM_*` readings, and `sro_device_healthy` carries the holders' pod labels instead.
`sro_device_resets_total` (a simulated driver's resets, `driverstate.read_resets`) has the labels of
`sro_device_healthy` without pods; there is no such count on real hardware (NVML keeps none), so the
series is left out there rather than reported as 0.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sro.devices import fields as f
from sro.devices.health import ALL
from sro.devices.model import Device, DeviceUUID, Inventory, MigDevice
from sro.devices.telemetry import Readings
from sro.node.exporter.attribution import Attribution, PodRef
from sro.node.exporter.nodefacts import NodeFacts
from sro.node.exporter.recipeview import RecipeView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Collected:
    """Everything one collection found; what a source could not give is None or empty."""

    hostname: str
    simulated: bool = False
    inventory: Inventory | None = None
    readings: Readings = field(default_factory=Readings)
    xids: Mapping[DeviceUUID, int] = field(default_factory=dict)  # GPU UUID -> last Xid seen
    unhealthy: frozenset[DeviceUUID] = frozenset()  # GPU/MIG UUIDs, or health.ALL
    pods: Attribution | None = None
    node: NodeFacts | None = None
    up: Mapping[str, bool] = field(default_factory=dict)  # source -> whether it answered fully
    errors: Mapping[str, int] = field(default_factory=dict)  # source -> failures since start
    duration: float = 0.0  # seconds the collection took
    view: RecipeView = field(default_factory=RecipeView)  # telemetry or health only, `resource` label
    # GPU/MIG UUID -> resets so far; None where there is no count (real hardware): no series at all
    resets: Mapping[DeviceUUID, int] | None = None


SRO_METRICS: tuple[tuple[str, str, str], ...] = (
    (
        "sro_device_healthy",
        "gauge",
        "1 when the device plugin would announce the device Healthy (same rules).",
    ),
    (
        "sro_device_resets_total",
        "counter",
        "Resets of the device by sro driver reset (a simulated driver's; kept across restarts and reboots).",
    ),
    (
        "sro_node_devices_allocated",
        "gauge",
        "Device ids of the resource assigned to containers (pod-resources).",
    ),
    ("sro_node_devices_allocatable", "gauge", "Allocatable devices of the resource in the Node's status."),
    (
        "sro_node_stack_state",
        "gauge",
        "1 when the SpecialResource's state is ready on this node (Node labels).",
    ),
    ("sro_exporter_collect_errors_total", "counter", "Collections in which a source failed, by source."),
    ("sro_exporter_source_up", "gauge", "1 when the source answered fully in the last collection."),
    ("sro_exporter_collect_duration_seconds", "gauge", "How long the last collection took."),
)


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{escape(v)}"' for k, v in pairs)


def value(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int) or float(v).is_integer():
        return str(int(v))
    return repr(float(v))


def dcgm_bus_id(bus_id: str) -> str:
    """'0000:3b:00.0' -> '00000000:3B:00.0', as NVML and dcgm-exporter write it."""
    domain, sep, rest = bus_id.partition(":")
    if not sep:
        return bus_id.upper()
    try:
        return f"{int(domain, 16):08X}:{rest.upper()}"
    except ValueError:
        return bus_id.upper()


@dataclass(frozen=True)
class _Entity:
    """A GPU or MIG device and its label strings: one without pods, or one per holding container."""

    uuid: DeviceUUID
    parent: DeviceUUID
    variants: tuple[str, ...]
    plain: str  # without pod labels (sro_device_healthy)


def _entity(
    c: Collected, inv: Inventory, d: Device, m: MigDevice | None, pods: tuple[PodRef, ...]
) -> _Entity:
    head = [
        ("gpu", str(d.index)),
        ("UUID", d.uuid),
        ("pci_bus_id", dcgm_bus_id(d.pci_bus_id)),
        ("device", os.path.basename(d.device_node)),
        ("modelName", d.product),
    ]
    if m is not None:
        head += [("GPU_I_PROFILE", m.profile), ("GPU_I_ID", str(m.gi_id))]
    head.append(("Hostname", c.hostname))
    extra: dict[str, str] = {}
    if inv.driver_version:
        extra["DCGM_FI_DRIVER_VERSION"] = inv.driver_version
    if c.simulated or d.simulated:
        extra["simulated"] = "true"
    if c.view.resource:
        extra["resource"] = c.view.resource_of(d)
    plain = labels([*head, *sorted(extra.items())])
    variants = tuple(labels([*head, *sorted({**extra, **p.labels()}.items())]) for p in pods) or (plain,)
    uuid = m.uuid if m is not None else d.uuid
    return _Entity(uuid, d.uuid, variants, plain)


def _entities(c: Collected, inv: Inventory) -> list[_Entity]:
    by_unit = c.pods.by_unit if c.pods is not None else {}
    out = []
    for d in inv.devices:
        out.append(_entity(c, inv, d, None, by_unit.get(d.uuid, ())))
        out.extend(_entity(c, inv, d, m, by_unit.get(m.uuid, ())) for m in d.mig_devices)
    return out


def _healthy(c: Collected, e: _Entity) -> bool:
    return ALL not in c.unhealthy and e.uuid not in c.unhealthy and e.parent not in c.unhealthy


def _family(name: str, kind: str, help_text: str, samples: list[str], out: list[str]) -> None:
    if samples:
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
        out.extend(samples)


def render(c: Collected) -> str:
    samples: dict[str, list[str]] = {fld.name: [] for fld in f.FIELDS}
    healthy: list[str] = []
    resets: list[str] = []
    if c.inventory is not None:
        silent = set(c.readings.silent)
        for e in _entities(c, c.inventory):
            ok = 1 if _healthy(c, e) else 0
            if c.resets is not None:
                resets.append(f"sro_device_resets_total{{{e.plain}}} {c.resets.get(e.uuid, 0)}\n")
            if not c.view.telemetry:  # health only: who holds the device rides on its health series
                healthy.extend(f"sro_device_healthy{{{v}}} {ok}\n" for v in e.variants)
                continue
            readings = {} if e.parent in silent else c.readings.values.get(e.uuid, {})
            if e.uuid == e.parent:
                readings = {**readings, f.XID_ERRORS: c.xids.get(e.uuid, 0)}
            for name, reading in readings.items():
                rows = samples.get(name)
                if rows is not None:
                    text = value(reading)
                    rows.extend(f"{name}{{{v}}} {text}\n" for v in e.variants)
            healthy.append(f"sro_device_healthy{{{e.plain}}} {ok}\n")
    out: list[str] = []
    for fld in f.FIELDS:
        _family(fld.name, fld.type, fld.help, samples[fld.name], out)
    help_of = {name: (kind, text) for name, kind, text in SRO_METRICS}
    host = ("Hostname", c.hostname)
    sim = [("simulated", "true")] if c.simulated else []

    def family(name: str, rows: list[str]) -> None:
        _family(name, *help_of[name], rows, out)

    family("sro_device_healthy", healthy)
    family("sro_device_resets_total", resets)
    if c.pods is not None:
        resources = sorted(set(c.pods.allocated) | set(c.node.allocatable if c.node else {}))
        family(
            "sro_node_devices_allocated",
            [
                f"sro_node_devices_allocated{{{labels([host, ('resource', r), *sim])}}} {c.pods.allocated.get(r, 0)}\n"
                for r in resources
            ],
        )
    if c.node is not None:
        family(
            "sro_node_devices_allocatable",
            [
                f"sro_node_devices_allocatable{{{labels([host, ('resource', r), *sim])}}} {n}\n"
                for r, n in sorted(c.node.allocatable.items())
            ],
        )
        family(
            "sro_node_stack_state",
            [
                f"sro_node_stack_state{{{labels([host, ('specialresource', sr), ('state', s)])}}} {int(ready)}\n"
                for sr, states in sorted(c.node.stack.items())
                for s, ready in states.items()
            ],
        )
    sources = sorted(set(c.up) | set(c.errors))
    family(
        "sro_exporter_collect_errors_total",
        [
            f"sro_exporter_collect_errors_total{{{labels([host, ('source', s)])}}} {c.errors.get(s, 0)}\n"
            for s in sources
        ],
    )
    family(
        "sro_exporter_source_up",
        [
            f"sro_exporter_source_up{{{labels([host, ('source', s)])}}} {int(c.up.get(s, False))}\n"
            for s in sources
        ],
    )
    family(
        "sro_exporter_collect_duration_seconds",
        [f"sro_exporter_collect_duration_seconds{{{labels([host])}}} {value(round(c.duration, 6))}\n"],
    )
    return "".join(out)
