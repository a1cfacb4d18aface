"""The plugin against a fake kubelet: a real gRPC Registration server on a temp unix socket, the
real plugin (simulated backend over a temp driver root) and real gRPC calls to every method;
kubelet restarts, a kubelet that is down at start, a crashed server, bad config and refusals."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.devices import driverstate, simconfig
from sro.devices.simulated import SimulatedBackend
from sro.node.deviceplugin import api_pb2, api_pb2_grpc
from sro.node.deviceplugin.lifecycle import Plugin
from sro.node.deviceplugin.server import socket_name
from tests.simnvml_driver import (  # noqa: F401  (fixtures: the gpu and simulated NVML variants)
    NvmlTarget,
    PluginProcess,
    nvml_target,
    simnvml_build,
    simnvml_driver,
)

RESOURCE = "sro.dev/simulated-gpu"
CONFIG = "health: {recoverAfterSeconds: 0.5}\n"


class FakeKubelet(api_pb2_grpc.RegistrationServicer):  # type: ignore[misc]
    """The kubelet's Registration service, recording requests (and refusing when told to)."""

    def __init__(self, plugin_dir: Path, refuse: str = "") -> None:
        self.requests: list[api_pb2.RegisterRequest] = []
        self.refuse = refuse
        self.registered = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.path = plugin_dir / "kubelet.sock"
        self.server.add_insecure_port(f"unix://{self.path}")
        self.server.start()

    def Register(self, request: api_pb2.RegisterRequest, context: Any) -> api_pb2.Empty:
        if self.refuse:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.refuse)
        self.requests.append(request)
        self.registered.set()
        return api_pb2.Empty()

    def stop(self) -> None:
        self.server.stop(0).wait()
        if self.path.exists():
            self.path.unlink()


def wait_until(cond: Callable[[], object], timeout: float = 10.0) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
    return time.monotonic() - start


@pytest.fixture
def driver_root(tmp_path: Path) -> Path:
    inv = simconfig.parse(
        {"count": 4, "numaNodes": [0, 0, 1, 1], "nvlinkIslands": [[0, 1], [2, 3]]}, SIMULATED_GPU.device_node
    )
    root = tmp_path / "driver"
    doc = driverstate.inventory_to_doc(inv, 120, 255)
    doc["controlNodes"] = [{"path": "/dev/sro-simgpuctl", "minor": 255}]
    driverstate.write_atomic(root / "devices.json", json.dumps(doc))
    return root


