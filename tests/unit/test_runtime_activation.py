"""What a container asks for: env var values, annotations, CDI names, capabilities."""

from __future__ import annotations

from pathlib import Path

import pytest

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.node.runtime.activation import (
    ALLOCATED,
    SANDBOX_NAMESPACE,
    Access,
    ActivationError,
    capabilities,
    decide,
    device_numbers,
    env_map,
    privileged,
    request_for,
    requests_for,
)

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
    env = ["SRO_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=all"]
    reqs = requests_for((SIM, NVIDIA_GPU), env, {}, Access(own=True))
    assert [(r.recipe.name, r.devices) for r in reqs] == [("simulated-gpu", ("0",)), ("nvidia-gpu", ("all",))]
    assert reqs[0].source == "env SRO_VISIBLE_DEVICES"


# -- who is believed (issue 21 §1) -----------------------------------------------------------------

ALL_ENV = {"SRO_VISIBLE_DEVICES": "all"}
FORGED = {"sro.dev/simulated-gpu": "all", "cdi.k8s.io/x": "sro.dev/simulated-gpu=0"}


def _devices(
    env: dict[str, str], access: Access, ann: dict[str, str] | None = None
) -> tuple[str, ...] | None:
    r = decide(SIM, env, ann or {}, access)
    return None if r is None else r.devices


def test_an_unprivileged_container_gets_nothing_it_names_itself() -> None:
    assert _devices(ALL_ENV, Access()) is None
    assert _devices({"SRO_VISIBLE_DEVICES": "0,1"}, Access()) is None
    assert _devices({}, Access(), FORGED) is None
    assert (
        requests_for((SIM, NVIDIA_GPU), ["SRO_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=all"], {}) == ()
    )
    # the management variable is nothing outside a management namespace either
    assert _devices({"SRO_MANAGEMENT_DEVICES": "all"}, Access()) is None


def test_an_unprivileged_container_gets_exactly_its_allocation() -> None:
    access = Access(allocated={"simulated-gpu": ("1",)})
    r = decide(SIM, ALL_ENV, FORGED, access)
    assert r is not None and r.devices == ("1",) and r.source == ALLOCATED
    assert _devices({}, access) == ("1",)  # no env at all: the allocation alone (any strategy)
    # its own void/none only take away
    assert _devices({"SRO_VISIBLE_DEVICES": "void"}, access) is None
    assert _devices({"SRO_VISIBLE_DEVICES": "none"}, access) == ()
    assert _devices({}, access, {"sro.dev/simulated-gpu": "void"}) is None
    # another recipe's allocation is not this one's
    assert decide(NVIDIA_GPU, {"NVIDIA_VISIBLE_DEVICES": "all"}, {}, access) is None


def test_own_request_where_privileged_or_accepted() -> None:
    assert _devices(ALL_ENV, Access(own=True)) == ("all",)
    assert _devices({}, Access(own=True), FORGED) == ("all",)
    # nothing asked of its own: an allocation still counts (acceptEnvvarUnprivileged, unprivileged)
    assert _devices({}, Access(own=True, allocated={"simulated-gpu": ("0",)})) == ("0",)


def test_management_request_only_in_a_management_namespace() -> None:
    env = {"SRO_MANAGEMENT_DEVICES": "all", "SRO_DRIVER_CAPABILITIES": "utility"}
    r = decide(SIM, env, {}, Access(management=True))
    assert r is not None and r.devices == ("all",) and r.capabilities == ("utility",)
    assert _devices({"SRO_MANAGEMENT_DEVICES": "void"}, Access(management=True)) is None
    assert _devices(ALL_ENV, Access(management=True)) is None  # the open variable stays closed there


def test_privileged_and_device_numbers_from_the_spec() -> None:
    caps = ["CAP_CHOWN", "CAP_SYS_ADMIN"]
    assert privileged({"process": {"capabilities": {"bounding": caps}}})
    assert not privileged({"process": {"capabilities": {"bounding": ["CAP_CHOWN"], "effective": caps}}})
    assert not privileged({"process": {"capabilities": "x"}}) and not privileged({})
    spec = {
        "linux": {
            "devices": [
                {"path": "/dev/a", "type": "c", "major": 240, "minor": 1},
                {"path": "/dev/b", "type": "b", "major": 8, "minor": 0},
                {"path": "/dev/c", "type": "c", "major": "240", "minor": 2},
                "junk",
            ]
        }
    }
    assert device_numbers(spec) == {(240, 1)}
    assert device_numbers({"linux": {"devices": None}}) == frozenset()
    assert SANDBOX_NAMESPACE == "io.kubernetes.cri.sandbox-namespace"


