"""On a machine with an NVIDIA GPU (marked `gpu`, skipped elsewhere): NVML readings and the exporter's
dry run on real hardware, with dcgm-exporter's names and no simulated label."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sro.devices import fields as f

pytestmark = pytest.mark.gpu


def test_nvml_readings_of_every_gpu() -> None:
    from sro.devices.nvml import NvmlBackend
    from sro.devices.telemetry import NvmlTelemetry

    backend = NvmlBackend()
    try:
        inv = backend.inventory()
        readings = NvmlTelemetry(backend.nvml).read(inv, {})
    finally:
        backend.close()
    assert readings.silent == {}
    for d in inv.devices:
        v = readings.values[d.uuid]
        assert 0 <= v[f.GPU_UTIL] <= 100 and v[f.FB_USED] + v[f.FB_FREE] <= d.memory_mib + 1
        assert 0 < v[f.GPU_TEMP] < 120 and v[f.POWER_USAGE] > 0 and v[f.SM_CLOCK] > 0
        for m in d.mig_devices:
            assert readings.values[m.uuid][f.FB_FREE] >= 0


def test_once_on_real_gpus() -> None:
    from sro.node.exporter.commands import exporter

    r = CliRunner().invoke(exporter, ["--recipe", "nvidia-gpu", "--once", "--node-name", "gpu-node"])
    assert r.exit_code == 0, r.output
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0"' in r.output and 'device="nvidia' in r.output
    assert 'simulated="true"' not in r.output
    assert 'sro_exporter_source_up{Hostname="gpu-node",source="devices"} 1' in r.output
