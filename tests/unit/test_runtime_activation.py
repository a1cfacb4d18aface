"""What a container asks for: env var values, annotations, CDI names, capabilities."""

from __future__ import annotations

import pytest

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.node.runtime.activation import ActivationError, capabilities, env_map, request_for, requests_for

SIM = SIMULATED_GPU


def _req(env: dict[str, str], ann: dict[str, str] | None = None) -> tuple[str, ...] | None:
    r = request_for(SIM, env, ann or {})
    return None if r is None else r.devices


@pytest.mark.parametrize(
    ("value", "devices"),
    [
        ("all", ("all",)),
        ("ALL", ("all",)),
        ("none", ()),
        ("void", None),
        ("", None),
        ("0", ("0",)),
        ("0,1, 1 ,2", ("0", "1", "2")),
        ("sro.dev/simulated-gpu=1", ("1",)),
        ("0,all", ("all",)),
        ("GPU-abc", ("GPU-abc",)),
    ],
)
def test_visible_devices_values(value: str, devices: tuple[str, ...] | None) -> None:
    assert _req({"SRO_VISIBLE_DEVICES": value}) == devices


def test_unset_means_nothing() -> None:
    assert _req({}) is None
    assert _req({"NVIDIA_VISIBLE_DEVICES": "all"}) is None  # another recipe's variable


def test_annotations_and_cdi_names() -> None:
    assert _req({}, {"sro.dev/simulated-gpu": "1"}) == ("1",)
    assert _req({}, {"cdi.k8s.io/a": "sro.dev/simulated-gpu=0,nvidia.com/gpu=3"}) == ("0",)
    assert _req({"SRO_VISIBLE_DEVICES": "1"}, {"cdi.k8s.io/a": "sro.dev/simulated-gpu=0"}) == ("1", "0")
    assert _req({}, {"cdi.k8s.io/a": "nvidia.com/gpu=3"}) is None


@pytest.mark.parametrize(
    ("env", "ann", "message"),
    [
        ({"SRO_VISIBLE_DEVICES": "nvidia.com/gpu=0"}, {}, "not of kind"),
        ({"SRO_VISIBLE_DEVICES": "sro.dev/simulated-gpu="}, {}, "empty device name"),
        ({}, {"cdi.k8s.io/a": "garbage"}, "is not a CDI name"),
    ],
)
def test_malformed_requests(env: dict[str, str], ann: dict[str, str], message: str) -> None:
    with pytest.raises(ActivationError, match=message):
        request_for(SIM, env, ann)


def test_capabilities() -> None:
    assert capabilities(SIM, {}) == ("utility", "compute")
    assert capabilities(SIM, {"SRO_DRIVER_CAPABILITIES": "compute"}) == ("compute",)
    assert capabilities(SIM, {"SRO_DRIVER_CAPABILITIES": "compute,graphics"}) == (
        "compute",
    )  # unknown ignored
    assert capabilities(SIM, {"SRO_DRIVER_CAPABILITIES": "all"}) == ("compute", "utility")
    assert set(capabilities(NVIDIA_GPU, {"NVIDIA_DRIVER_CAPABILITIES": "all"})) == {
        "compute",
        "utility",
        "video",
        "graphics",
    }


def test_env_map_and_requests_for() -> None:
    assert env_map(["A=1", "B", "A=2", "C=x=y"]) == {"A": "2", "C": "x=y"}
    with pytest.raises(ActivationError, match=r"process\.env"):
        env_map([1])  # type: ignore[list-item]
    reqs = requests_for((SIM, NVIDIA_GPU), ["SRO_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=all"], {})
    assert [(r.recipe.name, r.devices) for r in reqs] == [("simulated-gpu", ("0",)), ("nvidia-gpu", ("all",))]
    assert reqs[0].source == "env SRO_VISIBLE_DEVICES"