def test_hook_options_and_node_settings_carry_the_trust() -> None:
    from sro.node.runtime import activation, hook
    from sro.node.runtime.rootmanifest import InstallError, Manifest, Settings

    assert hook.MANAGEMENT_PREFIX == activation.MANAGEMENT_ENV + "="
    assert hook.DEFAULT_MANAGEMENT_NAMESPACES == activation.DEFAULT_MANAGEMENT_NAMESPACES
    args = hook.parse_args(["prestart"])
    assert not args.accept_envvar_unprivileged and args.management_namespaces == ("sro-system",)
    args = hook.parse_args(
        [
            "prestart",
            "--accept-envvar-unprivileged",
            "true",
            "--management-namespace",
            "a",
            "--management-namespace=b",
        ]
    )
    assert args.accept_envvar_unprivileged and args.management_namespaces == ("a", "b")
    with pytest.raises(hook.HookError, match="unknown option"):
        hook.parse_args(["prestart", "--accept-envvar-unprivileged", "yes"])
    # may_ask: device nodes in the spec and the management variable are reasons to look
    assert hook.may_ask({"process": {"env": ["A=1"]}, "linux": {"devices": [{"type": "c"}]}})
    assert hook.may_ask({"process": {"env": ["SRO_MANAGEMENT_DEVICES=all"]}})
    assert not hook.may_ask({"process": {"env": ["A=1"]}, "linux": {"devices": []}})

    s = Settings(host_dir="/r")
    assert (
        not s.accept_envvar_unprivileged and s.trust_options == []
    )  # the hook's defaults: entries unchanged
    s = Settings(host_dir="/r", accept_envvar_unprivileged=True, management_namespaces="ops,sro-system")
    assert s.trust_options == [
        "--accept-envvar-unprivileged",
        "true",
        "--management-namespace",
        "ops",
        "--management-namespace",
        "sro-system",
    ]
    assert Settings(host_dir="/r", management_namespaces="").trust_options == ["--management-namespace", "-"]
    back = Manifest.from_json(Manifest(s).to_json()).settings
    assert back == s
    assert '"acceptEnvvarUnprivileged": true' in Manifest(s).to_json()
    with pytest.raises(InstallError, match="management-namespace"):
        Settings(host_dir="/r", management_namespaces="Bad_NS")


def test_the_hook_reads_the_allocation_off_linux_devices(tmp_path: Path) -> None:
    """hook.access_for: device numbers in linux.devices -> the recipe's device ids on this node."""
    import os

    from sro.node.runtime import hook

    if os.geteuid() != 0:
        pytest.skip("mknod needs root")  # the root tests run the same through runc
    dev = tmp_path / "dev"
    dev.mkdir()
    for name, minor in (("sro-simgpu0", 0), ("sro-simgpu1", 1), ("sro-simgpuctl", 255)):
        os.mknod(dev / name, 0o666 | 0o020000, os.makedev(242, minor))
    args = hook.parse_args(["prestart", "--recipe", "simulated-gpu", "--dev-root", str(dev)])
    one = {"linux": {"devices": [{"path": "/dev/x", "type": "c", "major": 242, "minor": 1}]}}
    assert hook.access_for(args, one) == Access(allocated={"simulated-gpu": ("1",)})
    ctl_only = {"linux": {"devices": [{"path": "/dev/x", "type": "c", "major": 242, "minor": 255}]}}
    assert hook.access_for(args, ctl_only) == Access()
    priv = {**one, "process": {"capabilities": {"bounding": ["CAP_SYS_ADMIN"]}}}
    assert hook.access_for(args, priv) == Access(own=True)  # its list holds every host device
    ns = {"annotations": {SANDBOX_NAMESPACE: "sro-system"}}
    assert hook.access_for(args, ns) == Access(management=True)
    assert hook.access_for(args, {"annotations": {SANDBOX_NAMESPACE: "default"}}) == Access()
