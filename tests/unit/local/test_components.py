"""The local cluster's daemons as data: flags the issue requires, consistent ports and paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sro.api.names import RUNTIME_LAUNCHER
from sro.local.components import ADMISSION_PLUGINS, NodeFacts, cni_conflist, components, containerd_config
from sro.local.layout import PAUSE_IMAGE, RUNTIME_HANDLER, Layout

NODE = NodeFacts("node-a", "10.1.2.3")


def _by_name(tmp_path: Path) -> dict[str, object]:
    layout = Layout(state=tmp_path / "state")
    return {c.name: c for c in components(layout, NODE, Path("/bin-dir"))}


def _flag(argv: tuple[str, ...], name: str) -> str:
    values = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    assert len(values) == 1, f"--{name} given {len(values)} times"
    return values[0]


def test_start_order_puts_dependencies_first(tmp_path: Path) -> None:
    names = list(_by_name(tmp_path))
    assert names.index("etcd") < names.index("kube-apiserver")
    assert names.index("containerd") < names.index("kubelet")
    assert names.index("kube-apiserver") < min(
        names.index(n) for n in ("kube-scheduler", "kubelet", "kube-proxy")
    )


def test_apiserver_has_tls_rbac_and_the_admission_plugins(tmp_path: Path) -> None:
    api = _by_name(tmp_path)["kube-apiserver"]
    argv = api.argv  # type: ignore[attr-defined]
    plugins = _flag(argv, "enable-admission-plugins").split(",")
    for required in ("ExtendedResourceToleration", "ResourceQuota", "Priority", "NodeRestriction"):
        assert required in plugins
    assert tuple(plugins) == ADMISSION_PLUGINS
    assert _flag(argv, "insecure-port") == "0"
    assert _flag(argv, "authorization-mode") == "Node,RBAC"
    assert _flag(argv, "advertise-address") == NODE.ip  # in-cluster clients need a non-loopback endpoint
    assert _flag(argv, "tls-cert-file").endswith("apiserver.crt")


def test_ports_are_distinct_and_health_urls_use_them(tmp_path: Path) -> None:
    comps = _by_name(tmp_path).values()
    ports = [p for c in comps for p in c.ports]  # type: ignore[attr-defined]
    assert len(ports) == len(set(ports))
    for c in comps:
        if c.health.url:  # type: ignore[attr-defined]
            port = int(c.health.url.split(":")[2].split("/")[0])  # type: ignore[attr-defined]
            assert port in c.ports, c.name  # type: ignore[attr-defined]


def test_kubelet_config_is_valid_yaml_with_cgroupfs_and_no_anonymous_auth(tmp_path: Path) -> None:
    kubelet = _by_name(tmp_path)["kubelet"]
    cfg_path = next(p for p in kubelet.files if p.name == "kubelet.yaml")  # type: ignore[attr-defined]
    cfg = yaml.safe_load(kubelet.files[cfg_path])  # type: ignore[attr-defined]
    assert cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["authorization"]["mode"] == "Webhook"
    assert cfg["imageGCHighThresholdPercent"] == 100  # locally imported images must never be collected
    assert cfg["nodeStatusUpdateFrequency"] == "1s"  # device health reaches allocatable within ~1 s
    assert cfg["nodeStatusReportFrequency"] == "5m"  # ...posted when it changed, not every second


def test_containerd_config_names_pause_image_and_sro_runtime_handler(tmp_path: Path) -> None:
    text = containerd_config(Layout(state=tmp_path))
    assert f'sandbox_image = "{PAUSE_IMAGE}"' in text
    assert "restrict_oom_score_adj = true" in text
    assert f"containerd.runtimes.{RUNTIME_HANDLER}]" in text
    # the launcher `sro runtime install` writes (the runtime state's, on a real node), not one of ours
    assert (
        f'BinaryName = "{RUNTIME_LAUNCHER}"' in text
        and RUNTIME_LAUNCHER == "/var/lib/sro/runtime/sro-runtime"
    )


def test_cni_conflist_uses_own_bridge_and_pod_cidr() -> None:
    import json

    doc = json.loads(cni_conflist())
    bridge = doc["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["bridge"] == "sro0"
    assert bridge["ipam"]["ranges"][0][0]["subnet"] == "10.244.0.0/24"


def test_apiserver_audits_writes_to_the_layouts_log_with_rotation(tmp_path: Path) -> None:
    from sro.api.names import NAMESPACE, OPERATOR_LEASE
    from sro.local.components import Component

    layout = Layout(state=tmp_path / "state")
    api = _by_name(tmp_path)["kube-apiserver"]
    assert isinstance(api, Component)
    assert _flag(api.argv, "audit-log-path") == str(layout.audit_log)
    assert layout.audit_log.parent == layout.logs
    assert _flag(api.argv, "audit-log-format") == "json"
    assert int(_flag(api.argv, "audit-log-maxsize")) == 50
    assert int(_flag(api.argv, "audit-log-maxbackup")) == 2
    policy = yaml.safe_load(api.files[Path(_flag(api.argv, "audit-policy-file"))])
    assert policy["apiVersion"] == "audit.k8s.io/v1" and policy["omitStages"] == ["RequestReceived"]
    rules = policy["rules"]
    # the operator's Lease with its request (holderIdentity), before anything else matches it
    assert rules[0]["level"] == "Request" and rules[0]["resources"][0]["resourceNames"] == [OPERATOR_LEASE]
    # its create too, which names no object in the URL (resourceNames cannot match it): Leases in sro's namespace
    assert rules[1]["level"] == "Request" and rules[1]["verbs"] == ["create"]
    assert rules[1]["namespaces"] == [NAMESPACE] and rules[1]["resources"][0]["resources"] == ["leases"]
    writes = next(r for r in rules if r["level"] == "Metadata")
    assert sorted(writes["verbs"]) == ["create", "delete", "deletecollection", "patch", "update"]
    assert "resources" not in writes, "every resource and subresource (pods/eviction) is audited"
    assert rules[-1] == {"level": "None"}, "reads and watches are not logged"
    assert all(r["level"] == "None" for r in rules[2:] if r is not writes), "only writes are logged"
    assert {"level": "None", "namespaces": ["kube-node-lease"]} in rules[: rules.index(writes)]


def test_a_changed_audit_policy_changes_the_api_servers_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server reads its policy only at start; `up` restarts it when its argv changes."""
    from sro.local import components as comps

    before = _flag(_by_name(tmp_path)["kube-apiserver"].argv, "audit-policy-file")  # type: ignore[attr-defined]
    monkeypatch.setitem(comps.AUDIT_POLICY, "rules", [{"level": "None"}])
    after = _flag(_by_name(tmp_path)["kube-apiserver"].argv, "audit-policy-file")  # type: ignore[attr-defined]
    assert before != after and Path(after).parent == Path(before).parent
