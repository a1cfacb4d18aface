"""The readings a device backend can give, named as DCGM names its fields (pure data).

Why DCGM's names: dashboards and alert rules written for NVIDIA's dcgm-exporter query these exact
metric names (`DCGM_FI_DEV_GPU_UTIL`, ...), so the telemetry sources (`sro.devices.telemetry`) key
their readings by them and the exporter prints them unchanged. Counters keep DCGM's names without a
`_total` suffix, as dcgm-exporter prints them. `FIELDS` is in the order the exporter prints.

Which fields, types, units and help texts: dcgm-exporter's `etc/default-counters.csv` at tag
`4.6.0-4.8.3` (`DEFAULT_COUNTERS_TAG`, the newest tag whose file we could read; 4.9.0's release
notes announce DCGM 4.7's new names and units, a change for later). Every row it enables is here;
`DCGM_FI_DRIVER_VERSION`, typed `label` there, is a label on every series (`exposition`). Beyond its
defaults we keep the four ECC totals (commented out there) because the alert rules watch them.
Units worth knowing:
- `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` is what DCGM 4.x computes for field 449: the NVLink data
  rate, received plus transmitted over all links, in MB/s, typed gauge in that csv (older csvs said
  counter);
- `DCGM_FI_PROF_PCIE_TX_BYTES`/`_RX_BYTES` are rates in bytes per second (gauges); with no DCGM
  profiling module, NVML's `nvmlDeviceGetPcieThroughput` (KB/s over 20 ms) gives the same quantity;
- `DCGM_FI_DEV_VGPU_LICENSE_STATUS` is 1 while a vGPU license is held, 0 on a GPU without one
  (bare metal, and every simulated GPU).
The other `DCGM_FI_PROF_*` ratios come from DCGM's profiling module, not from NVML: only the
simulated model gives them.
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
NVLINK_BANDWIDTH_TOTAL: Final = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
VGPU_LICENSE_STATUS: Final = "DCGM_FI_DEV_VGPU_LICENSE_STATUS"
GR_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
PIPE_TENSOR_ACTIVE: Final = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DRAM_ACTIVE: Final = "DCGM_FI_PROF_DRAM_ACTIVE"
PCIE_TX_BYTES: Final = "DCGM_FI_PROF_PCIE_TX_BYTES"
PCIE_RX_BYTES: Final = "DCGM_FI_PROF_PCIE_RX_BYTES"

DEFAULT_COUNTERS_TAG: Final = "4.6.0-4.8.3"  # dcgm-exporter's tag whose default-counters.csv we follow

# Readings in NVML's own units that are not printed (the csv above leaves them out): the simulated
# NVIDIA driver's NVML state serves them, and NVML's rates above are computed from them.
PCIE_TX_THROUGHPUT: Final = "DCGM_FI_DEV_PCIE_TX_THROUGHPUT"  # KB/s (nvmlDeviceGetPcieThroughput TX)
PCIE_RX_THROUGHPUT: Final = "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"  # KB/s (... RX)
NVLINK_TX_KIB: Final = "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"  # KiB sent over all links since load
NVLINK_RX_KIB: Final = "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"  # KiB received over all links


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
    Field(NVLINK_BANDWIDTH_TOTAL, "gauge", "Total number of NVLink bandwidth counters for all lanes."),
    Field(VGPU_LICENSE_STATUS, "gauge", "vGPU License status"),
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
    Field(
        PCIE_TX_BYTES,
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data"
        " payloads - in bytes per second.",
    ),
    Field(
        PCIE_RX_BYTES,
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data"
        " payloads - in bytes per second.",
    ),
)
BY_NAME: Final = {f.name: f for f in FIELDS}
