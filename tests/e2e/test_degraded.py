"""Every refusal the operator can give reaches the real API server as `Degraded=True`.

Why on the real server: a status the operator decides is worth nothing until the API server takes
it. Kubernetes 1.20 built with Go >= 1.16 refused "" where the status schema says string
(kubernetes#99804), so a refused SpecialResource (whose status carried `resource: ""`) got no
status at all, and the operator retried the write, and logged the refusal, every 3 s. Here each
reason the operator gives — unknown recipe, bad custom template (an undefined name, a sandbox
escape, a 50 MB string), missing custom manifests, image template (an unknown name, a format spec),
name too long, an older SpecialResource holding the node, several resource names under a taint,
bad upgrade policy, quota on an unannounced resource — is applied through kubectl and must
show `Degraded=True` with that reason and the field (or holder) named, `Ready` not `True`, within
seconds, deploy no DaemonSet, and be logged once by the operator, not once per pass: the test
wakes further passes (a spec change that leaves the refusal as it is) and counts them in the
leader's metrics. A Ready SpecialResource patched into a bad spec turns Degraded the same way, and
so does one whose node patches the API server refuses (RBAC here; an admission webhook alike).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from sro.api.names import STATE_NAMES, validated_label
from sro.api.recipes import SIMULATED_GPU
from sro.api.specialresource import STATE_FIELDS
from sro.local.cluster import LocalCluster
from tests.e2e.helpers import condition, get_json, sr_doc, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NS = "sro-system"
OPERATOR = "app.kubernetes.io/name=sro-operator"
DEGRADED_WITHIN = 20.0  # seconds from `kubectl apply` to Degraded=True
RENAMING = (  # time-slicing that announces a second name (sro.dev/simulated-gpu.shared)
    "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
    f"    resources:\n    - name: {SIMULATED_GPU.resource}\n      replicas: 4\n"
)
NOTHING_DEPLOYED = {f: {"enabled": False} for f in STATE_FIELDS.values()}  # Ready once selected
BROKEN_RECIPE = (
    "name: sro-e2e-broken\nresource: example.com/broken\nbackend: simulated\npciVendor: '1d0f'\n"
    "visibleDevicesEnv: BROKEN_VISIBLE_DEVICES\ndeviceNode: /dev/broken{index}\n"
)


@dataclass(frozen=True)
class Case:
    name: str  # of the SpecialResource
    spec: dict[str, Any]
    reason: str
    named: tuple[str, ...]  # what the Degraded message must name: the field, the file, the holder
    config_maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def _on_this_node(node: str) -> dict[str, Any]:
    return {
        "recipe": SIMULATED_GPU.name,
        "nodeSelector": {"kubernetes.io/hostname": node},
        **NOTHING_DEPLOYED,
    }


def _custom(name: str, metadata: str, named: str) -> Case:
    """A custom recipe whose device-plugin state has one extra custom manifest: a ConfigMap with
    `metadata` (between braces) that cannot be rendered."""
    return Case(
        name,
        {
            "recipe": "sro-e2e-broken",
            "recipeConfigMap": "sro-e2e-broken",
            "customManifests": f"{name}-manifests",
            # a custom simulated recipe needs its devices (SpecInvalid without): the template fails
            "driver": {"devicesConfig": "count: 1\n"},
        },
        "RenderFailed",
        ("device-plugin/0600_extra.yaml (custom)", named),
        {
            "sro-e2e-broken": {"recipe.yaml": BROKEN_RECIPE},
            f"{name}-manifests": {
                "device-plugin.0600_extra.yaml": f"kind: ConfigMap\nmetadata: {{{metadata}}}\n"
            },
        },
    )


CASES = [
    Case("sro-e2e-unknown-recipe", {"recipe": "no-such-recipe"}, "SpecInvalid", ("spec.recipe:", "no-such-recipe")),
    _custom("sro-e2e-custom-template", "name: {{ no_such_value }}", "no_such_value"),
    # the sandbox: no way to os through a global's attributes, no 50 MB string
    _custom("sro-e2e-template-escape", "name: \"{{ cycler.__init__.__globals__.os.popen('id').read() }}\"", "unsafe"),
    _custom("sro-e2e-template-size", "name: x}\ndata: {a: \"{{ 'x' * 50000000 }}\"", "50000000 characters"),
    Case(
        "sro-e2e-no-manifests",
        {"recipe": SIMULATED_GPU.name, "customManifests": "sro-e2e-no-such-configmap"},
        "CustomManifestsMissing",
        ("spec.customManifests:", "sro-e2e-no-such-configmap"),
    ),
    Case(
        "sro-e2e-image-template",
        {"recipe": SIMULATED_GPU.name, "driver": {"imageTemplate": "example.com/driver:{version}-{nope}"}},
        "SpecInvalid",
        ("spec.driver.imageTemplate:", "{nope}"),
    ),
    Case(
        "sro-e2e-image-format-spec",  # would pad the tag to 100 MB with {version:x>100000000}
        {"recipe": SIMULATED_GPU.name, "driver": {"imageTemplate": "example.com/driver:{version:x>9}"}},
        "SpecInvalid",
        ("spec.driver.imageTemplate:", "format spec"),
    ),
    Case(
        "sro-e2e-" + "n" * 40,  # 48 characters: its longest node label name is past 63
        {"recipe": SIMULATED_GPU.name},
        "SpecInvalid",
        ("metadata.name:", "too long"),
    ),
    Case(
        "sro-e2e-taint-renamed",
        {"recipe": SIMULATED_GPU.name, "partitioning": {"taint": True}, "devicePlugin": {"config": RENAMING}},
        "SpecInvalid",
        ("spec.partitioning.taint:", f"{SIMULATED_GPU.resource}.shared"),
    ),
    Case(
        "sro-e2e-upgrade-policy",
        {"recipe": SIMULATED_GPU.name, "driver": {"upgradePolicy": {"drain": {"podSelector": "app in (a,b)"}}}},
        "SpecInvalid",
        ("spec.driver.upgradePolicy.drain.podSelector:",),
    ),
    Case(
        "sro-e2e-quota",
        {
            "recipe": SIMULATED_GPU.name,
            "partitioning": {"quotas": [{"namespace": "default", "limit": 1, "resource": "example.com/other"}]},
        },
        "SpecInvalid",
        ("spec.partitioning.quotas[0].resource:", "example.com/other"),
    ),
]  # fmt: skip
# The conflict: an older SpecialResource of the same recipe (Ready, deploying nothing) holds the node
HOLDER = "sro-e2e-a-holder"  # sorts before the later one: a creation in the same second still loses
LATER = "sro-e2e-b-later"
PATCHED = "sro-e2e-patched"
FORBIDDEN = "sro-e2e-node-patch-forbidden"
MINE = [*(c.name for c in CASES), HOLDER, LATER, PATCHED, FORBIDDEN]


def apply(cluster: LocalCluster, doc: Mapping[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def special_resource(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": name},
        "spec": spec,
    }


def delete_sr(cluster: LocalCluster, name: str) -> None:
    cluster.kubectl("delete", "sr", name, "--ignore-not-found", "--timeout=120s", check=False)


def operator_log(cluster: LocalCluster) -> str:
    """Both replicas' logs, whole (kubectl's default for a selector is the last 10 lines)."""
    out = cluster.kubectl(
        "logs", "-l", OPERATOR, "-n", NS, "--all-containers", "--prefix", "--tail=-1", check=False
    )
    return out.stdout


def refusals_logged(cluster: LocalCluster, name: str, reason: str = "") -> list[str]:
    """The operator's log lines saying `name` is not deployed (for `reason`, when given)."""
    said = f" {name}: not deployed: " + (f"{reason}: " if reason else "")
    return [line for line in operator_log(cluster).splitlines() if said in line]


