"""The device plugin on the `nvml` backend, on the simulated NVIDIA driver's real libnvidia-ml.so.1.

Why: the `nvml` backend is what runs on every NVIDIA node, and until the simulated driver it had
never met an NVML library. Here `sro device-plugin --recipe nvidia-gpu` runs as a child process
(its own NVML) against a fake kubelet, and real gRPC calls check what a node would see: the GPUs'
UUIDs, Allocate's device nodes (NVIDIA's, existing under the dev root), NVLink-aware preferred
allocation from NVML's topology, MIG strategies from NVML's MIG handles, health from NVML's Xid
events (Unhealthy after `sro simulate fault`, back after the fault clears), a GPU lost before the
plugin started, and a corrupted NVML state (logged once, the plugin keeps serving). Latencies are
printed, never asserted (machines are noisy): run with `-s` to see them.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from sro.devices import driverstate
from sro.devices.model import DeviceUUID
from sro.node.deviceplugin import api_pb2
from tests.simnvml_driver import (  # noqa: F401  (simnvml_build and simnvml_driver are fixtures)
    FOUR_GPUS,
    NvmlTarget,
    PluginProcess,
    SimNvmlDriver,
    simnvml_build,
    simnvml_driver,
    wait_for,
)
from tests.unit.test_deviceplugin_grpc import FakeKubelet

CONFIG = "health: {recoverAfterSeconds: 0.5}\n"
CONTROL_NODES = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
# the NVLink islands cross the NUMA nodes: a preference for a linked pair is NVLink's, not NUMA's
CROSSED = {**FOUR_GPUS, "nvlinkIslands": [[0, 2], [1, 3]]}
MIG_SINGLE = {"count": 2, "defaults": {"mig": [{"profile": "1g.5gb"}, {"profile": "1g.5gb"}]}}
MIG_MIXED = {"count": 2, "devices": [{"mig": [{"profile": "1g.5gb"}, {"profile": "3g.20gb"}]}]}

Health = dict[str, str]


class Stream:
    """A ListAndWatch stream read on a thread: each response's health by id, with when it came."""

    def __init__(self, stub: Any) -> None:
        self.call = stub.ListAndWatch(api_pb2.Empty(), timeout=300)
        self.responses: queue.Queue[tuple[float, Health]] = queue.Queue()
        self.seen: list[Health] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for resp in self.call:
                self.responses.put((time.monotonic(), {d.ID: d.health for d in resp.devices}))
        except grpc.RpcError:
            pass  # cancelled at the end of the test, or the server restarted

    def until(self, cond: Callable[[Health], bool], what: str, timeout: float = 10.0) -> tuple[float, Health]:
        """The first response (from now on) for which `cond` holds, and when it arrived."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                at, health = self.responses.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"ListAndWatch: {what} not sent within {timeout:.0f}s") from None
            self.seen.append(health)
            if cond(health):
                return at, health

    def close(self) -> None:
        self.call.cancel()


def healthy(ids: Sequence[str], *bad: str) -> Callable[[Health], bool]:
    """Exactly `bad` unhealthy among `ids`."""
    return lambda h: h == {i: "Unhealthy" if i in bad else "Healthy" for i in ids}


def allocate(stub: Any, ids: Sequence[str]) -> Any:
    req = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)])
    return stub.Allocate(req, timeout=10).container_responses[0]


def refused(stub: Any, ids: Sequence[str]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        allocate(stub, ids)
    return e.value


def preferred(stub: Any, available: Sequence[str], size: int, must: Sequence[str] = ()) -> list[str]:
    req = api_pb2.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
    )
    resp = stub.GetPreferredAllocation(
        api_pb2.PreferredAllocationRequest(container_requests=[req]), timeout=10
    )
    return list(resp.container_responses[0].deviceIDs)


def specs(c: Any) -> list[str]:
    """The container's device nodes (host path == container path, rw)."""
    assert all(d.host_path == d.container_path and d.permissions == "rw" for d in c.devices)
    return [d.host_path for d in c.devices]


