"""The kubelet's pod-resources API (v1 `List`) over its unix socket: which container holds which id.

Why in `host/`: two node agents ask it — the exporter (which pod's series a device's metrics are)
and the device plugin (which pods hold a faulty device, for the health report the operator's
remediation evicts from) — and node agents never import each other. It reads the node through a
socket only, like the rest of `host/`. `podresources.proto` + generated modules live beside it
(`python -m sro.node.protogen` regenerates/checks them).

Why a new channel per call: the exporter asks once per collection (every 30 s by default), and a
kubelet restart replaces the socket; a fresh channel to whatever socket is there now costs about a
millisecond and never talks to a dead one. Every failure becomes `KubeletUnavailable` with the
reason (socket missing, connection refused, timeout, an error status), which the exporter reports
as `sro_exporter_source_up{source="kubelet"} 0` and a log line, and serves the rest.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import grpc

from sro.host.podresources import podresources_pb2, podresources_pb2_grpc

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
TIMEOUT = 5.0
MAX_MESSAGE = 16 << 20  # a node with many pods answers more than gRPC's 4 MiB default


@dataclass(frozen=True)
class Assignment:
    """One device id the kubelet assigned to one container (a flattened pod-resources answer)."""

    pod: str
    namespace: str
    container: str
    resource: str
    device_id: str


class KubeletUnavailable(RuntimeError):
    """The pod-resources API could not be asked; the message says why."""


def flatten(response: podresources_pb2.ListPodResourcesResponse) -> list[Assignment]:
    return [
        Assignment(pod.name, pod.namespace, container.name, devices.resource_name, device_id)
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
        for device_id in devices.device_ids
    ]


def list_assignments(socket: Path, timeout: float = TIMEOUT) -> list[Assignment]:
    """Every device id assigned to a container on this node, from the kubelet at `socket`."""
    try:
        mode = socket.stat().st_mode
    except FileNotFoundError:
        raise KubeletUnavailable(
            f"{socket}: no such socket (kubelet down or restarting, or its pod-resources directory "
            "not mounted)"
        ) from None
    except OSError as e:
        raise KubeletUnavailable(f"{socket}: {e.strerror}") from e
    if not stat.S_ISSOCK(mode):
        raise KubeletUnavailable(f"{socket}: not a unix socket")
    channel = grpc.insecure_channel(
        f"unix://{socket}", options=[("grpc.max_receive_message_length", MAX_MESSAGE)]
    )
    try:
        stub = podresources_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
        response = stub.List(podresources_pb2.ListPodResourcesRequest(), timeout=timeout)
    except grpc.RpcError as e:
        raise KubeletUnavailable(f"List on {socket}: {e.code().name}: {e.details()}") from e
    finally:
        channel.close()
    return flatten(response)