def passes(cluster: LocalCluster, name: str) -> float:
    """Reconcile passes the leader ran for `name` (its metrics; pod IPs are reachable from the node)."""
    leader = get_json(cluster, "lease", "sro-operator", "-n", NS)["spec"]["holderIdentity"]
    ip = get_json(cluster, "pod", leader, "-n", NS)["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found = re.search(
        rf'^sro_operator_reconciliations_total{{specialresource="{re.escape(name)}"}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


def degraded(cluster: LocalCluster, name: str) -> bool:
    return condition(sr_doc(cluster, name), "Degraded").get("status") == "True"


def why(cluster: LocalCluster, name: str) -> str:
    tail = "\n".join(operator_log(cluster).splitlines()[-30:])
    return f"{json.dumps(sr_doc(cluster, name).get('status', {}), indent=1)}\noperator:\n{tail}"


def assert_degraded(cluster: LocalCluster, name: str, reason: str, named: tuple[str, ...]) -> dict[str, Any]:
    """Degraded=True within seconds with `reason`, naming `named`, and not Ready; the object."""
    took = wait_for(
        f"{name} Degraded",
        lambda: degraded(cluster, name),
        DEGRADED_WITHIN,
        every=0.25,
        why=lambda: why(cluster, name),
    )
    print(f"{name}: Degraded after {took:.1f} s")
    doc = sr_doc(cluster, name)
    cond = condition(doc, "Degraded")
    assert cond["reason"] == reason, cond
    for text in named:
        assert text in cond["message"], (text, cond)
    assert condition(doc, "Ready").get("status") != "True", doc["status"]
    assert doc["status"].get("ready") != "True", doc["status"]
    return doc


def assert_refused(cluster: LocalCluster, name: str, reason: str, named: tuple[str, ...]) -> None:
    """Degraded as `assert_degraded` says; no DaemonSet; and logged once although further passes ran
    (each a spec change that leaves the refusal as it is)."""
    cond = condition(assert_degraded(cluster, name, reason, named), "Degraded")
    assert not get_json(cluster, "daemonsets", "-n", NS, "-l", f"sro.dev/specialresource={name}")["items"]
    before = passes(cluster, name)
    for flip in (True, False, True):  # each a new generation: the operator runs a pass at once
        patch = {"spec": {"startupTaint": flip}}
        cluster.kubectl("patch", "sr", name, "--type=merge", "-p", json.dumps(patch))
        time.sleep(3)
    wait_for(f"3 more passes of {name}", lambda: passes(cluster, name) >= before + 3, 15)
    assert condition(sr_doc(cluster, name), "Degraded") == cond  # the same refusal, the same since
    logged = refusals_logged(cluster, name, reason)
    assert len(logged) == 1, "\n".join(logged) or why(cluster, name)


@pytest.fixture(scope="module")
def installed(cluster: LocalCluster, sro_image: str) -> Iterator[None]:
    for name in MINE:
        delete_sr(cluster, name)
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    yield
    for name in MINE:
        delete_sr(cluster, name)
    out = sro(cluster, "uninstall", "--timeout", "180")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("case", CASES, ids=lambda c: "name-too-long" if len(c.name) > 40 else c.name[8:])
def test_each_refusal_is_degraded_naming_the_field_and_logged_once(
    cluster: LocalCluster, installed: None, case: Case
) -> None:
    for cm, data in case.config_maps.items():
        apply(cluster, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm, "namespace": NS}, "data": dict(data)})  # fmt: skip
    try:
        apply(cluster, special_resource(case.name, case.spec))
        assert_refused(cluster, case.name, case.reason, case.named)
    finally:
        delete_sr(cluster, case.name)
        for cm in case.config_maps:
            cluster.kubectl("-n", NS, "delete", "configmap", cm, "--ignore-not-found", check=False)
    assert not sr_doc(cluster, case.name), "the finalizer did not finish"


