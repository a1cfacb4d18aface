"""Least privilege in what sro installs and renders (issue 21 §4): namespaces, host mounts, operands.

Pod Security Admission does not exist in the local cluster's Kubernetes 1.20, so its effect cannot be
tried here: these tests check the labels on the rendered manifests, which is what a 1.23+ API server
reads.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import yaml

from sro.install.objects import objects
from sro.manifests import render

PSA = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/audit": "privileged",
    "pod-security.kubernetes.io/warn": "privileged",
}
# Secrets of a node no report or discovery pod may see: the kubelet's kubeconfig and client certs.
NODE_SECRETS = ("/etc/kubernetes/kubelet.conf", "/etc/kubernetes/pki", "/var/lib/kubelet/pki", "/etc/shadow")


def _namespaces() -> list[dict[str, Any]]:
    found = [o for o in objects() if o["kind"] == "Namespace"]
    found += [
        o
        for o in render("node-report", namespace="n", image="i", pull_policy="Never")
        if o["kind"] == "Namespace"
    ]
    return found


def test_every_namespace_sro_creates_allows_privileged_pods_under_pod_security_admission() -> None:
    namespaces = _namespaces()
    assert len(namespaces) >= 2
    for ns in namespaces:
        labels = ns["metadata"].get("labels") or {}
        assert {k: labels.get(k) for k in PSA} == PSA, ns["metadata"]["name"]


def _host_paths(obj: dict[str, Any]) -> dict[str, str]:
    return {
        v["name"]: v["hostPath"]["path"]
        for v in obj["spec"]["template"]["spec"].get("volumes", [])
        if "hostPath" in v
    }


def test_node_report_mounts_only_the_files_discovery_reads_not_the_hosts_etc() -> None:
    (ds,) = [
        o
        for o in render("node-report", namespace="n", image="i", pull_policy="Never")
        if o["kind"] == "DaemonSet"
    ]
    paths = _host_paths(ds)
    for path in paths.values():
        for secret in NODE_SECRETS:
            assert not PurePosixPath(secret).is_relative_to(path), f"{path} exposes {secret}"
    (discovery,) = [
        o for o in objects() if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "sro-discovery"
    ]
    # what the report reads is what discovery reads (the simulated driver's files aside: the report
    # runs before any driver)
    assert set(paths.values()) <= set(_host_paths(discovery).values()) | {"/lib/modules"}
    mounts = ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert all(m.get("readOnly") for m in mounts)


def _rules(objs: list[dict[str, Any]], account: str) -> set[tuple[str, str]]:
    """Every (verb, resource) the ClusterRoles and Roles bound to `account` grant."""
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in objs
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s.get("name") == account for s in b.get("subjects", []))
    }
    return {
        (verb, resource)
        for r in objs
        if (r["kind"], r["metadata"]["name"]) in bound
        for rule in r["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_discovery_may_not_write_nodes_unless_asked_to_label_them() -> None:
    """Its token is on every node (the DaemonSet tolerates everything): by default it writes its own
    NodeFeature only, and the operator applies the labels."""
    default = objects()
    assert _rules(default, "sro-discovery") == {
        ("get", "nodes"),  # its own Node's uid, for the NodeFeature's owner reference
        ("get", "nodefeatures"),
        ("create", "nodefeatures"),
        ("update", "nodefeatures"),
    }
    (config,) = [
        o for o in default if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "sro-discovery-config"
    ]
    core = yaml.safe_load(config["data"]["nfd-worker.conf"])["core"]
    assert core["enableNodeFeatureApi"] is True and core["noNodeLabels"] is True
    wide = objects(discovery_labels_nodes=True)
    assert _rules(wide, "sro-discovery") == _rules(default, "sro-discovery") | {("patch", "nodes")}
    (config,) = [
        o for o in wide if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "sro-discovery-config"
    ]
    assert yaml.safe_load(config["data"]["nfd-worker.conf"])["core"]["noNodeLabels"] is False
