"""The readings a device backend can give, named as DCGM names its fields (pure data).

Why DCGM's names: dashboards and alert rules written for NVIDIA's dcgm-exporter query these exact
metric names (`DCGM_FI_DEV_GPU_UTIL`, ...), so the telemetry sources (`sro.devices.telemetry`) key
their readings by them and the exporter prints them unchanged. Types, units and help texts follow
dcgm-exporter's `etc/default-counters.csv`; counters keep DCGM's names without a `_total` suffix,
as dcgm-exporter prints them. `FIELDS` is in the order the exporter prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

SM_CLOCK: Final = "DCGM_FI_DEV_SM_CLOCK"
MEM_CLOCK: Final = "DCGM_FI_DEV_MEM_CLOCK"
MEMORY_TEMP: Final = "DCGM_FI_DEV_MEMORY_TEMP"
GPU_TEMP: Final = "DCGM_FI_DEV_GPU_TEMP"
POWER_USAGE: Final = "DCGM_FI_DEV_POWER_USAGE"
TOTAL_ENERGY: Final = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
PCIE_REPLAY: Final = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
MEM_COPY_UTIL: Final = "DCGM_FI_DEV_MEM_COPY_UTIL"
ENC_UTIL: Final = "DCGM_FI_DEV_ENC_UTIL"
DEC_UTIL: Final = "DCGM_FI_DEV_DEC_UTIL"
XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
FB_USED: Final = "DCGM_FI_DEV_FB_USED"
FB_RESERVED: Final = "DCGM_FI_DEV_FB_RESERVED"
ECC_SBE_VOL: Final = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
ECC_DBE_VOL: Final = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ECC_SBE_AGG: Final = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
ECC_DBE_AGG: Final = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
UNCORRECTABLE_REMAPPED_ROWS: Final = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
CORRECTABLE_REMAPPED_ROWS: Final = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
ROW_REMAP_FAILURE: Final = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
GR_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
PIPE_TENSOR_ACTIVE: Final = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DRAM_ACTIVE: Final = "DCGM_FI_PROF_DRAM_ACTIVE"


@dataclass(frozen=True)
class Field:
    name: str
    type: Literal["gauge", "counter"]
    help: str


FIELDS: Final = (
    Field(SM_CLOCK, "gauge", "SM clock frequency (in MHz)."),
    Field(MEM_CLOCK, "gauge", "Memory clock frequency (in MHz)."),
    Field(MEMORY_TEMP, "gauge", "Memory temperature (in C)."),
    Field(GPU_TEMP, "gauge", "GPU temperature (in C)."),
    Field(POWER_USAGE, "gauge", "Power draw (in W)."),
    Field(TOTAL_ENERGY, "counter", "Total energy consumption since boot (in mJ)."),
    Field(PCIE_REPLAY, "counter", "Total number of PCIe retries."),
    Field(GPU_UTIL, "gauge", "GPU utilization (in %)."),
    Field(MEM_COPY_UTIL, "gauge", "Memory utilization (in %)."),
    Field(ENC_UTIL, "gauge", "Encoder utilization (in %)."),
    Field(DEC_UTIL, "gauge", "Decoder utilization (in %)."),
    Field(XID_ERRORS, "gauge", "Value of the last XID error encountered."),
    Field(FB_FREE, "gauge", "Framebuffer memory free (in MiB)."),
    Field(FB_USED, "gauge", "Framebuffer memory used (in MiB)."),
    Field(FB_RESERVED, "gauge", "Framebuffer memory reserved (in MiB)."),
    Field(ECC_SBE_VOL, "counter", "Total number of single-bit volatile ECC errors."),
    Field(ECC_DBE_VOL, "counter", "Total number of double-bit volatile ECC errors."),
    Field(ECC_SBE_AGG, "counter", "Total number of single-bit persistent ECC errors."),
    Field(ECC_DBE_AGG, "counter", "Total number of double-bit persistent ECC errors."),
    Field(UNCORRECTABLE_REMAPPED_ROWS, "counter", "Number of remapped rows for uncorrectable errors"),
    Field(CORRECTABLE_REMAPPED_ROWS, "counter", "Number of remapped rows for correctable errors"),
    Field(ROW_REMAP_FAILURE, "gauge", "Whether remapping of rows has failed"),
    Field(GR_ENGINE_ACTIVE, "gauge", "Ratio of time the graphics engine is active."),
    Field(PIPE_TENSOR_ACTIVE, "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    Field(
        DRAM_ACTIVE,
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
)
BY_NAME: Final = {f.name: f for f in FIELDS}