def test_an_older_special_resource_holding_the_node_makes_the_later_one_degraded(
    cluster: LocalCluster, installed: None
) -> None:
    try:
        apply(cluster, special_resource(HOLDER, _on_this_node(cluster.node_name)))
        wait_for(
            f"{HOLDER} Ready",
            lambda: condition(sr_doc(cluster, HOLDER), "Ready").get("status") == "True",
            DEGRADED_WITHIN,
            why=lambda: why(cluster, HOLDER),
        )
        apply(cluster, special_resource(LATER, _on_this_node(cluster.node_name)))
        assert_refused(cluster, LATER, "ResourceConflict", (repr(HOLDER), SIMULATED_GPU.resource))
        assert condition(sr_doc(cluster, HOLDER), "Ready").get("status") == "True"
        assert not refusals_logged(cluster, HOLDER)
    finally:
        delete_sr(cluster, LATER)
        delete_sr(cluster, HOLDER)
    labels = get_json(cluster, "node", cluster.node_name)["metadata"].get("labels", {})
    assert validated_label(HOLDER) not in labels and validated_label(LATER) not in labels


def test_a_ready_special_resource_patched_into_a_bad_spec_turns_degraded(
    cluster: LocalCluster, installed: None
) -> None:
    """The issue's case: `partitioning.taint: true` with a renaming time-slicing config patched
    into a Ready SpecialResource left it `Ready=True`, the refusal never written."""
    try:
        apply(cluster, special_resource(PATCHED, _on_this_node(cluster.node_name)))
        wait_for(
            f"{PATCHED} Ready",
            lambda: condition(sr_doc(cluster, PATCHED), "Ready").get("status") == "True",
            DEGRADED_WITHIN,
            why=lambda: why(cluster, PATCHED),
        )
        assert condition(sr_doc(cluster, PATCHED), "Degraded").get("status") == "False"
        patch = {"spec": {"partitioning": {"taint": True}, "devicePlugin": {"config": RENAMING}}}
        cluster.kubectl("patch", "sr", PATCHED, "--type=merge", "-p", json.dumps(patch))
        assert_refused(cluster, PATCHED, "SpecInvalid", ("spec.partitioning.taint:",))
    finally:
        delete_sr(cluster, PATCHED)
    labels = get_json(cluster, "node", cluster.node_name)["metadata"].get("labels", {})
    assert validated_label(PATCHED) not in labels
    assert not [k for k in labels if any(k == f"sro.dev/{PATCHED}.{s}" for s in STATE_NAMES)]


