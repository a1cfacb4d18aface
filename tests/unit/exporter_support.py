"""Fakes for the exporter's tests: a simulated driver root, a fake kubelet serving pod-resources v1
`List` on a temp unix socket (a real gRPC server), and a collector wired to them."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent import futures
from importlib import resources
from pathlib import Path
from typing import Any

import grpc
import yaml

from sro.api.recipes import SIMULATED_GPU
from sro.devices import driverstate, simconfig
from sro.devices.model import Backend
from sro.devices.simulated import SimulatedBackend
from sro.devices.telemetry import SimulatedTelemetry, Telemetry
from sro.host import podresources
from sro.host.podresources import podresources_pb2, podresources_pb2_grpc
from sro.node.exporter import nodefacts
from sro.node.exporter.collecting import Collector

EXAMPLES = resources.files("sro.devices") / "examples"
HOST = "node-1"

# (namespace, pod, container, resource, device ids)
Pod = tuple[str, str, str, str, Sequence[str]]


def driver_root(where: Path, example: str = "8gpu-nvlink.yaml", **overrides: Any) -> Path:
    """A simulated driver's device list under `where` (no device nodes: the exporter needs none)."""
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    doc.update(overrides)
    inv = simconfig.parse(doc, SIMULATED_GPU.device_node)
    root = where / "driver"
    driverstate.write_atomic(root / "devices.json", json.dumps(driverstate.inventory_to_doc(inv, 120, 255)))
    return root


def response(pods: Iterable[Pod]) -> podresources_pb2.ListPodResourcesResponse:
    out: dict[tuple[str, str], podresources_pb2.PodResources] = {}
    for ns, pod, container, resource, ids in pods:
        p = out.setdefault((ns, pod), podresources_pb2.PodResources(name=pod, namespace=ns))
        c = next((c for c in p.containers if c.name == container), None)
        if c is None:
            c = p.containers.add(name=container)
        c.devices.add(resource_name=resource, device_ids=list(ids))
    return podresources_pb2.ListPodResourcesResponse(pod_resources=list(out.values()))


class FakeKubelet(podresources_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    """The kubelet's pod-resources service on a unix socket, answering with `pods` (changeable)."""

    def __init__(self, path: Path, pods: Iterable[Pod] = ()) -> None:
        self.path = path
        self.pods = list(pods)
        self.calls = 0
        self.lock = threading.Lock()
        self.server: grpc.Server | None = None
        self.start()

    def start(self) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{self.path}")
        self.server.start()

    def List(self, request: Any, context: Any) -> podresources_pb2.ListPodResourcesResponse:
        with self.lock:
            self.calls += 1
            return response(self.pods)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(0).wait()
            self.server = None
        self.path.unlink(missing_ok=True)


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def collector(
    root: Path,
    socket: Path | None = None,
    node_labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    config: Path | None = None,
    clock: Callable[[], float] | None = None,
    read_node: Callable[[], nodefacts.NodeFacts] | None = None,
) -> Collector:
    """A collector over the simulated driver at `root`, the fake kubelet at `socket`, a fixed Node."""
    tick = clock or Clock()

    def open_devices() -> tuple[Backend, Telemetry]:
        return SimulatedBackend(root, poll_interval=0.02), SimulatedTelemetry(root, "test", clock=tick)

    def node() -> nodefacts.NodeFacts:
        return nodefacts.facts(node_labels or {}, allocatable or {}, "sro.dev")

    return Collector(
        open_devices,
        domain="sro.dev",
        hostname=HOST,
        simulated=True,
        list_pods=(lambda: podresources.list_assignments(socket, timeout=2)) if socket else None,
        read_node=read_node or (node if node_labels is not None or allocatable is not None else None),
        config_path=config,
        clock=tick,
    )
