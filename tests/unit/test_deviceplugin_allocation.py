"""Allocate decisions: strategies, id strategies, and refusals that name the device."""

from __future__ import annotations

import pytest

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices import simconfig
from sro.node.deviceplugin.allocation import (
    AllocationError,
    DeviceNodeSpec,
    MountSpec,
    container_allocation,
    validate,
)
from sro.node.deviceplugin.announcing import Unit, plan
from sro.node.deviceplugin.config import parse_config

INV = simconfig.parse({"count": 4})
U = [d.uuid for d in INV.devices]


def _alloc(ids: list[str], doc: object = None, recipe=SIMULATED_GPU, healthy=lambda u: True, files=()):  # type: ignore[no-untyped-def]
    cfg = parse_config(doc, recipe)
    p = {x.resource: x for x in plan(INV, cfg)}[cfg.resource_name]
    return container_allocation(validate(ids, p, healthy, cfg), p, recipe, cfg, files)


def test_default_simulated_envvar_and_device_specs() -> None:
    a = _alloc([U[2], U[0]])
    assert a.envs == {"SRO_VISIBLE_DEVICES": f"{U[2]},{U[0]}"}
    assert a.devices == (
        DeviceNodeSpec("/dev/sro-simgpu2", "/dev/sro-simgpu2", "rw"),
        DeviceNodeSpec("/dev/sro-simgpu0", "/dev/sro-simgpu0", "rw"),
        DeviceNodeSpec("/dev/sro-simgpuctl", "/dev/sro-simgpuctl", "rw"),
    )
    assert a.mounts == () and a.annotations == {} and a.cdi_devices == ()


def test_nvidia_default_is_env_and_device_specs_and_index_strategy() -> None:
    a = _alloc([U[1]], recipe=NVIDIA_GPU)
    assert a.envs == {"NVIDIA_VISIBLE_DEVICES": U[1]}
    # the device nodes are what the runtime hook believes (issue 21 §1): every recipe sends them
    assert [d.host_path for d in a.devices] == ["/dev/sro-simgpu1", *NVIDIA_GPU.control_nodes]
    a = _alloc([U[1], U[3]], {"flags": {"deviceIdStrategy": "index"}}, recipe=NVIDIA_GPU)
    assert a.envs == {"NVIDIA_VISIBLE_DEVICES": "1,3"}


def test_mounts_and_cdi_strategies() -> None:
    files = (MountSpec("/x/lib/libsimgpu.so.1", "/x/lib/libsimgpu.so.1"),)
    doc = {"flags": {"deviceListStrategy": ["mounts", "cdi-annotations", "cdi-cri"]}}
    a = _alloc([U[0], U[1]], doc, files=files)
    assert a.envs == {} and a.mounts == files and a.mounts[0].read_only
    # device-specs is always on, listed or not: the one allocation a pod spec cannot forge
    assert [d.host_path for d in a.devices] == ["/dev/sro-simgpu0", "/dev/sro-simgpu1", "/dev/sro-simgpuctl"]
    # CDI names a GPU by its node's number, as the runtime state's live spec does (test_cdi_strategy)
    names = ("sro.dev/simulated-gpu=0", "sro.dev/simulated-gpu=1")
    assert a.cdi_devices == names
    assert a.annotations == {"cdi.k8s.io/sro-device-plugin_sro.dev_simulated-gpu": ",".join(names)}


def test_replicas_of_one_gpu_give_it_once() -> None:
    doc = {"sharing": {"timeSlicing": {"resources": [{"name": "sro.dev/simulated-gpu", "replicas": 3}]}}}
    a = _alloc([f"{U[0]}::1", f"{U[0]}::3", f"{U[1]}::2"], doc)
    assert a.envs["SRO_VISIBLE_DEVICES"] == f"{U[0]},{U[1]}"
    assert [d.host_path for d in a.devices] == ["/dev/sro-simgpu0", "/dev/sro-simgpu1", "/dev/sro-simgpuctl"]


def test_refusals_name_the_device() -> None:
    with pytest.raises(AllocationError, match="unknown device id 'GPU-nope'") as e:
        _alloc([U[0], "GPU-nope"])
    assert e.value.reason == "unknown"
    with pytest.raises(AllocationError, match="requested twice"):
        _alloc([U[0], U[0]])
    with pytest.raises(AllocationError, match="empty"):
        _alloc([])

    def sick(unit: Unit) -> bool:
        return unit.uuid != U[1]

    with pytest.raises(AllocationError, match=f"device '{U[1]}' is unhealthy") as e:
        _alloc([U[0], U[1]], healthy=sick)
    assert e.value.reason == "unhealthy"
    doc = {
        "sharing": {
            "timeSlicing": {
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": "sro.dev/simulated-gpu", "replicas": 2}],
            }
        }
    }
    with pytest.raises(AllocationError, match="one replica per container") as e:
        _alloc([f"{U[0]}::1", f"{U[1]}::1"], doc)
    assert e.value.reason == "too-many"


def test_mig_units_by_index() -> None:
    inv = simconfig.parse({"count": 1, "devices": [{"mig": [{"profile": "1g.5gb"}, {"profile": "1g.5gb"}]}]})
    cfg = parse_config({"flags": {"migStrategy": "single", "deviceIdStrategy": "index"}}, NVIDIA_GPU)
    (p,) = plan(inv, cfg)
    a = container_allocation(validate([p.devices[1].id], p, lambda u: True, cfg), p, NVIDIA_GPU, cfg)
    assert a.envs == {"NVIDIA_VISIBLE_DEVICES": "0:1"}