def test_a_node_patch_the_api_server_refuses_is_degraded_until_it_goes_through(
    cluster: LocalCluster, installed: None
) -> None:
    """The operator's ClusterRole loses `patch` on nodes (as a cluster's policy might refuse it):
    the SpecialResource cannot label its node, and its status says so — Degraded, NodePatchRefused,
    the API server's words and the node — instead of a WARNING line in the log and a status that
    says nothing. The role put back, the next pass goes through: Ready, Degraded False."""
    role = get_json(cluster, "clusterrole", "sro-operator")
    cut = [
        {**rule, "verbs": [v for v in rule["verbs"] if v != "patch"]}
        if rule.get("resources") == ["nodes"]
        else rule
        for rule in role["rules"]
    ]
    assert cut != role["rules"], role["rules"]
    cluster.kubectl("patch", "clusterrole", "sro-operator", "--type=merge", "-p", json.dumps({"rules": cut}))
    try:
        apply(cluster, special_resource(FORBIDDEN, _on_this_node(cluster.node_name)))
        # the node and the API server's own words
        assert_degraded(
            cluster, FORBIDDEN, "NodePatchRefused", (f"{cluster.node_name} at node patch", "403", "forbidden")
        )
    finally:
        cluster.kubectl(
            "patch", "clusterrole", "sro-operator", "--type=merge", "-p", json.dumps({"rules": role["rules"]})
        )
    wait_for(
        f"{FORBIDDEN} Ready once the role is back",
        lambda: (
            condition(sr_doc(cluster, FORBIDDEN), "Ready").get("status") == "True"
            and not degraded(cluster, FORBIDDEN)
        ),
        DEGRADED_WITHIN,
        why=lambda: why(cluster, FORBIDDEN),
    )
    delete_sr(cluster, FORBIDDEN)
    assert validated_label(FORBIDDEN) not in get_json(cluster, "node", cluster.node_name)["metadata"].get(
        "labels", {}
    )
