"""The committed pod-resources code matches podresources.proto, and the proto matches the kubelet's
wire format (k8s.io/kubelet/pkg/apis/podresources/v1/api.proto)."""

from __future__ import annotations

import pytest

from sro.host.podresources import podresources_pb2
from sro.node import protogen

# (message, field) -> number, from the kubelet's podresources v1 api.proto
KUBELET_FIELDS = {
    ("ListPodResourcesResponse", "pod_resources"): 1,
    ("PodResources", "name"): 1,
    ("PodResources", "namespace"): 2,
    ("PodResources", "containers"): 3,
    ("ContainerResources", "name"): 1,
    ("ContainerResources", "devices"): 2,
    ("ContainerDevices", "resource_name"): 1,
    ("ContainerDevices", "device_ids"): 2,
}


def test_field_numbers_match_the_kubelet() -> None:
    got = {}
    for name, msg in podresources_pb2.DESCRIPTOR.message_types_by_name.items():
        for f in msg.fields:
            got[(name, f.name)] = f.number
    assert got == KUBELET_FIELDS


def test_service_and_method_path() -> None:
    assert podresources_pb2.DESCRIPTOR.package == "v1"
    (service,) = podresources_pb2.DESCRIPTOR.services_by_name.values()
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List"]
    method = service.methods_by_name["List"]
    assert not method.server_streaming and not method.client_streaming


def test_newer_kubelet_fields_are_skipped() -> None:
    """A 1.21+ kubelet adds ContainerDevices.topology (3) and ContainerResources.cpu_ids (3): unknown
    fields here, which decoding skips without losing the fields we read."""
    devices = podresources_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-a"])
    topology = bytes([0x1A, 0x04, 0x0A, 0x02, 0x08, 0x01])  # field 3: TopologyInfo{nodes: [{ID: 1}]}
    cpu_ids = bytes([0x1A, 0x02, 0x04, 0x05])  # field 3 of ContainerResources: packed int64 [4, 5]
    container = podresources_pb2.ContainerResources(name="c")
    raw = container.SerializeToString() + bytes([0x12, len(devices.SerializeToString()) + len(topology)])
    raw += devices.SerializeToString() + topology + cpu_ids
    parsed = podresources_pb2.ContainerResources.FromString(raw)
    assert parsed.name == "c"
    assert [(d.resource_name, list(d.device_ids)) for d in parsed.devices] == [("nvidia.com/gpu", ["GPU-a"])]


def test_generated_code_matches_proto() -> None:
    pytest.importorskip("grpc_tools")
    assert protogen.differences(protogen.POD_RESOURCES_PROTO) == []
