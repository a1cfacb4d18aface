"""Device plugin speed and memory, against baselines taken in the same run.

The plugin runs as its own process (`sro device-plugin --recipe simulated-gpu`) on an 8-GPU
simulated node (two NVLink islands on two NUMA nodes) and registers with a fake kubelet on a temp
unix socket. Figures:
- Allocate (2 devices) and GetPreferredAllocation (4 of 8: the exhaustive 70-set search) latency,
  p50 and p99, against GetDevicePluginOptions, a no-op call on the same socket and server, in
  SRO_BENCH_PAIRS pairs whose calls alternate with the no-op's one by one (`paired_timings` by call:
  a burst of noise then lands on both sides; goals: Allocate p99 at most 1.5x the no-op, the rest 3x);
- fault injected -> ListAndWatch update, and kubelet socket re-created -> Register received
  (targets: < 1 s and < 5 s), against the plugin's own poll intervals;
- the plugin's resident memory against a bare python process.
Then the same node on the `nvml` backend (`--recipe nvidia-gpu`: pynvml over sro's simulated NVIDIA
driver, `benchmarks.simnvml`), in the same run: Allocate and GetPreferredAllocation (topology from
NVML's NVLink calls) against its own no-op and against the simulated backend's figures, an Xid
through NVML's event set -> ListAndWatch, and its memory against the simulated backend's plugin.
Where the simulated NVIDIA driver cannot be installed (not root, no gcc, a real NVIDIA driver), the
nvml figures are left out, saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from benchmarks import simnvml
from benchmarks.harness import (
    PAIRS,
    Figure,
    paired_figure,
    paired_timings,
    percentile,
    rss_mib,
    stop,
    timings,
)
from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices import driverstate, simconfig, simnvml_state
from sro.node.deviceplugin import api_pb2, api_pb2_grpc
from sro.node.deviceplugin.server import socket_name

RESOURCE = SIMULATED_GPU.resource
EIGHT = {
    "count": 8,
    "numaNodes": [0, 0, 0, 0, 1, 1, 1, 1],
    "nvlinkIslands": [[0, 1, 2, 3], [4, 5, 6, 7]],
    "nvlinkLinks": 4,
}
# calls per side over all pairs: a pair's p99 is then its 10th slowest of 1,000, not its 4th of 400
REPEAT = 5000
NVML_FAULTS = 5  # an NVML fault clears after a quiet period (recoverAfterSeconds): each costs ~1 s


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


@dataclass
class Measured:
    """One plugin process's figures: seconds per call or event, and its resident memory in MiB.

    The call latencies come in PAIRS batches, each taken in turn with a batch of no-op calls, call by
    call: `alloc[i]` pairs with `noop_alloc[i]`, `pref[i]` with `noop_pref[i]`.
    """

    alloc: list[list[float]]
    noop_alloc: list[list[float]]
    pref: list[list[float]]
    noop_pref: list[list[float]]
    fault: list[float] = field(default_factory=list)
    rereg: list[float] = field(default_factory=list)
    rss: float = 0.0


@dataclass
class Plugin:
    """A plugin process registered with its own fake kubelet, and a client on its socket."""

    proc: subprocess.Popen[bytes]
    kubelet: _Kubelet
    registered: list[float]
    channel: grpc.Channel
    stub: Any

    def close(self) -> None:
        self.channel.close()
        stop(self.proc, 10)
        self.kubelet.server.stop(0)


def _start(
    recipe: str,
    resource: str,
    driver_root: Path,
    plugin_dir: Path,
    config: str,
    env: dict[str, str] | None = None,
) -> Plugin:
    plugin_dir.mkdir()
    (plugin_dir.parent / f"{plugin_dir.name}.yaml").write_text(config)
    registered: list[float] = []
    kubelet = _Kubelet(plugin_dir / "kubelet.sock", registered)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sro", "device-plugin", "--recipe", recipe, "--driver-root", str(driver_root),
         "--plugin-dir", str(plugin_dir), "--config", str(plugin_dir.parent / f"{plugin_dir.name}.yaml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )  # fmt: skip
    try:
        _wait(lambda: registered)
    except RuntimeError:
        stop(proc, 10)
        kubelet.server.stop(0)
        raise
    channel = grpc.insecure_channel(f"unix://{plugin_dir / socket_name(resource)}")
    stub = api_pb2_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
    return Plugin(proc, kubelet, registered, channel, stub)


def _calls(stub: Any, ids: list[str]) -> Measured:
    """Allocate (NVLink pairs) and GetPreferredAllocation (4 of 8), between no-op calls."""
    pairs = [[ids[i], ids[(i + 1) % 8]] for i in range(8)]
    n = iter(range(10**9))

    def allocate() -> None:
        pair = pairs[next(n) % 8]
        stub.Allocate(
            api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=pair)])
        )

    pref_req = api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=4)
        ]
    )
    empty = api_pb2.Empty()
    batch = max(1, REPEAT // PAIRS)

    def batches(fn: Callable[[], object]) -> tuple[list[list[float]], list[list[float]]]:
        return paired_timings(fn, lambda: stub.GetDevicePluginOptions(empty), batch, warmup=10, by_call=True)

    timings(allocate, 50)  # the first calls of a fresh channel and server are slow for everyone
    alloc, noop_alloc = batches(allocate)
    pref, noop_pref = batches(lambda: stub.GetPreferredAllocation(pref_req))
    return Measured(alloc, noop_alloc, pref, noop_pref)


def _faults(stub: Any, inject: Callable[[int], None], clear: Callable[[], object], times: int) -> list[float]:
    """Seconds from a fault injected to the ListAndWatch update; each fault is cleared, and the
    device announced healthy again, before the next."""
    stream = stub.ListAndWatch(api_pb2.Empty())
    next(stream)
    took = []
    for i in range(times):
        t0 = time.monotonic()
        inject(i % 8)
        next(stream)
        took.append(time.monotonic() - t0)
        clear()
        next(stream)
    stream.cancel()
    return took


def _simulated(tmp: Path) -> Measured:
    """The simulated backend: Allocate, GetPreferredAllocation, faults, kubelet restarts, memory."""
    driver_root = tmp / "drv"
    inv = simconfig.parse(EIGHT, SIMULATED_GPU.device_node)
    doc = driverstate.inventory_to_doc(inv, 120, 255)
    doc["controlNodes"] = [{"path": "/dev/sro-simgpuctl", "minor": 255}]
    driverstate.write_atomic(driver_root / "devices.json", json.dumps(doc))
    plugin = _start("simulated-gpu", RESOURCE, driver_root, tmp / "dp", "health: {recoverAfterSeconds: 0}\n")
    plugin_dir = tmp / "dp"
    try:
        measured = _calls(plugin.stub, [d.uuid for d in inv.devices])

        def inject(i: int) -> None:
            driverstate.set_fault(driver_root, inv.devices[i].uuid, 79)

        measured.fault = _faults(plugin.stub, inject, lambda: driverstate.clear_faults(driver_root, None), 10)

        # kubelet restart: the directory wiped, a new kubelet socket -> Register
        for _ in range(5):
            plugin.kubelet.server.stop(0).wait()
            for p in plugin_dir.iterdir():
                p.unlink()
            time.sleep(0.3)
            before = len(plugin.registered)
            plugin.kubelet = _Kubelet(plugin_dir / "kubelet.sock", plugin.registered)
            created = os.stat(plugin_dir / "kubelet.sock").st_mtime
            _wait(lambda before=before: len(plugin.registered) > before)
            measured.rereg.append(plugin.registered[-1] - created)

        time.sleep(0.5)
        measured.rss = rss_mib(plugin.proc.pid)
    finally:
        plugin.close()
    return measured


def _nvml(tmp: Path) -> Measured:
    """The nvml backend over the simulated NVIDIA driver of the same 8 GPUs: pynvml in the plugin
    loads the driver root's libnvidia-ml.so.1, which serves the state the held driver rewrites."""
    with simnvml.installed(tmp, EIGHT) as nv:
        inv = driverstate.read_inventory(nv.driver_root)
        # an Xid reaches NVML's event set once; it is healthy again after a quiet second
        plugin = _start(
            "nvidia-gpu", NVIDIA_GPU.resource, nv.driver_root, tmp / "dpn", "health: {recoverAfterSeconds: 1}\n",
            nv.env,
        )  # fmt: skip
        try:
            measured = _calls(plugin.stub, [d.uuid for d in inv.devices])

            def inject(i: int) -> None:
                driverstate.set_fault(nv.driver_root, inv.devices[i].uuid, 79)
                simnvml_state.write_state(nv.driver_root)  # as `sro simulate fault` does

            def clear() -> None:
                driverstate.clear_faults(nv.driver_root, None)
                simnvml_state.write_state(nv.driver_root)

            measured.fault = _faults(plugin.stub, inject, clear, NVML_FAULTS)
            time.sleep(0.5)
            measured.rss = rss_mib(plugin.proc.pid)
        finally:
            plugin.close()
    return measured


