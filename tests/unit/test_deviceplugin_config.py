"""Plugin config parsing: defaults per recipe, every field, errors naming the field."""

from __future__ import annotations

import pytest
import yaml

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices.model import DEFAULT_IGNORED_XIDS
from sro.node.deviceplugin.config import ConfigError, TimeSlice, parse_config


def test_defaults_per_recipe() -> None:
    nv = parse_config(None, NVIDIA_GPU)
    assert nv.resource_name == "nvidia.com/gpu" and nv.list_strategies == ("envvar", "device-specs")
    sim = parse_config({}, SIMULATED_GPU)
    assert sim.resource_name == "sro.dev/simulated-gpu"
    assert sim.list_strategies == ("envvar", "device-specs")
    assert sim.ignored_xids == DEFAULT_IGNORED_XIDS == {13, 31, 43, 45, 68, 109}
    assert sim.recover_after == 60.0 and sim.mig_strategy == "none" and sim.id_strategy == "uuid"


def test_device_specs_cannot_be_left_out() -> None:
    """The hook believes only the device nodes the kubelet writes from device-specs (issue 21 §1)."""
    for recipe in (NVIDIA_GPU, SIMULATED_GPU):
        c = parse_config({"flags": {"deviceListStrategy": ["envvar"]}}, recipe)
        assert c.list_strategies == ("envvar", "device-specs")
        c = parse_config({"flags": {"deviceListStrategy": "cdi-annotations"}}, recipe)
        assert c.list_strategies == ("cdi-annotations", "device-specs")


def test_full_document() -> None:
    doc = yaml.safe_load(
        """
version: v1
resourceName: example.com/gpu
flags:
  migStrategy: mixed
  deviceListStrategy: [envvar, device-specs, mounts, cdi-annotations, cdi-cri]
  deviceIdStrategy: index
health: {ignoredXids: [13], recoverAfterSeconds: null}
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
      - {name: example.com/gpu, replicas: 4, devices: [0, "GPU-1"]}
      - {name: example.com/gpu, replicas: 2, devices: [2], rename: example.com/gpu.small}
"""
    )
    c = parse_config(doc, SIMULATED_GPU)
    assert c.resource_name == "example.com/gpu" and c.mig_strategy == "mixed" and c.id_strategy == "index"
    assert c.list_strategies == ("envvar", "device-specs", "mounts", "cdi-annotations", "cdi-cri")
    assert c.ignored_xids == {13} and c.recover_after is None
    assert c.rename_by_default and c.fail_requests_greater_than_one
    assert c.time_slicing == (
        TimeSlice("example.com/gpu", 4, ("0", "GPU-1")),
        TimeSlice("example.com/gpu", 2, ("2",), "example.com/gpu.small"),
    )


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ("just a string", "top level"),
        ({"version": "v2"}, "version"),
        ({"resourceName": "gpu"}, "resourceName"),
        ({"flags": {"migStrategy": "some"}}, "flags.migStrategy"),
        ({"flags": {"deviceListStrategy": ["volume-mounts"]}}, "flags.deviceListStrategy"),
        ({"flags": {"deviceIdStrategy": "name"}}, "flags.deviceIdStrategy"),
        ({"flags": {"migstrategy": "none"}}, "flags: unknown"),
        ({"health": {"ignoredXids": ["13"]}}, "health.ignoredXids"),
        ({"health": {"recoverAfterSeconds": -1}}, "health.recoverAfterSeconds"),
        (
            {"sharing": {"timeSlicing": {"resources": [{"name": "a.b/c", "replicas": 0}]}}},
            r"resources\[0\].replicas",
        ),
        (
            {"sharing": {"timeSlicing": {"resources": [{"name": "a.b/c", "replicas": 2, "devices": []}]}}},
            "devices",
        ),
        (
            {"sharing": {"timeSlicing": {"resources": [{"name": "nope", "replicas": 2}]}}},
            r"resources\[0\].name",
        ),
    ],
)
def test_errors_name_the_field(doc: object, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_config(doc, SIMULATED_GPU)
