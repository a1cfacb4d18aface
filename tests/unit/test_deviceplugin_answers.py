"""Allocate builds a device set's answer once (issue 26: Allocate p99 <= 1.5x a no-op gRPC call),
but validates every call: a device gone unhealthy after its answer was remembered is still refused,
and the remembered answer is exactly what a fresh build gives."""

from __future__ import annotations

import threading
from typing import Any, NoReturn

import grpc
import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.devices import simconfig
from sro.devices.health import HealthTracker
from sro.devices.model import DeviceUUID, HealthEvent
from sro.node.deviceplugin import allocation, api_pb2
from sro.node.deviceplugin.allocation import AllocationError
from sro.node.deviceplugin.announcing import plan
from sro.node.deviceplugin.config import parse_config
from sro.node.deviceplugin.core import HealthBoard, ResourceCore
from sro.node.deviceplugin.servicer import DevicePluginServicer, container_response


class Aborted(Exception):
    pass


class Context:
    def __init__(self) -> None:
        self.code: Any = None

    def abort(self, code: Any, message: str) -> NoReturn:
        self.code = code
        raise Aborted(message)


def _core() -> tuple[ResourceCore, HealthBoard, list[str]]:
    inv = simconfig.parse({"count": 4})
    cfg = parse_config({"flags": {"deviceListStrategy": ["envvar", "cdi-annotations"]}}, SIMULATED_GPU)
    (p,) = plan(inv, cfg)
    board = HealthBoard(HealthTracker(recover_after=None))
    return ResourceCore(p, SIMULATED_GPU, cfg, board), board, [d.uuid for d in inv.devices]


def test_the_same_ids_get_the_same_answer_and_it_equals_a_fresh_build() -> None:
    core, _, ids = _core()
    first = core.allocate([[ids[0], ids[1]], [ids[2]]])
    again = core.allocate([[ids[0], ids[1]], [ids[2]]])
    assert [a is b for a, b in zip(first, again, strict=True)] == [True, True]
    fresh = allocation.container_allocation(
        allocation.validate([ids[0], ids[1]], core.plan, core.board.healthy, core.config),
        core.plan,
        core.recipe,
        core.config,
        core.driver_files,
    )
    assert first[0] == fresh
    assert core.allocate([[ids[1], ids[0]]])[0] != first[0]  # order is part of the answer (env order)


def test_a_remembered_device_set_is_refused_once_a_device_is_unhealthy() -> None:
    core, board, ids = _core()
    core.allocate([[ids[0], ids[1]]])
    board.apply(HealthEvent("xid", DeviceUUID(ids[1]), 0.0, xid=79))
    with pytest.raises(AllocationError) as err:
        core.allocate([[ids[0], ids[1]]])
    assert err.value.reason == "unhealthy"
    servicer = DevicePluginServicer(core, threading.Event())
    context = Context()
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[ids[0], ids[1]])]
    )
    with pytest.raises(Aborted, match="unhealthy"):
        servicer.Allocate(request, context)
    assert context.code == grpc.StatusCode.FAILED_PRECONDITION


def test_the_servicer_serves_one_message_per_device_set_equal_to_a_fresh_one() -> None:
    core, _, ids = _core()
    servicer = DevicePluginServicer(core, threading.Event())
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[ids[2], ids[3]])]
    )
    first = servicer.Allocate(request, Context())
    assert servicer.Allocate(request, Context()) is first
    expected = api_pb2.AllocateResponse(
        container_responses=[container_response(a) for a in core.allocate([[ids[2], ids[3]]])]
    )
    assert first == expected
    assert first.container_responses[0].annotations  # cdi-annotations: the answer carries them
    other = servicer.Allocate(
        api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[ids[0]])]),
        Context(),
    )
    assert other != first