class Running:
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin
        self.stop = threading.Event()
        self.thread = threading.Thread(target=plugin.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(f"unix://{self.plugin.plugin_dir / socket_name(RESOURCE)}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short temp dir: unix socket paths are limited to 107 bytes (pytest's own are too long)."""
    d = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make_plugin(tmp_path: Path, driver_root: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []
    plugin_dir = tmp_path / "device-plugins"
    plugin_dir.mkdir()

    def make(config: str | None = CONFIG) -> Running:
        cfg_path = None
        if config is not None:
            cfg_path = tmp_path / "config.yaml"
            cfg_path.write_text(config)
        p = Plugin(
            SIMULATED_GPU,
            SimulatedBackend(driver_root, 0.02),
            plugin_dir,
            cfg_path,
            poll=0.05,
            liveness_every=0.2,
        )
        r = Running(p)
        started.append(r)
        return r

    yield make
    for r in started:
        r.close()


def uuids(driver_root: Path) -> list[str]:
    return [d.uuid for d in driverstate.read_inventory(driver_root).devices]


def test_every_call_against_a_fake_kubelet(
    make_plugin: Callable[..., Running], tmp_path: Path, driver_root: Path
) -> None:
    kubelet = FakeKubelet(tmp_path / "device-plugins")
    running = make_plugin()
    try:
        assert kubelet.registered.wait(10)
        (req,) = kubelet.requests
        assert req.version == "v1beta1" and req.resource_name == RESOURCE
        assert (
            req.endpoint == "sro-sro.dev_simulated-gpu.sock"
            and (tmp_path / "device-plugins" / req.endpoint).is_socket()
        )
        assert req.options.get_preferred_allocation_available and not req.options.pre_start_required

        stub = api_pb2_grpc.DevicePluginStub(running.channel())
        opts = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
        assert opts.get_preferred_allocation_available and not opts.pre_start_required

        u = uuids(driver_root)
        stream = stub.ListAndWatch(api_pb2.Empty(), timeout=30)
        first = next(stream)
        assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in first.devices] == [
            (u[0], "Healthy", [0]), (u[1], "Healthy", [0]), (u[2], "Healthy", [1]), (u[3], "Healthy", [1]),
        ]  # fmt: skip

        pref = stub.GetPreferredAllocation(
            api_pb2.PreferredAllocationRequest(
                container_requests=[
                    api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=u, allocation_size=2)
                ]
            ),
            timeout=5,
        )
        assert sorted(pref.container_responses[0].deviceIDs) == sorted(u[:2])  # NVLink pair on NUMA 0

        resp = stub.Allocate(
            api_pb2.AllocateRequest(
                container_requests=[
                    api_pb2.ContainerAllocateRequest(devices_ids=[u[1], u[2]]),
                    api_pb2.ContainerAllocateRequest(devices_ids=[u[0]]),
                ]
            ),
            timeout=5,
        )
        c0, c1 = resp.container_responses
        assert dict(c0.envs) == {"SRO_VISIBLE_DEVICES": f"{u[1]},{u[2]}"}
        assert [(d.host_path, d.container_path, d.permissions) for d in c0.devices] == [
            ("/dev/sro-simgpu1", "/dev/sro-simgpu1", "rw"),
            ("/dev/sro-simgpu2", "/dev/sro-simgpu2", "rw"),
            ("/dev/sro-simgpuctl", "/dev/sro-simgpuctl", "rw"),
        ]
        assert dict(c1.envs) == {"SRO_VISIBLE_DEVICES": u[0]}

        with pytest.raises(grpc.RpcError) as e:
            stub.Allocate(
                api_pb2.AllocateRequest(
                    container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=["GPU-bogus"])]
                ),
                timeout=5,
            )
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "GPU-bogus" in e.value.details()

        assert (
            stub.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=[u[0]]), timeout=5)
            == api_pb2.PreStartContainerResponse()
        )

        # a fault: the stream reports it, Allocate refuses the device, preferred skips it
        driverstate.set_fault(driver_root, u[3], 79)  # how fast: benchmarks/bench_deviceplugin.py
        update = next(stream)
        assert [d.health for d in update.devices] == ["Healthy", "Healthy", "Healthy", "Unhealthy"]
        with pytest.raises(grpc.RpcError) as e:
            stub.Allocate(
                api_pb2.AllocateRequest(
                    container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[u[3]])]
                ),
                timeout=5,
            )
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "unhealthy" in e.value.details()
        pref = stub.GetPreferredAllocation(
            api_pb2.PreferredAllocationRequest(
                container_requests=[
                    api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=u[2:], allocation_size=2)
                ]
            ),
            timeout=5,
        )
        assert list(pref.container_responses[0].deviceIDs) == [u[2]]

        # cleared: healthy again after the quiet period (0.5 s in CONFIG)
        t0 = time.monotonic()
        driverstate.clear_faults(driver_root, [u[3]])
        recovered = next(stream)
        assert [d.health for d in recovered.devices] == ["Healthy"] * 4
        assert time.monotonic() - t0 >= 0.45
        stream.cancel()
    finally:
        kubelet.stop()


def test_kubelet_restart_and_down_at_start(make_plugin: Callable[..., Running], tmp_path: Path) -> None:
    plugin_dir = tmp_path / "device-plugins"
    running = make_plugin()
    time.sleep(0.5)  # no kubelet yet: the plugin waits, serving
    assert running.thread.is_alive() and (plugin_dir / socket_name(RESOURCE)).is_socket()
    kubelet = FakeKubelet(plugin_dir)
    wait_until(lambda: kubelet.requests)
    kubelet.stop()
    # a restarting kubelet wipes the directory, then creates its socket again
    for p in plugin_dir.iterdir():
        p.unlink()
    time.sleep(0.3)
    assert running.thread.is_alive()
    kubelet2 = FakeKubelet(plugin_dir)
    try:
        wait_until(lambda: kubelet2.requests)
        assert (plugin_dir / socket_name(RESOURCE)).is_socket()
        stub = api_pb2_grpc.DevicePluginStub(running.channel())
        assert len(next(stub.ListAndWatch(api_pb2.Empty(), timeout=5)).devices) == 4
        assert len(running.plugin.registration_latencies) == 2
    finally:
        kubelet2.stop()


