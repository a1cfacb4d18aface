"""The v1beta1 DevicePlugin gRPC servicer: translation between protobuf and `ResourceCore`, only.

Why thin: every decision lives in pure modules that unit tests hit directly; this layer turns
requests into plain lists, answers into protobuf messages, and refusals into gRPC status codes
with a message naming the device (the kubelet shows it in the pod's status), logging each one.
Nothing raised here takes the plugin down: an unexpected exception becomes INTERNAL for that call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import grpc

from sro.node.deviceplugin import api_pb2, api_pb2_grpc
from sro.node.deviceplugin.allocation import AllocationError, ContainerAllocation
from sro.node.deviceplugin.core import ANSWERS_KEPT, ResourceCore

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
STREAM_POLL = 1.0  # seconds between checks that a ListAndWatch client is still there

_CODES = {
    "unknown": grpc.StatusCode.INVALID_ARGUMENT,
    "duplicate": grpc.StatusCode.INVALID_ARGUMENT,
    "unhealthy": grpc.StatusCode.FAILED_PRECONDITION,
    "too-many": grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def list_response(core: ResourceCore) -> api_pb2.ListAndWatchResponse:
    devices = []
    for d in core.devices():
        dev = api_pb2.Device(ID=d.id, health=HEALTHY if d.healthy else UNHEALTHY)
        if d.numa_node is not None:
            dev.topology.nodes.add(ID=d.numa_node)
        devices.append(dev)
    return api_pb2.ListAndWatchResponse(devices=devices)


def container_response(a: ContainerAllocation) -> api_pb2.ContainerAllocateResponse:
    return api_pb2.ContainerAllocateResponse(
        envs=dict(a.envs),
        mounts=[
            api_pb2.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in a.mounts
        ],
        devices=[
            api_pb2.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in a.devices
        ],
        annotations=dict(a.annotations),
        cdi_devices=[api_pb2.CDIDevice(name=n) for n in a.cdi_devices],
    )


class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):  # type: ignore[misc]
    def __init__(self, core: ResourceCore, stop: threading.Event) -> None:
        self.core = core
        self.stop = stop
        # The protobuf answer to the allocations the core last gave for a set of container
        # requests: the core returns the very same frozen answers for the same ids, so the message
        # is built once and served again (only while they are the same objects).
        self._responses: dict[
            tuple[tuple[str, ...], ...], tuple[list[ContainerAllocation], api_pb2.AllocateResponse]
        ] = {}

    def GetDevicePluginOptions(self, request: api_pb2.Empty, context: Any) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: api_pb2.Empty, context: Any) -> Iterator[api_pb2.ListAndWatchResponse]:
        board = self.core.board
        version = board.version
        last = list_response(self.core)
        log.info("%s: ListAndWatch: sending %d devices", self.core.resource, len(last.devices))
        yield last
        while not self.stop.is_set() and context.is_active():
            version = board.wait_change(version, STREAM_POLL)
            current = list_response(self.core)
            if current != last:
                bad = [d.ID for d in current.devices if d.health != HEALTHY]
                log.info(
                    "%s: ListAndWatch: health changed; unhealthy now: %s", self.core.resource, bad or "none"
                )
                last = current
                yield current

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: Any
    ) -> api_pb2.PreferredAllocationResponse:
        responses = []
        for req in request.container_requests:
            try:
                ids = self.core.preferred(
                    list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size
                )
            except Exception:  # a hint must never fail the pod
                log.exception(
                    "%s: GetPreferredAllocation failed; answering with no preference", self.core.resource
                )
                ids = []
            log.info(
                "%s: GetPreferredAllocation %d of %d available -> %s",
                self.core.resource,
                req.allocation_size,
                len(req.available_deviceIDs),
                ids,
            )
            responses.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: api_pb2.AllocateRequest, context: Any) -> api_pb2.AllocateResponse:
        requests = [list(r.devices_ids) for r in request.container_requests]
        try:
            allocations = self.core.allocate(requests)
        except AllocationError as e:
            log.error("%s: Allocate %s refused: %s", self.core.resource, requests, e)
            context.abort(_CODES.get(e.reason, grpc.StatusCode.INVALID_ARGUMENT), str(e))
            raise  # not reached: abort raises
        except Exception as e:
            log.exception("%s: Allocate %s failed", self.core.resource, requests)
            context.abort(grpc.StatusCode.INTERNAL, f"{self.core.resource}: allocation failed: {e}")
            raise
        log.info("%s: Allocate %s", self.core.resource, requests)
        key = tuple(tuple(r) for r in requests)
        known = self._responses.get(key)
        if (
            known is not None
            and len(known[0]) == len(allocations)
            and all(a is b for a, b in zip(known[0], allocations, strict=True))
        ):
            return known[1]
        response = api_pb2.AllocateResponse(container_responses=[container_response(a) for a in allocations])
        if len(self._responses) >= ANSWERS_KEPT:
            self._responses.clear()
        self._responses[key] = (allocations, response)
        return response

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: Any
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()
