"""Which GPU faults are a node's problem, and what each one asks for: the Xid table as data (pure).

Why a table and not the device plugin's one rule ("every Xid but a few is critical"): a node-level
repair (cordon, evict, reset, reboot) costs running work, so only faults the hardware's own
documentation says the device does not recover from by itself may start one. The table follows
NVIDIA's Xid catalogue ("Xid Errors", docs.nvidia.com/deploy/xid-errors: each Xid's immediate
"resolution bucket" — RESTART_APP, RESET_GPU, NODE_REBOOT, CONTACT_SUPPORT) and its memory pages
("Dynamic Page Retirement" and "GPU Memory Error Management": row remapping). Every Xid is one of:

- `APPLICATION` — the application's own error (a bad address, a kernel that trapped, a context
  reset by the application): the GPU is fine and the next process runs. Never a node fault; the
  device plugin ignores them too (`sro.devices.model.DEFAULT_IGNORED_XIDS`, the same set).
- `RECORD` — an event to record, not a drain trigger: the GPU protected itself (an ECC error
  contained to one process, a page retired, a row marked for remapping, a high single-bit rate)
  and keeps serving the others. Some of them (`needs_reset`) take effect at the next reset of the
  GPU: the reset can wait for a convenient time (the next remediation, driver upgrade or reboot),
  so they start none.
- `DRAIN` — a drain trigger: the GPU or its memory can no longer be trusted (fell off the bus, an
  uncorrectable error that was not contained, a row that could not be remapped, the GPU's firmware
  dead). Its fault class (the `GpuHealthy` condition's reason) picks the action in
  `spec.remediation.actions`; all of them need at least a reset of the GPU to come back.

An Xid the table does not know starts nothing: the catalogue grows with each driver release and a
code no one has read is no reason to empty a node (the device plugin still takes the device out of
allocatable, and the exporter counts it). `Thermal` has no Xid: it comes from the telemetry (a GPU
above its slowdown temperature), reported as a fault of that class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from sro.api.specialresource import FAULT_CLASSES

XID_FATAL: Final = "XidFatal"
GPU_LOST: Final = "GpuLost"
ECC_UNCORRECTABLE: Final = "EccUncorrectable"
ROW_REMAP_FAILURE: Final = "RowRemapFailure"
THERMAL: Final = "Thermal"
# The worst first: a node's condition names the worst class among its faults.
SEVERITY: Final = (GPU_LOST, ECC_UNCORRECTABLE, ROW_REMAP_FAILURE, XID_FATAL, THERMAL)
assert set(SEVERITY) == set(FAULT_CLASSES), "the API's fault classes and this table's disagree"

APPLICATION: Final = "application"
RECORD: Final = "record"
DRAIN: Final = "drain"

CONDITION: Final = "GpuHealthy"  # the Node condition's type
HEALTHY_REASON: Final = "NoGpuFault"


@dataclass(frozen=True)
class Xid:
    """One row of the table: what NVIDIA's catalogue calls it and what it asks of the node."""

    code: int
    name: str
    kind: str  # APPLICATION | RECORD | DRAIN
    fault_class: str | None = None  # DRAIN: the class its action is looked up by
    needs_reset: bool = False  # the GPU is back to full health only after a reset


