"""The committed protobuf code matches api.proto, and api.proto matches the kubelet's wire format."""

from __future__ import annotations

import pytest

from sro.node import protogen
from sro.node.deviceplugin import api_pb2

# (message, field) -> number, from k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto
KUBELET_FIELDS = {
    ("DevicePluginOptions", "pre_start_required"): 1,
    ("DevicePluginOptions", "get_preferred_allocation_available"): 2,
    ("RegisterRequest", "version"): 1,
    ("RegisterRequest", "endpoint"): 2,
    ("RegisterRequest", "resource_name"): 3,
    ("RegisterRequest", "options"): 4,
    ("ListAndWatchResponse", "devices"): 1,
    ("TopologyInfo", "nodes"): 1,
    ("NUMANode", "ID"): 1,
    ("Device", "ID"): 1,
    ("Device", "health"): 2,
    ("Device", "topology"): 3,
    ("PreStartContainerRequest", "devices_ids"): 1,
    ("PreferredAllocationRequest", "container_requests"): 1,
    ("ContainerPreferredAllocationRequest", "available_deviceIDs"): 1,
    ("ContainerPreferredAllocationRequest", "must_include_deviceIDs"): 2,
    ("ContainerPreferredAllocationRequest", "allocation_size"): 3,
    ("PreferredAllocationResponse", "container_responses"): 1,
    ("ContainerPreferredAllocationResponse", "deviceIDs"): 1,
    ("AllocateRequest", "container_requests"): 1,
    ("ContainerAllocateRequest", "devices_ids"): 1,
    ("AllocateResponse", "container_responses"): 1,
    ("ContainerAllocateResponse", "envs"): 1,
    ("ContainerAllocateResponse", "mounts"): 2,
    ("ContainerAllocateResponse", "devices"): 3,
    ("ContainerAllocateResponse", "annotations"): 4,
    ("ContainerAllocateResponse", "cdi_devices"): 5,
    ("CDIDevice", "name"): 1,
    ("Mount", "container_path"): 1,
    ("Mount", "host_path"): 2,
    ("Mount", "read_only"): 3,
    ("DeviceSpec", "container_path"): 1,
    ("DeviceSpec", "host_path"): 2,
    ("DeviceSpec", "permissions"): 3,
}


def test_field_numbers_match_the_kubelet() -> None:
    got = {}
    for name, msg in api_pb2.DESCRIPTOR.message_types_by_name.items():
        for f in msg.fields:
            got[(name, f.name)] = f.number
    assert got == KUBELET_FIELDS


def test_services_and_method_paths() -> None:
    assert api_pb2.DESCRIPTOR.package == "v1beta1"
    services = {s.name: [m.name for m in s.methods] for s in api_pb2.DESCRIPTOR.services_by_name.values()}
    assert services == {
        "Registration": ["Register"],
        "DevicePlugin": [
            "GetDevicePluginOptions",
            "ListAndWatch",
            "GetPreferredAllocation",
            "Allocate",
            "PreStartContainer",
        ],
    }
    law = api_pb2.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name["ListAndWatch"]
    assert law.server_streaming and not law.client_streaming


def test_generated_code_matches_proto() -> None:
    pytest.importorskip("grpc_tools")
    assert protogen.differences(protogen.DEVICE_PLUGIN_PROTO) == []
