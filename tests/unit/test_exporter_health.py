"""The exporter for a custom recipe published as health only (`metrics: health`), against a golden file.

An FPGA-like recipe with two pools (a SmartNIC's VFs by `pf` attribute): no `DCGM_*` readings at all,
`sro_device_healthy` per device with the resource it is announced under (its pool's) and the pods
holding it, allocation and allocatable per resource, `simulated="true"` for a simulated recipe. A
built-in recipe's view stays dcgm-exporter's (no `resource` label), and a custom `metrics: telemetry`
recipe keeps its readings.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU, Recipe, on_simulated_driver
from sro.devices import driverstate
from sro.devices.model import Backend, Device, DeviceUUID, HealthEvent, Inventory
from sro.devices.telemetry import Telemetry
from sro.host import podresources
from sro.node.exporter import nodefacts
from sro.node.exporter.collecting import Collector
from sro.node.exporter.recipeview import NoReadings, RecipeView, view_of
from tests.golden_files import update_goldens
from tests.unit.exporter_support import HOST, Clock, FakeKubelet

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "exporter"
NIC = replace(
    SIMULATED_GPU,
    name="example-smartnic",
    resource="example.com/smartnic-vf",
    device_node="/dev/sro-vf{index}",
    metrics="health",
    pools={"example.com/vf-pool-a": {"pf": "0"}, "example.com/vf-pool-b": {"pf": "1"}},
)


def _vf(i: int) -> Device:
    return Device(
        uuid=DeviceUUID(f"example-smartnic-{i}"),
        index=i,
        minor=i,
        device_node=f"/dev/sro-vf{i}",
        pci_bus_id=f"0000:5e:00.{i}",
        product="Example SmartNIC VF (simulated)",
        memory_mib=0,
        compute_capability="",
        simulated=True,
        attributes={"pf": str(i // 2), "vf": str(i % 2)},
    )


INVENTORY = Inventory("simulated", tuple(_vf(i) for i in range(5)), "1.0-sim", ("/dev/sro-nicctl",), True)


class FakeBackend:
    name = "simulated"

    def __init__(self, events: list[HealthEvent]) -> None:
        self.events_to_send = events

    def inventory(self) -> Inventory:
        return INVENTORY

    def inventory_token(self) -> object:
        return 1

    def events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        yield from self.events_to_send
        stop.wait()

    def close(self) -> None:
        pass


class ExplodingTelemetry:
    def read(self, inv: Inventory, holders: object) -> object:
        raise AssertionError("a health-only recipe must not ask for readings")


@pytest.fixture
def tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="exh", dir="/tmp"))  # unix socket paths max 107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_health_only_recipe_golden(tmp: Path) -> None:
    pods = [
        ("net", "router-0", "main", "example.com/vf-pool-a", ["example-smartnic-0"]),
        ("net", "router-1", "main", "example.com/vf-pool-b", ["example-smartnic-3"]),
        ("other", "gpu-job", "c", "sro.dev/simulated-gpu", ["0"]),  # another recipe's device "0"
    ]
    kubelet = FakeKubelet(tmp / "kubelet.sock", pods)
    lost = HealthEvent("xid", DeviceUUID("example-smartnic-4"), 0.0, xid=79, sticky=True, message="lost")
    alloc = {"example.com/vf-pool-a": "2", "example.com/vf-pool-b": "2", "example.com/smartnic-vf": "1"}

    def open_devices() -> tuple[Backend, Telemetry]:
        return FakeBackend([lost]), ExplodingTelemetry()  # type: ignore[return-value]

    c = Collector(
        open_devices,
        domain="example.com",
        hostname=HOST,
        simulated=True,
        list_pods=lambda: podresources.list_assignments(kubelet.path, timeout=2),
        read_node=lambda: nodefacts.facts({}, alloc, "example.com"),
        view=view_of(NIC),
        clock=Clock(),
    )
    try:
        c.prime(0.1)
        text = c.collect().text.decode()
    finally:
        c.close()
        kubelet.stop()
    golden = GOLDEN / "health-only-smartnic.txt"
    if update_goldens():
        golden.write_text(text)
    assert text == golden.read_text(), f"exposition differs from {golden} (SRO_UPDATE_GOLDEN=1 rewrites it)"
    names = {fam.name for fam in text_string_to_metric_families(text)}
    assert not [n for n in names if n.startswith("DCGM_")]  # no readings, not even the Xid counter
    healthy = {
        (s.labels["UUID"], s.labels.get("pod", "")): (s.labels["resource"], s.value)
        for fam in text_string_to_metric_families(text)
        if fam.name == "sro_device_healthy"
        for s in fam.samples
        if s.labels["simulated"] == "true" and s.labels["Hostname"] == HOST
    }
    assert healthy == {
        ("example-smartnic-0", "router-0"): ("example.com/vf-pool-a", 1.0),
        ("example-smartnic-1", ""): ("example.com/vf-pool-a", 1.0),
        ("example-smartnic-2", ""): ("example.com/vf-pool-b", 1.0),
        ("example-smartnic-3", "router-1"): ("example.com/vf-pool-b", 1.0),
        ("example-smartnic-4", ""): ("example.com/smartnic-vf", 0.0),  # pf 2: in no pool; lost
    }
    assert (
        'sro_node_devices_allocated{Hostname="node-1",resource="example.com/vf-pool-a",simulated="true"} 1'
        in text
    )
    assert (
        'sro_node_devices_allocatable{Hostname="node-1",resource="example.com/smartnic-vf",simulated="true"} 1'
        in text
    )
    assert "sro.dev/simulated-gpu" not in text


def test_views() -> None:
    assert view_of(NVIDIA_GPU) == RecipeView() == view_of(SIMULATED_GPU)
    assert view_of(on_simulated_driver(NVIDIA_GPU)) == RecipeView()  # another driver root, same view
    fpga: Recipe = replace(NIC, name="example-fpga", resource="example.com/fpga", pools={})
    assert view_of(fpga) == RecipeView(telemetry=False, resource="example.com/fpga")
    assert view_of(replace(fpga, metrics="telemetry")).telemetry is True
    assert view_of(NIC).resource_of(_vf(3)) == "example.com/vf-pool-b"
    assert NoReadings().read(INVENTORY, {}).values == {}


@pytest.mark.root
def test_once_over_the_simulated_fpga_example(tmp: Path) -> None:
    """`sro exporter --once --recipe-file` over the example FPGA the simulated driver made: health only,
    a fault shows as unhealthy; the same recipe with `metrics: telemetry` has the DCGM readings."""
    from click.testing import CliRunner

    from sro.cli import cli

    examples = Path(__file__).resolve().parents[2] / "examples" / "fpga"
    root, dev = tmp / "root", tmp / "dev"
    dev.mkdir()
    made = CliRunner().invoke(
        cli,
        ["driver", "simulate", "--recipe-file", str(examples / "recipe.yaml"), "--config",
         str(examples / "devices.yaml"), "--driver-root", str(root), "--dev-root", str(dev)],
    )  # fmt: skip
    if made.exit_code != 0 and "Operation not permitted" in made.output:
        pytest.skip("needs CAP_MKNOD")
    assert made.exit_code == 0, made.output
    uuid = driverstate.read_inventory(root).devices[1].uuid
    driverstate.set_fault(root, uuid, 79)

    def once(recipe: Path) -> str:
        args = ["exporter", "--once", "--recipe-file", str(recipe), "--driver-root", str(root)]
        args += ["--pod-resources-socket", str(tmp / "none.sock")]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        return result.stdout

    text = once(examples / "recipe.yaml")
    healthy = {
        s.labels["UUID"]: (s.value, s.labels["resource"], s.labels["simulated"])
        for fam in text_string_to_metric_families(text)
        if fam.name == "sro_device_healthy"
        for s in fam.samples
    }
    assert len(healthy) == 2 and healthy[uuid] == (0.0, "example.com/fpga", "true")
    assert "DCGM_FI_DEV" not in text
    driverstate.clear_faults(root, [uuid])  # a device off the bus fails a telemetry dry run, as for GPUs
    telemetry = tmp / "telemetry.yaml"
    telemetry.write_text(
        (examples / "recipe.yaml").read_text().replace("metrics: health", "metrics: telemetry")
    )
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in once(telemetry)