def run() -> list[Figure]:
    tmp = Path(tempfile.mkdtemp(prefix="dpb", dir="/tmp"))  # short: unix socket paths max 107 bytes
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        sim = _simulated(tmp)
        why_not = simnvml.unavailable()
        nv = _nvml(tmp) if not why_not else None
        time.sleep(0.2)
        bare_rss = rss_mib(bare.pid)
    finally:
        bare.kill()
        bare.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if why_not:
        print(f"deviceplugin: nvml backend figures left out: {why_not}")

    figures = [
        *_latency("deviceplugin", "(8 GPUs)", sim),
        Figure("deviceplugin fault -> ListAndWatch max", max(sim.fault) * 1000, 100.0, "ms",
               "backend poll interval", "< 1000 ms", goal=1000.0 / 100.0),
        Figure("deviceplugin kubelet.sock -> Register max", max(sim.rereg) * 1000, 200.0, "ms",
               "watcher poll interval", "< 5000 ms", goal=5000.0 / 200.0),
        Figure("deviceplugin resident memory", sim.rss, bare_rss, "MiB", "bare python process", ""),
    ]  # fmt: skip
    if nv is None:
        return figures
    sim_backend = "simulated backend"
    sim_fault = max(sim.fault) * 1000
    return [
        *figures,
        *_latency("deviceplugin nvml", "(8 simulated-NVML GPUs)", nv, with_pref=False),
        *(
            paired_figure(f"deviceplugin nvml Allocate p{p} vs simulated", "ms", f"{sim_backend} p{p}",
                          [_ms(b, p) for b in nv.alloc], [_ms(b, p) for b in sim.alloc], goal=None)
            for p in (50, 99)
        ),
        paired_figure("deviceplugin nvml GetPreferredAllocation 4/8 p50", "ms", f"{sim_backend} p50",
                      [_ms(b, 50) for b in nv.pref], [_ms(b, 50) for b in sim.pref], goal=None),
        Figure("deviceplugin nvml Xid (NVML event) -> ListAndWatch max", max(nv.fault) * 1000, sim_fault, "ms",
               f"{sim_backend} max", "< 1000 ms", goal=1000.0 / sim_fault if sim_fault else None),
        Figure("deviceplugin nvml resident memory", nv.rss, sim.rss, "MiB", f"{sim_backend} plugin", ""),
    ]  # fmt: skip


def _latency(prefix: str, what: str, m: Measured, with_pref: bool = True) -> list[Figure]:
    """Allocate and GetPreferredAllocation p50/p99, each pair of batches against its own no-op batch.

    Goals: Allocate p99 at most 1.5x the no-op call (issue 26); the rest keep their 3x.
    """
    out = []
    calls = [("Allocate", m.alloc, m.noop_alloc, {50: 3.0, 99: 1.5})]
    if with_pref:
        calls.append(("GetPreferredAllocation 4/8", m.pref, m.noop_pref, {50: 3.0, 99: 3.0}))
    for call, work, noop, goals in calls:
        for p, goal in goals.items():
            out.append(
                paired_figure(
                    f"{prefix} {call} p{p}" + (f" {what}" if call == "Allocate" else ""),
                    "ms",
                    f"no-op gRPC p{p}",
                    [_ms(b, p) for b in work],
                    [_ms(b, p) for b in noop],
                    goal=goal,
                    target=f"<= {goal:g}x no-op (p99 < 5 ms)",
                )
            )
    return out