@pytest.fixture
def sim(simnvml_driver: Callable[..., SimNvmlDriver]) -> Callable[..., SimNvmlDriver]:  # noqa: F811
    """`sim(config)`: a simulated NVIDIA driver installed for this test (tests/simnvml_driver.py)."""
    return simnvml_driver


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths are limited to 107 bytes (pytest's temp dirs are too long)."""
    d = Path(tempfile.mkdtemp(prefix="dpn", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start(short_dir: Path) -> Iterator[Callable[..., tuple[PluginProcess, FakeKubelet]]]:
    """Starts the plugin on a target next to a fake kubelet; waits for `resources` registrations."""
    started: list[tuple[PluginProcess, FakeKubelet]] = []

    def run(
        target: NvmlTarget, config: str = CONFIG, resources: int = 1
    ) -> tuple[PluginProcess, FakeKubelet]:
        plugin_dir = short_dir / str(len(started)) / "dp"
        plugin_dir.mkdir(parents=True)
        kubelet = FakeKubelet(plugin_dir)
        plugin = PluginProcess(target, plugin_dir, config)
        started.append((plugin, kubelet))
        wait_for(lambda: len(kubelet.requests) >= resources or not plugin.alive(), 60, "registration")
        assert plugin.alive(), plugin.log()
        return plugin, kubelet

    yield run
    for plugin, kubelet in started:
        kubelet.stop()
        assert plugin.stop() == 0, plugin.log()  # it never dies on its own, and stops cleanly


def started_healthy(
    sim: Callable[..., SimNvmlDriver], start: Callable[..., tuple[PluginProcess, FakeKubelet]]
) -> tuple[SimNvmlDriver, list[DeviceUUID], PluginProcess, Any, Stream]:
    """The default simulated driver, its GPUs' UUIDs, the plugin started on it, a stub and a
    ListAndWatch stream on that stub that has seen every GPU healthy."""
    driver = sim()
    u = driver.uuids()
    plugin, _ = start(driver)
    stub = plugin.stub()
    stream = Stream(stub)
    stream.until(healthy(u), "every GPU healthy")
    return driver, u, plugin, stub, stream


def test_inventory_allocate_and_nvlink_preference(
    sim: Callable[..., SimNvmlDriver], start: Callable[..., tuple[PluginProcess, FakeKubelet]]
) -> None:
    driver = sim(CROSSED)
    u = driver.uuids()
    plugin, kubelet = start(driver)
    assert [r.resource_name for r in kubelet.requests] == ["nvidia.com/gpu"]
    stub = plugin.stub()
    first = next(stub.ListAndWatch(api_pb2.Empty(), timeout=10))
    assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in first.devices] == [
        (u[0], "Healthy", [0]), (u[1], "Healthy", [0]), (u[2], "Healthy", [1]), (u[3], "Healthy", [1]),
    ]  # fmt: skip
    assert all(x.startswith("GPU-") for x in u)

    c = allocate(stub, [u[1], u[2]])
    assert dict(c.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{u[1]},{u[2]}"}  # the other GPUs' not named
    assert specs(c) == ["/dev/nvidia1", "/dev/nvidia2", *CONTROL_NODES]
    assert not c.mounts and not c.annotations and not c.cdi_devices
    for path in specs(c)[:2] + CONTROL_NODES[:1]:  # NVIDIA's nodes, there for the kubelet to give
        st = os.stat(driver.dev_root / Path(path).name)
        assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 195, path
    assert refused(stub, ["GPU-bogus"]).code() == grpc.StatusCode.INVALID_ARGUMENT

    # NVML's topology (nvmlDeviceGetNvLinkRemotePciInfo): a linked pair first, across NUMA nodes
    assert sorted(preferred(stub, u, 2)) == sorted([u[0], u[2]])
    assert sorted(preferred(stub, u[1:], 2)) == sorted([u[1], u[3]])
    assert preferred(stub, u, 2, must=[u[3]]) == [u[3], u[1]]

    oneshot = driver.sro("device-plugin", "--recipe", "nvidia-gpu", "--oneshot", *driver.driver_args())
    assert oneshot.returncode == 0, oneshot.stderr
    doc = json.loads(oneshot.stdout)
    assert doc["backend"] == "nvml" and doc["simulated"] is True and doc["driverVersion"] == "550.90.07"


def test_xid_79_makes_a_gpu_unhealthy_and_clearing_brings_it_back(
    sim: Callable[..., SimNvmlDriver], start: Callable[..., tuple[PluginProcess, FakeKubelet]]
) -> None:
    driver, u, _, stub, stream = started_healthy(sim, start)
    latencies, recoveries = [], []
    for gpu in (1, 3, 1, 2):
        t0 = time.monotonic()
        driver.set_fault(gpu, 79)  # as `sro simulate fault --device N --xid 79` (timed from the write)
        at, _ = stream.until(healthy(u, u[gpu]), f"GPU {gpu} unhealthy after Xid 79")
        latencies.append(at - t0)
        err = refused(stub, [u[gpu]])
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "unhealthy" in (err.details() or "")
        assert specs(allocate(stub, [u[0]]))[0] == "/dev/nvidia0"  # the others are still served
        t1 = time.monotonic()
        driver.clear_fault(gpu)  # NVML has no clearing event: the plugin sees the GPU answer again
        at, _ = stream.until(healthy(u), f"GPU {gpu} healthy again after the fault cleared")
        recoveries.append(at - t1)
        assert at - t1 >= 0.5  # not before the quiet period (recoverAfterSeconds 0.5) has passed
    print(
        "\nXid 79 -> ListAndWatch Unhealthy (s): "
        + ", ".join(f"{x:.3f}" for x in latencies)
        + "\nfault cleared -> Healthy, incl. the 0.5 s quiet period (s): "
        + ", ".join(f"{x:.3f}" for x in recoveries)
    )

    # the commands themselves, as a user runs them
    root = ["--driver-root", str(driver.driver_root)]
    r = driver.sro("simulate", "fault", "--device", "0", "--xid", "79", *root)
    assert r.returncode == 0, r.stderr
    stream.until(healthy(u, u[0]), "GPU 0 unhealthy after `sro simulate fault`")
    r = driver.sro("simulate", "fault", "--device", "0", "--clear", *root)
    assert r.returncode == 0, r.stderr
    stream.until(healthy(u), "GPU 0 healthy after `sro simulate fault --clear`")
    stream.close()


def test_an_xid_the_gpu_survives_heals_and_ignored_xids_do_nothing(
    sim: Callable[..., SimNvmlDriver], start: Callable[..., tuple[PluginProcess, FakeKubelet]]
) -> None:
    driver, u, _, _, stream = started_healthy(sim, start)
    # Xid 48 (double-bit ECC): the GPU still answers NVML, so only the quiet period heals it, with
    # no clearing (the fault stays in the simulated driver's state; NVML delivered it once)
    t0 = time.monotonic()
    driver.set_fault(2, 48)
    stream.until(healthy(u, u[2]), "GPU 2 unhealthy after Xid 48")
    at, _ = stream.until(healthy(u), "GPU 2 healthy after the quiet period")
    assert at - t0 >= 0.5
    # Xid 13 is an application's error (NVIDIA's ignore list): nothing changes; the Xid 79 injected
    # after it is the next change the stream reports
    del stream.seen[:]
    driver.set_fault(3, 13)
    driver.set_fault(0, 79)
    stream.until(lambda h: h[u[0]] == "Unhealthy", "GPU 0 unhealthy")
    assert all(h[u[3]] == "Healthy" for h in stream.seen), stream.seen
    stream.close()


def test_a_gpu_lost_before_the_plugin_starts(
    sim: Callable[..., SimNvmlDriver], start: Callable[..., tuple[PluginProcess, FakeKubelet]]
) -> None:
    driver = sim()
    u = driver.uuids()
    driver.set_fault(2, 79)
    plugin, kubelet = start(driver)
    stub = plugin.stub()
    first = next(stub.ListAndWatch(api_pb2.Empty(), timeout=10))  # listed, never announced healthy
    assert healthy(u, u[2])({d.ID: d.health for d in first.devices}), first
    assert refused(stub, [u[2]]).code() == grpc.StatusCode.FAILED_PRECONDITION
    driver.clear_fault(2)
    # its record had only its identity: the plugin reads the inventory again and registers anew
    wait_for(lambda: len(kubelet.requests) >= 2, 15, "registration after the GPU came back")
    stream = Stream(plugin.stub())
    stream.until(healthy(u), "every GPU healthy once GPU 2 answers")
    stream.close()


def _migs(driver: SimNvmlDriver) -> list[Any]:
    return [m for d in driver.inventory.devices for m in d.mig_devices]


def test_mig_single_strategy(
    sim: Callable[..., SimNvmlDriver], start: Callable[..., tuple[PluginProcess, FakeKubelet]]
) -> None:
    driver = sim(MIG_SINGLE)
    migs = _migs(driver)
    ids = [m.uuid for m in migs]
    plugin, kubelet = start(driver, CONFIG + "flags: {migStrategy: single}\n")
    assert [r.resource_name for r in kubelet.requests] == ["nvidia.com/gpu"]
    stub = plugin.stub()
    stream = Stream(stub)
    stream.until(healthy(ids), "the MIG devices, from NVML's MIG handles")
    assert len(ids) == 4 and all(i.startswith("MIG-") for i in ids)

    c = allocate(stub, [ids[1]])
    assert dict(c.envs) == {"NVIDIA_VISIBLE_DEVICES": ids[1]}
    # the parent's node and the MIG device's capability node (NVIDIA's mig-minors numbering)
    assert migs[1].device_node.startswith("/dev/nvidia-caps/nvidia-cap")
    assert specs(c) == ["/dev/nvidia0", migs[1].device_node, *CONTROL_NODES]
    assert stat.S_ISCHR(os.stat(driver.dev_root / "nvidia-caps" / Path(migs[1].device_node).name).st_mode)
    assert sorted(preferred(stub, [ids[0], ids[2], ids[3]], 2)) == sorted(ids[2:])  # one GPU's pair

    # an Xid on a MIG device is that device's (NVML's gi/ci ids); an Xid 79 is its whole GPU's
    driver.set_fault(ids[0], 48)
    stream.until(healthy(ids, ids[0]), "MIG device 0:0 unhealthy, its sibling not")
    stream.until(healthy(ids), "MIG device 0:0 healthy after the quiet period")
    driver.set_fault(1, 79)
    stream.until(healthy(ids, ids[2], ids[3]), "both MIG devices of the lost GPU 1 unhealthy")
    stream.close()


def test_mig_mixed_strategy(
    sim: Callable[..., SimNvmlDriver], start: Callable[..., tuple[PluginProcess, FakeKubelet]]
) -> None:
    driver = sim(MIG_MIXED)
    u = driver.uuids()
    small, large = _migs(driver)
    plugin, kubelet = start(driver, CONFIG + "flags: {migStrategy: mixed}\n", resources=3)
    assert sorted(r.resource_name for r in kubelet.requests) == [
        "nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb",
    ]  # fmt: skip
    announced: Mapping[str, list[str]] = {
        resource: [
            d.ID for d in next(plugin.stub(resource).ListAndWatch(api_pb2.Empty(), timeout=10)).devices
        ]
        for resource in ("nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb")
    }
    assert announced == {
        "nvidia.com/gpu": [u[1]],  # GPU 0 is MIG-enabled: only its MIG devices are announced
        "nvidia.com/mig-1g.5gb": [small.uuid],
        "nvidia.com/mig-3g.20gb": [large.uuid],
    }
    c = allocate(plugin.stub("nvidia.com/mig-3g.20gb"), [large.uuid])
    assert dict(c.envs) == {"NVIDIA_VISIBLE_DEVICES": large.uuid}
    assert specs(c) == ["/dev/nvidia0", large.device_node, *CONTROL_NODES]


def test_a_corrupted_nvml_state_is_logged_once_and_the_plugin_keeps_serving(
    sim: Callable[..., SimNvmlDriver], start: Callable[..., tuple[PluginProcess, FakeKubelet]]
) -> None:
    driver, u, plugin, stub, stream = started_healthy(sim, start)
    good = driver.state_file.read_text()
    driverstate.write_atomic(driver.state_file, "simnvml version=1\x00 not a state file\n")
    # NVML answers NVML_ERROR_UNKNOWN to every call; the event wait failing is NVIDIA's fail-safe:
    # every device unhealthy while it fails
    stream.until(healthy(u, *u), "every GPU unhealthy while NVML fails")
    time.sleep(3)  # several rounds of the event wait failing
    assert plugin.alive()
    assert stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=10).get_preferred_allocation_available
    assert refused(stub, [u[0]]).code() == grpc.StatusCode.FAILED_PRECONDITION
    said = [line for line in plugin.log().splitlines() if "Unknown Error" in line]
    assert len(said) == 1, plugin.log()
    assert "Traceback" not in plugin.log()
    driverstate.write_atomic(driver.state_file, good)
    stream.until(healthy(u), "every GPU healthy once NVML answers again")
    stream.close()


def test_sighup_registers_again_and_sigterm_still_stops(
    sim: Callable[..., SimNvmlDriver], start: Callable[..., tuple[PluginProcess, FakeKubelet]]
) -> None:
    """SIGHUP rebuilds and re-registers (as NVIDIA's plugin does), through sro.node.signals' thread."""
    plugin, kubelet = start(sim())
    before = len(kubelet.requests)
    plugin.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: len(kubelet.requests) > before, 30, "a registration after SIGHUP")
    assert plugin.alive(), plugin.log()
    assert plugin.stop() == 0, plugin.log()