def test_crashed_server_is_restarted_and_reregistered(
    make_plugin: Callable[..., Running], tmp_path: Path
) -> None:
    kubelet = FakeKubelet(tmp_path / "device-plugins")
    running = make_plugin()
    try:
        wait_until(lambda: kubelet.requests)
        server = running.plugin.slots[0].server
        assert server.grpc_server is not None
        server.grpc_server.stop(0).wait()  # the server dies; its socket file stays
        wait_until(lambda: len(kubelet.requests) >= 2)
        stub = api_pb2_grpc.DevicePluginStub(running.channel())
        assert stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5).get_preferred_allocation_available
        # our socket deleted from under us: restarted too
        (tmp_path / "device-plugins" / socket_name(RESOURCE)).unlink()
        wait_until(lambda: len(kubelet.requests) >= 3)
        assert (tmp_path / "device-plugins" / socket_name(RESOURCE)).is_socket()
    finally:
        kubelet.stop()


def test_bad_config_is_logged_and_never_exits(
    make_plugin: Callable[..., Running], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    kubelet = FakeKubelet(tmp_path / "device-plugins")
    running = make_plugin("flags: {migStrategy: sometimes}\n")
    try:
        wait_until(lambda: "flags.migStrategy" in caplog.text)
        assert running.thread.is_alive() and not kubelet.requests
        cfg = tmp_path / "config.yaml"
        cfg.write_text("sharing: {timeSlicing: {resources: [{name: sro.dev/simulated-gpu, replicas: 2}]}}\n")
        wait_until(lambda: kubelet.requests)
        stub = api_pb2_grpc.DevicePluginStub(running.channel())
        assert len(next(stub.ListAndWatch(api_pb2.Empty(), timeout=5)).devices) == 8
        caplog.clear()
        cfg.write_text("{not: yaml: at all")
        os.utime(cfg, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        wait_until(lambda: "not YAML" in caplog.text)
        assert len(next(stub.ListAndWatch(api_pb2.Empty(), timeout=5)).devices) == 8  # the last good config
        assert running.thread.is_alive()
    finally:
        kubelet.stop()


def test_refused_registration_is_retried(
    make_plugin: Callable[..., Running], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    kubelet = FakeKubelet(tmp_path / "device-plugins", refuse="resource name already registered")
    running = make_plugin()
    try:
        wait_until(lambda: "already registered" in caplog.text)
        assert running.thread.is_alive()
        kubelet.refuse = ""
        wait_until(lambda: kubelet.requests, timeout=15)
    finally:
        kubelet.stop()


def test_missing_driver_is_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, driver_root: Path
) -> None:
    caplog.set_level(logging.ERROR)
    plugin_dir = tmp_path / "device-plugins"
    plugin_dir.mkdir()
    absent = tmp_path / "not-yet"
    ready = tmp_path / "ready"
    p = Plugin(SIMULATED_GPU, SimulatedBackend(absent, 0.02), plugin_dir, poll=0.05, ready_file=ready)
    p._next_load = 0.0
    running = Running(p)
    kubelet = FakeKubelet(plugin_dir)
    try:
        wait_until(lambda: "sro driver simulate" in caplog.text)
        time.sleep(2.5)  # a second try (every 2 s) says nothing new: one line while it waits
        assert caplog.text.count("cannot read the simulated inventory") == 1, caplog.text
        assert not kubelet.requests and not ready.exists()  # the pod is not Ready meanwhile
        absent.mkdir()
        (absent / "devices.json").write_text((driver_root / "devices.json").read_text())
        wait_until(lambda: kubelet.requests, timeout=10)
        wait_until(ready.exists)
    finally:
        running.close()
        kubelet.stop()
    assert not ready.exists()  # stopped: not ready


NVML_UUIDS = """
import json, sys
from pathlib import Path
import pynvml
from sro.devices.nvml import preload_nvml
if len(sys.argv) > 1:
    preload_nvml(Path(sys.argv[1]))
pynvml.nvmlInit()
n = pynvml.nvmlDeviceGetCount()
print(json.dumps([str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(n)]))
"""


def test_nvml_plugin_against_a_fake_kubelet(
    nvml_target: NvmlTarget,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The real NVML backend behind the same plugin and gRPC calls, on this machine's NVIDIA GPUs (the
    `gpu` variant) and on the simulated NVIDIA driver; the plugin runs in a child process and the
    GPUs are listed by pynvml in another (NVML is process-global)."""
    root = [str(nvml_target.driver_root)] if nvml_target.driver_root else []
    listed_by_nvml = nvml_target.python_child(NVML_UUIDS, *root)
    assert listed_by_nvml.returncode == 0, listed_by_nvml.stderr
    gpus: list[str] = json.loads(listed_by_nvml.stdout)
    assert gpus and all(g.startswith("GPU-") for g in gpus)
    plugin_dir = tmp_path / "device-plugins"
    plugin_dir.mkdir()
    kubelet = FakeKubelet(plugin_dir)
    plugin = PluginProcess(nvml_target, plugin_dir)
    try:
        wait_until(lambda: kubelet.requests or not plugin.alive(), timeout=60)
        assert plugin.alive(), plugin.log()
        assert kubelet.requests[0].resource_name == "nvidia.com/gpu"
        stub = plugin.stub()
        listed = next(stub.ListAndWatch(api_pb2.Empty(), timeout=10))
        assert [d.ID for d in listed.devices] == gpus
        assert all(d.health == "Healthy" for d in listed.devices)
        resp = stub.Allocate(
            api_pb2.AllocateRequest(
                container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[gpus[0]])]
            ),
            timeout=10,
        )
        assert dict(resp.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": gpus[0]}
        assert resp.container_responses[0].devices[0].host_path.startswith("/dev/nvidia")
        print(f"\nNVML plugin ({'simulated' if nvml_target.simulated else 'this GPU machine'}): {gpus}")
    finally:
        kubelet.stop()
        assert plugin.stop() == 0, plugin.log()


def test_reinstalled_driver_is_picked_up(
    make_plugin: Callable[..., Running], tmp_path: Path, driver_root: Path
) -> None:
    kubelet = FakeKubelet(tmp_path / "device-plugins")
    running = make_plugin()
    try:
        wait_until(lambda: kubelet.requests)
        stub = api_pb2_grpc.DevicePluginStub(running.channel())
        assert len(next(stub.ListAndWatch(api_pb2.Empty(), timeout=5)).devices) == 4
        inv = simconfig.parse({"count": 6}, SIMULATED_GPU.device_node)
        driverstate.write_atomic(
            driver_root / "devices.json", json.dumps(driverstate.inventory_to_doc(inv, 120, 255))
        )
        wait_until(lambda: len(kubelet.requests) >= 2)
        stub = api_pb2_grpc.DevicePluginStub(running.channel())
        assert len(next(stub.ListAndWatch(api_pb2.Empty(), timeout=5)).devices) == 6
    finally:
        kubelet.stop()


def test_fault_active_before_start_is_never_announced_healthy(
    make_plugin: Callable[..., Running], tmp_path: Path, driver_root: Path
) -> None:
    u = uuids(driver_root)
    driverstate.set_fault(driver_root, u[1], 79)
    kubelet = FakeKubelet(tmp_path / "device-plugins")
    running = make_plugin()
    try:
        wait_until(lambda: kubelet.requests)
        stub = api_pb2_grpc.DevicePluginStub(running.channel())
        first = next(stub.ListAndWatch(api_pb2.Empty(), timeout=5))
        assert [d.health for d in first.devices] == ["Healthy", "Unhealthy", "Healthy", "Healthy"]
    finally:
        kubelet.stop()
