"""CDI through the container runtime (issue 23): the runtime state's live specs, the plugin's CDI
names and annotation, the per-node strategy, and the runtime pod's repair note in the status row.

The specs are written into a fake host (device nodes are links to /dev/null: character devices
without root), the plugin's answers come from its pure allocation, the operator's rule from Node
objects recorded on the local cluster (containerd 1.6 and 1.7) and on other runtimes.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.api.names import REPORT_CONTAINER
from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices import simconfig
from sro.devices.driverstate import inventory_to_doc
from sro.devices.model import Inventory
from sro.node.deviceplugin.allocation import annotation_key, cdi_device_name, container_allocation, validate
from sro.node.deviceplugin.announcing import plan
from sro.node.deviceplugin.config import (
    CDI_STRATEGIES,
    HOOK_STRATEGIES,
    RUNTIMES_FILE,
    ConfigError,
    parse_config,
    parse_runtimes,
)
from sro.node.deviceplugin.lifecycle import load_config
from sro.node.runtime import cdidevices, cdikeeper, hostinstall
from sro.node.runtime.rootmanifest import Manifest, Settings
from sro.operator.cdiruntime import cdi_nodes, reads_cdi
from sro.operator.observed import node_from_json, pod_from_json

SIM = "simulated-gpu"
SPEC = "sro.dev-simulated-gpu.yaml"
DRIVER = "var/lib/sro/driver/simulated-gpu"
CAPS = "/dev/sro-simgpu-caps"


def _inventory(mig: bool = True) -> Inventory:
    doc: dict[str, Any] = {"count": 2}
    if mig:
        doc["devices"] = [{}, {"memoryMiB": 40960, "mig": [{"profile": "1g.10gb"}, {"profile": "1g.10gb"}]}]
    inv = simconfig.parse(doc)
    devices = []
    for d in inv.devices:
        migs = tuple(replace(m, device_node=f"{CAPS}/cap{10 + m.index}") for m in d.mig_devices)
        devices.append(replace(d, device_node=f"/dev/sro-simgpu{d.index}", mig_devices=migs))
    return replace(inv, devices=tuple(devices))


def _host(tmp_path: Path, inv: Inventory | None = None) -> Path:
    """A host's /: python3, runc, the simulated driver's files, device list and nodes."""
    host = tmp_path / "host"
    for d in ("usr/bin", "usr/sbin", f"{DRIVER}/lib", f"{DRIVER}/bin", "dev/sro-simgpu-caps"):
        (host / d).mkdir(parents=True)
    (host / "usr/bin/python3").write_text("#!/bin/false\n")
    (host / "usr/bin/python3").chmod(0o755)
    (host / "usr/sbin/runc").write_text("")
    (host / DRIVER / "lib/libsimgpu.so.1").write_bytes(b"\x7fELF")
    (host / DRIVER / "bin/simgpu-smi").write_text("#!/bin/sh\n")
    for name in (
        "sro-simgpu0",
        "sro-simgpu1",
        "sro-simgpuctl",
        "sro-simgpu-caps/cap10",
        "sro-simgpu-caps/cap11",
    ):
        (host / "dev" / name).symlink_to("/dev/null")
    _write_devices(host, inv or _inventory())
    return host


def _write_devices(host: Path, inv: Inventory) -> None:
    (host / DRIVER / "devices.json").write_text(json.dumps(inventory_to_doc(inv, 120, 255)))


def _install(tmp_path: Path, host: Path, owner: str = "default", **kw: Any) -> Manifest:
    root = tmp_path / "runtime"
    settings = Settings(host_dir=str(root), cdi_dir=str(tmp_path / "cdi"), **kw)
    return hostinstall.install(str(root), {SIM: None}, settings, host_root=str(host), owner=owner)


def _live(tmp_path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((tmp_path / "cdi" / SPEC).read_text())
    return doc


def _names(spec: dict[str, Any]) -> list[str]:
    return [d["name"] for d in spec["devices"]]


# --- the runtime state's live specs ---------------------------------------------------------------


def test_live_spec_names_node_numbers_uuids_and_mig_devices_and_runs_no_hook(tmp_path: Path) -> None:
    inv = _inventory()
    m = _install(tmp_path, _host(tmp_path, inv))
    spec = _live(tmp_path)
    gpu0, gpu1 = inv.devices
    mig0, mig1 = gpu1.mig_devices
    assert spec["kind"] == "sro.dev/simulated-gpu" and spec["annotations"] == {"sro.dev/simulated": "true"}
    assert _names(spec) == ["0", "1", gpu0.uuid, gpu1.uuid, mig0.uuid, mig1.uuid, "all"]
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert [n["path"] for n in by_name[gpu1.uuid]] == ["/dev/sro-simgpu1"]
    # a MIG device: its parent's node and its own capability node, never another GPU's
    assert [n["path"] for n in by_name[mig1.uuid]] == ["/dev/sro-simgpu1", f"{CAPS}/cap11"]
    assert [n["path"] for n in by_name["all"]] == ["/dev/sro-simgpu0", "/dev/sro-simgpu1"]
    # no sro code on a container start: the live spec has no hook (the root copy keeps its ldcache one)
    assert "hooks" not in spec["containerEdits"]
    root_copy = json.loads((tmp_path / "runtime/cdi/sro.dev-simulated-gpu.json").read_text())
    assert root_copy["containerEdits"]["hooks"][0]["hookName"] == "createContainer"
    # the plugin's variable reaches the container (the root copy keeps the hook's `void`)
    assert "env" not in spec["containerEdits"]
    assert root_copy["containerEdits"]["env"] == ["SRO_VISIBLE_DEVICES=void"]
    assert str(tmp_path) not in (tmp_path / "cdi" / SPEC).read_text()  # host paths only
    assert str(tmp_path / "cdi" / SPEC) in m.external and m.repaired == ()


def test_the_ldcache_hook_is_an_option(tmp_path: Path) -> None:
    _install(tmp_path, _host(tmp_path), cdi_ldcache=True)
    hooks = _live(tmp_path)["containerEdits"]["hooks"]
    assert [h["hookName"] for h in hooks] == ["createContainer"] and "update-ldcache" in hooks[0]["args"]


def test_a_librarys_soname_link_is_mounted_as_the_same_file(tmp_path: Path) -> None:
    """No ldconfig runs in a CDI container: libnvidia-ml.so.1 must be there by itself."""
    host = tmp_path / "host"
    libdir = host / "run/nvidia/driver/usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    (libdir / "libnvidia-ml.so.550.90.07").write_bytes(b"\x7fELF")
    (libdir / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.550.90.07")
    (libdir / "libother.so.1").symlink_to("/elsewhere/libother.so.1")
    (host / "dev").mkdir()
    for name in ("nvidia0", "nvidiactl"):
        (host / "dev" / name).symlink_to("/dev/null")
    root = tmp_path / "runtime"
    settings = Settings(host_dir=str(root), cdi_dir=str(tmp_path / "cdi"))
    made, live, _ = hostinstall.cdi_files(settings, NVIDIA_GPU.name, "/run/nvidia/driver", str(host))
    spec = yaml.safe_load(live[str(tmp_path / "cdi/nvidia.com-gpu.yaml")].data)
    real = "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.90.07"
    mounts = {m["containerPath"]: m["hostPath"] for m in spec["containerEdits"]["mounts"]}
    assert mounts["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.90.07"] == real
    assert mounts["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] == real
    assert "/usr/lib/x86_64-linux-gnu/libother.so.1" not in mounts
    (copy,) = made.values()  # the root copy relies on its ldcache hook, as before
    assert "libnvidia-ml.so.1" not in copy.data.decode()


def test_a_real_driver_without_a_device_list_gets_uuids_from_proc(tmp_path: Path) -> None:
    host = tmp_path / "host"
    info = host / cdidevices.PROC_GPUS / "0000:3b:00.0" / "information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA A100\nGPU UUID: \t GPU-1234\nDevice Minor: \t 1\nBus Type: \t PCIe\n")
    assert cdidevices.read_proc_uuids(str(host)) == {"GPU-1234": 1}
    assert cdidevices.parse_proc_information("GPU UUID: nope\nDevice Minor: x\n") is None


def test_keeper_repairs_a_hand_edited_or_removed_spec_and_reports_it(tmp_path: Path) -> None:
    host = _host(tmp_path)
    _install(tmp_path, host)
    good = (tmp_path / "cdi" / SPEC).read_bytes()
    report = tmp_path / "report"
    keeper = cdikeeper.Keeper(str(tmp_path / "runtime"), str(host), lambda _: None, str(report))
    keeper.start()
    assert keeper.tick() == [] and not report.exists()  # nothing changed: a stat() round, no pass
    (tmp_path / "cdi" / SPEC).write_text("cdiVersion: 0.6.0\nkind: sro.dev/simulated-gpu\ndevices: [\n")
    repairs = keeper.tick()
    assert repairs == [f"{tmp_path / 'cdi' / SPEC}: changed since sro wrote it"]
    assert (tmp_path / "cdi" / SPEC).read_bytes() == good
    (tmp_path / "cdi" / SPEC).unlink()
    assert keeper.tick() == [f"{tmp_path / 'cdi' / SPEC}: removed"]
    lines = report.read_text().splitlines()
    assert len(lines) == 2 and lines[-1].endswith(f"repaired CDI spec {tmp_path / 'cdi' / SPEC}: removed")
    # a pod restart of the runtime state finds a broken spec at install: repaired and said too
    (tmp_path / "cdi" / SPEC).write_text("{}")
    assert _install(tmp_path, host).repaired == (f"{tmp_path / 'cdi' / SPEC}: changed since sro wrote it",)


def test_keeper_follows_the_nodes_devices_without_calling_it_a_repair(tmp_path: Path) -> None:
    host = _host(tmp_path)
    _install(tmp_path, host)
    keeper = cdikeeper.Keeper(str(tmp_path / "runtime"), str(host), lambda _: None, str(tmp_path / "report"))
    keeper.start()
    inv = _inventory(mig=False)  # the MIG layout goes away
    _write_devices(host, inv)
    assert keeper.tick() == []
    assert _names(_live(tmp_path)) == ["0", "1", *[d.uuid for d in inv.devices], "all"]
    os.unlink(host / "dev/sro-simgpu1")  # a device disappears
    _write_devices(host, replace(inv, devices=inv.devices[:1]))
    assert keeper.tick() == []
    assert _names(_live(tmp_path)) == ["0", inv.devices[0].uuid, "all"]
    assert not (tmp_path / "report").exists()
    os.unlink(host / "dev/sro-simgpu0")  # the last one: no spec can name nothing
    assert keeper.run_pass() == []
    assert not (tmp_path / "cdi" / SPEC).exists()


def test_the_live_spec_goes_with_the_last_owner(tmp_path: Path) -> None:
    host = _host(tmp_path)
    _install(tmp_path, host, owner="sr-a")
    _install(tmp_path, host, owner="sr-b")
    hostinstall.uninstall(str(tmp_path / "runtime"), owner="sr-a")
    assert (tmp_path / "cdi" / SPEC).exists()  # sr-b still uses it
    hostinstall.uninstall(str(tmp_path / "runtime"), owner="sr-b")
    assert os.listdir(tmp_path / "cdi") == []
    assert hostinstall.refresh(str(tmp_path / "runtime"), str(host)) is None  # a keeper left behind


def test_report_keeps_the_newest_lines_within_a_termination_message() -> None:
    from datetime import UTC, datetime

    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    text = ""
    for i in range(200):
        text = cdikeeper.report_text(text, [f"/var/run/cdi/x.yaml: removed ({i})"], now)
    assert len(text.encode()) <= cdikeeper.REPORT_LIMIT
    assert (
        text.splitlines()[-1] == "2025-01-02T03:04:05Z repaired CDI spec /var/run/cdi/x.yaml: removed (199)"
    )


# --- the device plugin's CDI names and annotation --------------------------------------------------


def _alloc(inv: Inventory, ids: list[str], doc: object, recipe=SIMULATED_GPU):  # type: ignore[no-untyped-def]
    cfg = parse_config(doc, recipe)
    plans = {p.resource: p for p in plan(inv, cfg)}
    p = next(x for x in plans.values() if set(ids) <= set(x.by_id()))
    return container_allocation(validate(ids, p, lambda u: True, cfg), p, recipe, cfg)


def test_cdi_annotation_names_what_the_live_spec_names(tmp_path: Path) -> None:
    inv = _inventory()
    _install(tmp_path, _host(tmp_path, inv))
    spec_names = set(_names(_live(tmp_path)))
    gpu0, gpu1 = inv.devices
    a = _alloc(inv, [gpu1.uuid, gpu0.uuid], {"flags": {"deviceListStrategy": "cdi-annotations"}})
    ((key, value),) = a.annotations.items()
    assert key == "cdi.k8s.io/sro-device-plugin_sro.dev_simulated-gpu"
    assert value == "sro.dev/simulated-gpu=1,sro.dev/simulated-gpu=0"
    assert {v.split("=", 1)[1] for v in value.split(",")} <= spec_names
    # the pod still gets only its allocated nodes from the kubelet
    assert [d.host_path for d in a.devices] == ["/dev/sro-simgpu1", "/dev/sro-simgpu0", "/dev/sro-simgpuctl"]
    assert a.envs == {}  # as listed: cdi-annotations alone (the per-node default adds envvar)
    mig = gpu1.mig_devices[1]
    a = _alloc(inv, [mig.uuid], {"flags": {"migStrategy": "mixed", "deviceListStrategy": "cdi-annotations"}})
    ((key, value),) = a.annotations.items()
    assert value == f"sro.dev/simulated-gpu={mig.uuid}" and mig.uuid in spec_names
    assert key == "cdi.k8s.io/sro-device-plugin_sro.dev_simulated-gpu-mig-1g.10gb"


@pytest.mark.parametrize(
    "resource",
    [
        "sro.dev/simulated-gpu",
        "nvidia.com/mig-1g.10gb",
        "a-very-long-vendor.example.com/accelerator-with-a-long-name",
    ],
)
def test_annotation_keys_follow_cdis_rules(resource: str) -> None:
    key = annotation_key("cdi.k8s.io/", resource)
    name = key.removeprefix("cdi.k8s.io/")
    # CDI's AnnotationKey: at most 63, alphanumeric at both ends, then [A-Za-z0-9_.-]
    assert len(name) <= 63 and name[0].isalnum() and name[-1].isalnum()
    assert all(c.isalnum() or c in "_.-" for c in name) and name.startswith("sro-device-plugin_")
    assert key != annotation_key("cdi.k8s.io/", resource + "x")  # one key per resource


def test_a_gpu_is_named_by_its_node_number_even_where_index_and_minor_differ() -> None:
    inv = simconfig.parse({"count": 1})
    d = replace(inv.devices[0], index=0, minor=3, device_node="/dev/nvidia3")
    (unit,) = plan(replace(inv, devices=(d,)), parse_config(None, NVIDIA_GPU))[0].devices
    assert cdi_device_name(unit.unit, NVIDIA_GPU) == "3"


def test_default_strategy_follows_the_nodes_runtime_and_the_config_wins(tmp_path: Path) -> None:
    assert parse_config(None, SIMULATED_GPU).list_strategies == HOOK_STRATEGIES
    assert parse_config(None, SIMULATED_GPU, cdi_runtime=True).list_strategies == CDI_STRATEGIES
    assert set(CDI_STRATEGIES) == {"cdi-annotations", "envvar", "device-specs"}
    explicit = {"flags": {"deviceListStrategy": ["envvar"]}}
    assert parse_config(explicit, SIMULATED_GPU, cdi_runtime=True).list_strategies == HOOK_STRATEGIES
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    (tmp_path / RUNTIMES_FILE).write_text("cdi: [vm, other]\n")
    assert load_config(config, SIMULATED_GPU, node_name="vm").list_strategies == CDI_STRATEGIES
    assert load_config(config, SIMULATED_GPU, node_name="old-node").list_strategies == HOOK_STRATEGIES
    assert load_config(config, SIMULATED_GPU).list_strategies == HOOK_STRATEGIES  # no node name: the hook's
    with pytest.raises(ConfigError, match="cdi: expected a list"):
        parse_runtimes({"cdi": "vm"})
    with pytest.raises(ConfigError, match="unknown field"):
        parse_runtimes({"cdi": [], "crio": []})


# --- the operator's rule over recorded nodes ----------------------------------------------------------

# status.nodeInfo as recorded: the local cluster before and after issue 23's switch, and other runtimes
NODE_INFO = {
    "containerd://1.6.20": False,  # Debian 12's (kubelet 1.20 on this machine)
    "containerd://1.7.24": True,  # Debian 13's, same kubelet
    "containerd://1.7.0-rc.1": True,
    "containerd://2.0.2": True,
    "containerd://1.5.9": False,
    "cri-o://1.22.5": False,
    "cri-o://1.23.0": True,
    "cri-o://1.28.1-1.rhaos4.15.git6d2a2b2.el9": True,
    "docker://20.10.7": False,
    "": False,
}


def _node(name: str, runtime: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"containerRuntimeVersion": runtime, "kubeletVersion": "v1.20.2"},
        },
    }


@pytest.mark.parametrize(("runtime", "expected"), NODE_INFO.items())
def test_which_runtimes_read_cdi(runtime: str, expected: bool) -> None:
    assert reads_cdi(runtime) is expected
    assert node_from_json(_node("n", runtime)).runtime == runtime


def test_a_mixed_cluster_lists_its_cdi_nodes_sorted() -> None:
    nodes = [
        node_from_json(_node(n, r)) for n, r in (("b", "containerd://1.7.24"), ("a", "containerd://1.6.20"))
    ]
    nodes.append(node_from_json(_node("c", "cri-o://1.28.1")))
    assert cdi_nodes(nodes) == ["b", "c"]


def test_the_device_plugin_configmap_lists_them() -> None:
    from sro.manifests import render

    docs = render("device-plugin", image="i", namespace="n", pull_policy="Never", cdi_nodes=["b", "c"])
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    assert parse_runtimes(yaml.safe_load(cm["data"][RUNTIMES_FILE])) == {"b", "c"}
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    env = ds["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in env


# --- the runtime pod's report in the status row -------------------------------------------------------

RUNTIME_POD: dict[str, Any] = {
    "metadata": {
        "name": "sro-runtime-x",
        "uid": "u1",
        "labels": {"sro.dev/state": "runtime", "sro.dev/specialresource": "simulated-gpu"},
    },
    "spec": {"nodeName": "vm"},
    "status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [
            {"name": "runtime", "ready": True, "restartCount": 0, "state": {"running": {}}},
            {
                "name": REPORT_CONTAINER,
                "ready": False,
                "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "message": "2025-01-02T03:04:05Z repaired CDI spec /var/run/cdi/x.yaml: removed\n",
                    }
                },
            },
        ],
    },
}


def test_the_report_container_neither_unreadies_the_pod_nor_counts_as_its_restarts() -> None:
    pod = pod_from_json(RUNTIME_POD)
    assert pod.ready and pod.restarts == 0 and pod.reason == ""
    assert pod.report == "2025-01-02T03:04:05Z repaired CDI spec /var/run/cdi/x.yaml: removed"
    # as recorded on the local cluster: the report container exited and is not started again yet
    exited = copy.deepcopy(RUNTIME_POD)
    exited["status"]["containerStatuses"][1].update(
        restartCount=0,
        lastState={},
        state={"terminated": {"exitCode": 0, "reason": "Completed", "message": "2026-11-25T18:34:05Z "
                              "repaired CDI spec /var/run/cdi/sro.dev-simulated-gpu.yaml: changed since sro wrote it\n"}},
    )  # fmt: skip
    assert pod_from_json(exited).ready and pod_from_json(exited).report.endswith("changed since sro wrote it")
    broken = copy.deepcopy(RUNTIME_POD)
    broken["status"]["containerStatuses"][0].update(ready=False, restartCount=3)
    assert not pod_from_json(broken).ready and pod_from_json(broken).restarts == 3


def test_the_repair_is_the_runtime_states_note_in_the_nodes_row() -> None:
    from datetime import UTC, datetime

    from sro.api.names import RUNTIME
    from sro.api.specparsing import parse_spec
    from sro.operator.rendering import Context
    from sro.operator.states import STATES

    state = next(s for s in STATES if s.name == RUNTIME)
    ctx = Context(SIM, "uid", parse_spec(SIM, {"recipe": SIM}), SIMULATED_GPU, "sro-system", "img")
    node = node_from_json(_node("vm", "containerd://1.7.24"))
    verdict = state.readiness(ctx, node, [pod_from_json(RUNTIME_POD)], datetime.now(UTC))
    assert verdict.ready and verdict.message.endswith("repaired CDI spec /var/run/cdi/x.yaml: removed")


def test_install_wait_keeps_running_through_a_stop_and_continue(tmp_path: Path) -> None:
    """A stopped and continued keeper (SIGSTOP, SIGCONT: a debugger, the e2e test's pause) goes on:
    Python's sigtimedwait then returns a siginfo that names no signal of the set."""
    import signal
    import subprocess
    import sys
    import time

    host = _host(tmp_path)
    ready = tmp_path / "ready"
    argv = [sys.executable, "-m", "sro", "runtime", "install", "--root", str(tmp_path / "rt")]
    argv += ["--host-root", str(host), "--recipe", SIM, "--cdi-dir", str(tmp_path / "cdi")]
    argv += ["--wait", "--poll", "0.1", "--ready-file", str(ready)]
    log = (tmp_path / "log").open("w")
    proc = subprocess.Popen(argv, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "log").read_text()
            time.sleep(0.05)
        for _ in range(2):
            proc.send_signal(signal.SIGSTOP)
            time.sleep(0.3)
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.3)
        assert proc.poll() is None, (tmp_path / "log").read_text()
        (tmp_path / "cdi" / SPEC).unlink()  # still keeping the spec
        deadline = time.monotonic() + 10
        while not (tmp_path / "cdi" / SPEC).exists():
            assert time.monotonic() < deadline, "the keeper stopped keeping"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not (tmp_path / "cdi" / SPEC).exists()  # the last owner went with SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
