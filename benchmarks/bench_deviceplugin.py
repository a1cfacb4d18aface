"""Device plugin speed and memory, against baselines taken in the same run.

The plugin runs as its own process (`sro device-plugin --recipe simulated-gpu`) on an 8-GPU
simulated node (two NVLink islands on two NUMA nodes) and registers with a fake kubelet on a temp
unix socket. Figures:
- Allocate (2 devices) and GetPreferredAllocation (4 of 8: the exhaustive 70-set search) latency,
  p50 and p99, against GetDevicePluginOptions, a no-op call on the same socket and server
  (targets: p99 < 5 ms and within 3x the no-op);
- fault injected -> ListAndWatch update, and kubelet socket re-created -> Register received
  (targets: < 1 s and < 5 s), against the plugin's own poll intervals;
- the plugin's resident memory against a bare python process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from benchmarks.harness import Figure, percentile, rss_mib, stop, timings
from sro.api.recipes import SIMULATED_GPU
from sro.devices import driverstate, simconfig
from sro.node.deviceplugin import api_pb2, api_pb2_grpc
from sro.node.deviceplugin.server import socket_name

RESOURCE = SIMULATED_GPU.resource
EIGHT = {
    "count": 8,
    "numaNodes": [0, 0, 0, 0, 1, 1, 1, 1],
    "nvlinkIslands": [[0, 1, 2, 3], [4, 5, 6, 7]],
    "nvlinkLinks": 4,
}
REPEAT = 2000


class _Kubelet(api_pb2_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, path: Path, times: list[float]) -> None:
        self.times = times  # shared by every incarnation: the wall-clock time of each Register
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self.server)  # type: ignore[no-untyped-call]
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()

    def Register(self, request: Any, context: Any) -> Any:
        self.times.append(time.time())
        return api_pb2.Empty()


def _wait(cond: Any, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise RuntimeError("benchmark set-up timed out")
        time.sleep(0.005)


def _ms(samples: list[float], p: float) -> float:
    return percentile(samples, p) * 1000


def run() -> list[Figure]:
    tmp = Path(tempfile.mkdtemp(prefix="dpb", dir="/tmp"))  # short: unix socket paths max 107 bytes
    plugin_dir, driver_root = tmp / "dp", tmp / "drv"
    plugin_dir.mkdir()
    inv = simconfig.parse(EIGHT, SIMULATED_GPU.device_node)
    doc = driverstate.inventory_to_doc(inv, 120, 255)
    doc["controlNodes"] = [{"path": "/dev/sro-simgpuctl", "minor": 255}]
    driverstate.write_atomic(driver_root / "devices.json", json.dumps(doc))
    (tmp / "config.yaml").write_text("health: {recoverAfterSeconds: 0}\n")
    registered: list[float] = []
    kubelet = _Kubelet(plugin_dir / "kubelet.sock", registered)
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "sro", "device-plugin", "--recipe", "simulated-gpu", "--driver-root", str(driver_root),
         "--plugin-dir", str(plugin_dir), "--config", str(tmp / "config.yaml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait(lambda: registered)
        channel = grpc.insecure_channel(f"unix://{plugin_dir / socket_name(RESOURCE)}")
        stub = api_pb2_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
        ids = [d.uuid for d in inv.devices]
        pairs = [[ids[i], ids[(i + 1) % 8]] for i in range(8)]
        n = iter(range(10**9))

        def allocate() -> None:
            pair = pairs[next(n) % 8]
            stub.Allocate(
                api_pb2.AllocateRequest(
                    container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=pair)]
                )
            )

        pref_req = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=4)
            ]
        )
        empty = api_pb2.Empty()
        noop = timings(lambda: stub.GetDevicePluginOptions(empty), REPEAT, warmup=50)
        alloc = timings(allocate, REPEAT, warmup=50)
        pref = timings(lambda: stub.GetPreferredAllocation(pref_req), REPEAT, warmup=50)
        noop2 = timings(lambda: stub.GetDevicePluginOptions(empty), REPEAT, warmup=10)
        noop = sorted(noop + noop2)  # before and after, so drift does not favour either side

        # fault -> ListAndWatch update
        stream = stub.ListAndWatch(empty)
        next(stream)
        fault_lat = []
        for i in range(10):
            t0 = time.monotonic()
            driverstate.set_fault(driver_root, inv.devices[i % 8].uuid, 79)
            next(stream)
            fault_lat.append(time.monotonic() - t0)
            driverstate.clear_faults(driver_root, None)
            next(stream)
        stream.cancel()

        # kubelet restart: the directory wiped, a new kubelet socket -> Register
        rereg = []
        for _ in range(5):
            kubelet.server.stop(0).wait()
            for p in plugin_dir.iterdir():
                p.unlink()
            time.sleep(0.3)
            before = len(registered)
            kubelet = _Kubelet(plugin_dir / "kubelet.sock", registered)
            created = os.stat(plugin_dir / "kubelet.sock").st_mtime
            _wait(lambda before=before: len(registered) > before)
            rereg.append(registered[-1] - created)

        time.sleep(0.5)
        plugin_rss, bare_rss = rss_mib(proc.pid), rss_mib(bare.pid)
        channel.close()
    finally:
        bare.kill()
        stop(proc, 10)
        bare.wait()
        kubelet.server.stop(0)
        shutil.rmtree(tmp, ignore_errors=True)

    noop50, noop99 = _ms(noop, 50), _ms(noop, 99)
    target = "p99 < 5 ms and < 3x no-op"
    return [
        Figure("deviceplugin Allocate p50 (8 GPUs)", _ms(alloc, 50), noop50, "ms", "no-op gRPC p50", target),
        Figure("deviceplugin Allocate p99 (8 GPUs)", _ms(alloc, 99), noop99, "ms", "no-op gRPC p99", target),
        Figure(
            "deviceplugin GetPreferredAllocation 4/8 p50",
            _ms(pref, 50),
            noop50,
            "ms",
            "no-op gRPC p50",
            target,
        ),
        Figure(
            "deviceplugin GetPreferredAllocation 4/8 p99",
            _ms(pref, 99),
            noop99,
            "ms",
            "no-op gRPC p99",
            target,
        ),
        Figure(
            "deviceplugin fault -> ListAndWatch max",
            max(fault_lat) * 1000,
            100.0,
            "ms",
            "backend poll interval",
            "< 1000 ms",
        ),
        Figure(
            "deviceplugin kubelet.sock -> Register max",
            max(rereg) * 1000,
            200.0,
            "ms",
            "watcher poll interval",
            "< 5000 ms",
        ),
        Figure("deviceplugin resident memory", plugin_rss, bare_rss, "MiB", "bare python process", ""),
    ]
