"""The discovery manifests (package data) and the config reload the DaemonSet relies on."""

from __future__ import annotations

import os
from pathlib import Path

from sro.api.names import NAMESPACE
from sro.manifests import render
from sro.node.discovery.commands import ConfigLoader


def _objects() -> dict[str, dict[str, object]]:
    docs = render("discovery", namespace=NAMESPACE, image="localhost/sro:test", pull_policy="Never")
    return {str(d["kind"]): d for d in docs}


def test_cluster_role_may_only_get_nodes() -> None:
    role = _objects()["ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]


def test_daemonset_mounts_host_read_only_and_runs_unprivileged() -> None:
    objs = _objects()
    pod = objs["DaemonSet"]["spec"]["template"]["spec"]  # type: ignore[index]
    container = pod["containers"][0]
    assert container["imagePullPolicy"] == "Never"
    assert container["command"][:4] == ["sro", "-v", "discover", "--publish"]
    assert "/host" in container["command"]
    assert all(m["readOnly"] for m in container["volumeMounts"])
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {
        "/host/sys", "/host/proc", "/host/etc/kubernetes/node-feature-discovery/features.d",
    }  # fmt: skip
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container[
        "env"
    ]
    assert pod["serviceAccountName"] == objs["ServiceAccount"]["metadata"]["name"]  # type: ignore[index]


def test_config_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    conf = tmp_path / "nfd-worker.conf"
    conf.write_text("core: {sleepInterval: 10s}\n")
    loader = ConfigLoader(conf)
    assert loader.load().sleep_interval == 10
    conf.write_text("core: {sleepInterval: 20s}\n")
    os.utime(conf, ns=(1, 1))  # a different mtime even within the clock's resolution
    assert loader.load().sleep_interval == 20
    conf.unlink()
    config = loader.load()
    assert config.sleep_interval == 60 and config.problems[0].path == str(conf)


def test_daemonset_sees_the_installed_recipes_and_simulated_drivers() -> None:
    """sro's host tree, read-only: runtime/recipes (removed by the runtime once empty, so its parent
    is mounted) and every simulated driver's root; a mount made there later shows (propagation)."""
    ds = _objects()["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]  # type: ignore[index]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    sro = mounts["/host/var/lib/sro"]
    assert sro["readOnly"] is True and sro["mountPropagation"] == "HostToContainer"
    volume = next(v for v in pod["volumes"] if v["name"] == sro["name"])
    assert volume["hostPath"] == {"path": "/var/lib/sro", "type": "DirectoryOrCreate"}
    assert not [p for p in mounts if p.startswith("/host/var/lib/sro/")]  # nothing nested under it
