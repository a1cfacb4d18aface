"""What `sro install` applies: the order, every account the operands use, least-privilege RBAC,
the operator Deployment, and `deploy/` kept equal to a fresh generation."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sro.api.crd import crd
from sro.api.names import IMAGE, MANAGED_BY_LABEL, NAMESPACE
from sro.api.recipes import BUILTIN
from sro.install.commands import install
from sro.install.deploy import DEPLOY_COMMAND, deploy_tree
from sro.install.objects import (
    INSTALL_KINDS,
    KIND_ORDER,
    InstallError,
    Key,
    _render_file,
    component_objects,
    key,
    objects,
)
from sro.manifests import components, templates

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
OPERAND_ACCOUNTS = ("sro-discovery", "sro-device-plugin", "sro-driver", "sro-runtime", "sro-validation")


def _by_key(objs: Iterable[Mapping[str, Any]]) -> dict[Key, Mapping[str, Any]]:
    return {key(o): o for o in objs}


def allows(rules: Iterable[Mapping[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and verb in r.get("verbs", [])
        and not r.get("resourceNames")
        for r in rules
    )


def test_order_namespace_crd_accounts_rbac_then_workloads_operator_last() -> None:
    objs = objects()
    kinds = [o["kind"] for o in objs]
    assert kinds[0] == "Namespace" and kinds[1] == "CustomResourceDefinition" and kinds[-1] == "Deployment"
    assert [KIND_ORDER.index(k) for k in kinds] == sorted(KIND_ORDER.index(k) for k in kinds)
    assert objs[1] == crd()  # the schema is sro.api's, never a copy
    assert key(objs[-1]) == Key("Deployment", "sro-operator", NAMESPACE)
    assert len(_by_key(objs)) == len(objs)  # one Namespace, though several components carry it
    assert all(o["metadata"]["labels"][MANAGED_BY_LABEL] == "sro" for o in objs)


def test_every_operand_account_is_installed() -> None:
    accounts = {o["metadata"]["name"] for o in objects() if o["kind"] == "ServiceAccount"}
    assert {"sro-operator", *OPERAND_ACCOUNTS} <= accounts


def test_every_account_a_template_runs_as_is_installed() -> None:
    accounts = {o["metadata"]["name"] for o in objects() if o["kind"] == "ServiceAccount"}
    named = {
        (component, name, m)
        for component in components()
        for name, text in templates(component).items()
        for m in re.findall(r"serviceAccountName:\s*(\S+)", text)
    }
    assert named, "no template names a service account?"
    for component, name, account in named:
        assert "{" not in account, f"{component}/{name}: the account name must not be a template value"
        assert account in accounts, f"{component}/{name} runs as {account}, which sro install does not create"


def test_accounts_and_roles_do_not_depend_on_the_recipe() -> None:
    """One account serves every recipe: rendering with a recipe set gives the same install objects."""
    base = {"namespace": NAMESPACE, "image": IMAGE, "pull_policy": "Never"}
    for component in components():
        plain = component_objects(component, base, INSTALL_KINDS)
        for recipe in BUILTIN:
            assert component_objects(component, {**base, "recipe": recipe}, INSTALL_KINDS) == plain, component


def test_operator_rbac_is_bound_and_never_creates_or_deletes_nodes() -> None:
    """Which verbs the roles hold is tests/unit/test_operator_rbac.py (recorded from the code)."""
    objs = _by_key(objects())
    cluster = objs[Key("ClusterRole", "sro-operator")]["rules"]
    # nodes are not ours to create or delete
    assert not allows(cluster, "", "nodes", "delete") and not allows(cluster, "", "nodes", "create")
    # bound to the operator's account, in the install namespace
    for kind, ref in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = objs[Key(kind, "sro-operator", "" if kind.startswith("Cluster") else NAMESPACE)]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": ref,
            "name": "sro-operator",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "sro-operator", "namespace": NAMESPACE}
        ]


def test_no_role_grants_secrets_wildcards_or_rbac() -> None:
    for obj in objects():
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in obj["rules"]:
            where = f"{key(obj)}: {rule}"
            assert "secrets" not in rule["resources"], where
            assert (
                "*" not in rule["resources"] and "*" not in rule["verbs"] and "*" not in rule["apiGroups"]
            ), where
            assert "rbac.authorization.k8s.io" not in rule["apiGroups"], where  # no RBAC at run time
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), where


def test_operand_accounts_have_no_token_unless_they_use_the_api() -> None:
    objs = objects()
    bound = {s["name"] for o in objs if o["kind"].endswith("Binding") for s in o["subjects"]}
    for o in objs:
        if o["kind"] == "ServiceAccount" and o["metadata"]["name"] not in bound:
            assert o.get("automountServiceAccountToken") is False, key(o)


def _deployment(objs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    objs = objects() if objs is None else objs
    return next(o for o in objs if o["kind"] == "Deployment")


def test_operator_deployment() -> None:
    d = _deployment()
    assert d["spec"]["replicas"] == 2
    pod = d["spec"]["template"]["spec"]
    assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
    assert pod["serviceAccountName"] == "sro-operator"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65534
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in pod["tolerations"]
    # every NoSchedule taint (the startup and partitioning taints the operator itself sets)
    assert {"operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    (c,) = pod["containers"]
    assert c["image"] == IMAGE and c["imagePullPolicy"] == "Never"
    assert c["command"] == ["sro", "-v", "operator", "--namespace", "$(POD_NAMESPACE)", "--image", IMAGE]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["resources"] == {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}


def test_metrics_service_selects_the_operator() -> None:
    objs = objects()
    svc = next(o for o in objs if o["kind"] == "Service")
    labels = _deployment(objs)["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_discovery_is_installed_whole() -> None:
    keys = set(_by_key(objects()))
    for k in (
        Key("DaemonSet", "sro-discovery", NAMESPACE),
        Key("ConfigMap", "sro-discovery-config", NAMESPACE),
        Key("ClusterRole", "sro-discovery"),
        Key("ClusterRoleBinding", "sro-discovery"),
    ):
        assert k in keys
    # the operands' own workloads are the operator's to render, per SpecialResource
    assert not [k for k in keys if k.kind == "DaemonSet" and k.name != "sro-discovery"]


def test_no_operator_leaves_out_only_the_deployment() -> None:
    full, lean = objects(), objects(operator=False)
    assert [key(o) for o in full if o["kind"] != "Deployment"] == [key(o) for o in lean]


def test_namespace_image_and_pull_policy() -> None:
    objs = objects(namespace="gpu-ops", image="registry.example/sro:1.2")
    for o in objs:
        if o["kind"] not in ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            assert o["metadata"]["namespace"] == "gpu-ops", key(o)
        for s in o.get("subjects", []):
            assert s["namespace"] == "gpu-ops"
        pod = o.get("spec", {}).get("template", {}).get("spec")
        for c in pod["containers"] if pod else []:
            assert c["image"] == "registry.example/sro:1.2" and c["imagePullPolicy"] == "IfNotPresent"
    assert objs[0]["metadata"]["name"] == "gpu-ops"
    assert (
        _deployment(objects(pull_policy="Always"))["spec"]["template"]["spec"]["containers"][0][
            "imagePullPolicy"
        ]
        == "Always"
    )


def test_an_install_template_that_needs_more_values_is_refused() -> None:
    text = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sro-x-{{ recipe }}\n"
    with pytest.raises(InstallError, match=r"x/0200_sa.yaml: 'recipe' is undefined.*install values only"):
        _render_file("x", "0200_sa.yaml", text, {"namespace": "n"})
    # an operand's pod that needs per-node values is the operator's, not ours
    assert _render_file("x", "0500_pod.yaml", "kind: Pod\nmetadata: {name: '{{ node }}'}\n", {}) == []


def test_deploy_directory_is_up_to_date() -> None:
    tree = deploy_tree()
    committed = {p.name: p.read_text() for p in DEPLOY.glob("*.yaml")}
    hint = f"deploy/ is stale: run `.venv/bin/{DEPLOY_COMMAND}` and commit the result"
    assert sorted(committed) == sorted(tree), hint
    for name, text in tree.items():
        assert committed[name] == text, f"{hint} ({name} differs)"


def test_deploy_tree_is_a_plain_kustomization_of_the_install() -> None:
    tree = deploy_tree()
    kust = yaml.safe_load(tree["kustomization.yaml"])
    assert set(kust) == {"apiVersion", "kind", "resources"}  # kustomize v2.0.3: no components or patches
    docs = [yaml.safe_load(tree[name]) for name in kust["resources"]]
    assert [key(d) for d in docs] == [key(o) for o in objects()]
    assert all(d["kind"] != "Deployment" or "IfNotPresent" in str(d) for d in docs)


def test_cli_dry_run_and_output(tmp_path: Path) -> None:
    r = CliRunner().invoke(install, ["--dry-run", "--namespace", "gpu-ops"])
    assert r.exit_code == 0, r.output
    assert [d for d in yaml.safe_load_all(r.output) if d] == objects(namespace="gpu-ops")
    (tmp_path / "99-stale.yaml").write_text("old")
    r = CliRunner().invoke(install, ["--output", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "removed 99-stale.yaml" in r.output
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == deploy_tree()
    r = CliRunner().invoke(install, ["--output", str(tmp_path), "--no-operator"])
    assert r.exit_code != 0 and "--no-operator" in r.output