XIDS: Final[Mapping[int, Xid]] = {
    x.code: x
    for x in (
        # -- the application's errors (catalogue: RESTART_APP, the GPU needs nothing) --
        Xid(13, "Graphics Engine Exception", APPLICATION),  # an illegal address or instruction in a kernel
        Xid(31, "GPU memory page fault", APPLICATION),  # the application touched memory it did not map
        Xid(43, "Reset channel verification error", APPLICATION),  # the app's channel was reset; GPU fine
        Xid(45, "Preemptive cleanup", APPLICATION),  # the driver killed a process's channels (kill, exit)
        Xid(68, "NVDEC0 Exception", APPLICATION),  # a video decoder error in one stream
        Xid(109, "Context Switch Timeout", APPLICATION),  # one context hung; the driver cleaned it up
        # -- events to record (the GPU contained it and goes on) --
        Xid(63, "ECC page retirement or row remapping recorded", RECORD, needs_reset=True),
        # a row was marked for remapping: the catalogue asks for a GPU reset "at a convenient time"
        Xid(92, "High single-bit ECC error rate", RECORD),  # corrected errors: watch the trend
        Xid(94, "Contained ECC error", RECORD, needs_reset=True),
        # the error was contained to the process using the memory (it was stopped, the others run);
        # the catalogue's immediate action is RESTART_APP, a reset at a convenient time maps the row
        # -- drain triggers --
        Xid(46, "GPU stopped processing", DRAIN, XID_FATAL, True),  # catalogue: RESET_GPU
        Xid(48, "Double Bit ECC Error", DRAIN, ECC_UNCORRECTABLE, True),
        # an uncorrectable error in GPU memory (Dynamic Page Retirement: XID 48 "A DBE has occurred");
        # any process on the GPU may have read bad data
        Xid(61, "Internal micro-controller breakpoint/warning", DRAIN, XID_FATAL, True),  # RESET_GPU
        Xid(62, "Internal micro-controller halt", DRAIN, XID_FATAL, True),  # RESET_GPU
        Xid(64, "ECC page retirement or row remapper failure", DRAIN, ROW_REMAP_FAILURE, True),
        # the remap of a bad row failed (Dynamic Page Retirement: XID 64 "failed retirement"): the
        # memory cannot protect itself any more; a reset retries it, a repeat means RMA
        Xid(74, "NVLINK Error", DRAIN, XID_FATAL, True),  # a fatal link error: RESET_GPU
        Xid(79, "GPU has fallen off the bus", DRAIN, GPU_LOST, True),
        # the GPU no longer answers on PCIe: its device node is dead until a reset (or a reboot
        # when the reset fails)
        Xid(95, "Uncontained ECC error", DRAIN, ECC_UNCORRECTABLE, True),
        # the error could not be contained to one process: every process on the GPU is affected,
        # catalogue: RESET_GPU
        Xid(119, "GSP RPC Timeout", DRAIN, XID_FATAL, True),  # the GPU's System Processor stopped answering
        Xid(120, "GSP Error", DRAIN, XID_FATAL, True),  # the GSP firmware faulted: RESET_GPU
        Xid(140, "Unrecovered ECC Error", DRAIN, ECC_UNCORRECTABLE, True),  # newer GPUs' form of 48/95
    )
}


def entry(xid: int) -> Xid | None:
    """The table's row for `xid`, or None for an Xid it does not know."""
    return XIDS.get(xid)


def classify(xid: int) -> str | None:
    """The fault class an Xid raises on its node, or None: an application error, an event to
    record, or an Xid the table does not know (none of them start a remediation)."""
    row = XIDS.get(xid)
    return row.fault_class if row is not None and row.kind == DRAIN else None


def application_xids() -> frozenset[int]:
    return frozenset(x.code for x in XIDS.values() if x.kind == APPLICATION)


@dataclass(frozen=True)
class Fault:
    """One device's active fault as its node reports it (the health channel's record, plain)."""

    device: str  # the device's index (or UUID) as the node's reports name it
    fault_class: str
    xid: int | None = None  # None: a fault with no Xid (Thermal, from telemetry)
    detail: str = ""

    def words(self) -> str:
        return f"device {self.device}" + (f" (Xid {self.xid})" if self.xid is not None else "")


def fault_of(device: str, xid: int, detail: str = "") -> Fault | None:
    """The node fault an Xid seen on `device` is, or None when it is none (see `classify`)."""
    cls = classify(xid)
    return Fault(device, cls, xid, detail) if cls is not None else None


def worst(faults: Iterable[Fault]) -> str | None:
    """The most severe class among `faults` (SEVERITY order), None for none."""
    classes = {f.fault_class for f in faults}
    return next((c for c in SEVERITY if c in classes), None)


def node_condition(faults: Iterable[Fault]) -> tuple[str, str, str]:
    """The node's `GpuHealthy` condition as (status, reason, message), Node Problem Detector style:
    False with the worst class as reason and every faulty device and Xid in the message; True
    (`NoGpuFault`) once no fault remains."""
    active = sorted(set(faults), key=_order)
    cls = worst(active)
    if cls is None:
        return "True", HEALTHY_REASON, "no GPU fault reported"
    parts = []
    for c in SEVERITY:
        mine = [f.words() for f in active if f.fault_class == c]
        if mine:
            parts.append(f"{c}: {', '.join(mine)}")
    return "False", cls, "; ".join(parts)


def _order(f: Fault) -> tuple[int, int, str, int]:
    rank = SEVERITY.index(f.fault_class) if f.fault_class in SEVERITY else len(SEVERITY)
    numeric = f.device.isdigit()
    return rank, 0 if numeric else 1, f.device.zfill(8) if numeric else f.device, f.xid or 0
