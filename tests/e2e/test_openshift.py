"""OpenShift on the real local cluster, which serves OpenShift's API through CRDs written from the
documented APIs (tests/fixtures/openshift/: SecurityContextConstraints, ClusterOperator).

In file order: `sro install --platform openshift` is refused while the cluster is plain Kubernetes,
creating nothing; with the CRDs installed it creates the SCCs and their `use` grants (RBAC says
exactly the granted account may use each), a simulated-gpu SpecialResource goes Ready with the
runtime state's CRI-O hooks.d entry on the node, the ClusterOperator `sro` mirrors it, the operator
puts back an SCC and a grant someone deleted, and `sro uninstall` removes all of it. Then the OLM
bundle is installed the way OLM would (its CSV's accounts, roles and Deployment, its manifests) into
a namespace of its own: the operator comes up with the bundle's RBAC alone and creates the SCCs, the
grants and the ClusterOperator itself. The CRDs (and anything of their kinds) are removed at the end,
so that the shared cluster's other tests do not think they run on OpenShift.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.api.openshift import CRIO_HOOKS_DIR
from sro.install import scc
from sro.local.cluster import LocalCluster
from sro.openshift.bundle import generate, olm_objects
from tests.e2e.helpers import figure, get_json, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

NS = "sro-system"
BUNDLE_NS = "sro-e2e-bundle"
SR = "ocp-gpus"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openshift"
CRDS = [FIXTURES / "securitycontextconstraints.crd.yaml", FIXTURES / "clusteroperators.crd.yaml"]
CRD_NAMES = ["securitycontextconstraints.security.openshift.io", "clusteroperators.config.openshift.io"]
HOOK = Path(CRIO_HOOKS_DIR) / "sro-hook.json"
SCCS = "securitycontextconstraints.security.openshift.io"  # kubectl's cached discovery lacks the short names
COS = "clusteroperators.config.openshift.io"
SR_DOC = f"""apiVersion: sro.dev/v1alpha1
kind: SpecialResource
metadata:
  name: {SR}
spec:
  recipe: simulated-gpu
"""


def _ok(r: Any) -> str:
    assert r.returncode == 0, f"rc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return str(r.stdout + r.stderr)


def _in_use(cluster: LocalCluster) -> str:
    srs = cluster.kubectl("get", "specialresources", "-o", "name", check=False).stdout.split()
    ops = get_json(cluster, "deployments", "-A", "-l", "app.kubernetes.io/name=sro-operator")["items"]
    return ", ".join([*srs, *(f"operator {d['metadata']['namespace']}/{d['metadata']['name']}" for d in ops)])


def _crds_served(cluster: LocalCluster) -> list[str]:
    out = cluster.kubectl("get", "crd", "-o", "name", check=False).stdout.split()
    return [n for n in out if n.split("/", 1)[-1] in CRD_NAMES]


def _remove_openshift(cluster: LocalCluster) -> None:
    """Every SCC and ClusterOperator, then the two CRDs; wait until they are gone."""
    if _crds_served(cluster):
        cluster.kubectl("delete", SCCS, "--all", "--timeout=60s", check=False)
        cluster.kubectl("delete", COS, "--all", "--timeout=60s", check=False)
    for path in CRDS:
        cluster.kubectl("delete", "-f", str(path), "--ignore-not-found", "--timeout=120s", check=False)
    wait_for("the OpenShift CRDs to be gone", lambda: not _crds_served(cluster), timeout=120)


def _condition(doc: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (doc.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def _cluster_operator(cluster: LocalCluster) -> dict[str, Any]:
    out = cluster.kubectl("get", COS, "sro", "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _can_use(cluster: LocalCluster, scc_name: str, account: str, namespace: str = NS) -> bool:
    out = cluster.kubectl(
        "auth", "can-i", "use", f"securitycontextconstraints.security.openshift.io/{scc_name}",
        f"--as=system:serviceaccount:{namespace}:{account}", "-n", namespace, check=False,
    )  # fmt: skip
    return out.stdout.strip() == "yes"


def _debug(cluster: LocalCluster, namespace: str = NS) -> str:
    pods = cluster.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False).stdout
    logs = cluster.kubectl(
        "-n", namespace, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=40", check=False
    ).stdout
    return (
        f"{pods}\nClusterOperator: {json.dumps(_cluster_operator(cluster).get('status'))}\noperator:\n{logs}"
    )


def _grants_in_place(cluster: LocalCluster, namespace: str) -> bool:
    sccs = set(cluster.kubectl("get", SCCS, "-o", "name", check=False).stdout.split())
    bindings = set(
        cluster.kubectl("-n", namespace, "get", "rolebindings", "-o", "name", check=False).stdout.split()
    )
    return all(
        f"securitycontextconstraints.security.openshift.io/{o.scc}" in sccs
        and f"rolebinding.rbac.authorization.k8s.io/{o.role}" in bindings
        for o in scc.OPERANDS
    )


@pytest.fixture(scope="module")
def plain(cluster: LocalCluster) -> LocalCluster:
    busy = _in_use(cluster)
    if busy:
        pytest.skip(f"the cluster's sro install is in use ({busy}): this test installs its own")
    if _crds_served(cluster):
        pytest.skip("the cluster serves OpenShift's CRDs already (another test's?)")
    return cluster


@pytest.fixture(scope="module")
def openshift(plain: LocalCluster) -> Iterator[LocalCluster]:
    try:
        for path in CRDS:
            plain.kubectl("apply", "-f", str(path))
        for name in CRD_NAMES:
            plain.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
        yield plain
    finally:
        _remove_openshift(plain)


def test_platform_openshift_is_refused_on_plain_kubernetes(plain: LocalCluster, sro_image: str) -> None:
    out = sro(
        plain, "install", "--platform", "openshift", "--namespace", "sro-e2e-refused", "--image", sro_image
    )
    assert out.returncode == 1
    text = out.stdout + out.stderr
    assert "config.openshift.io" in text and "Traceback" not in text
    assert len(out.stderr.strip().splitlines()) <= 3, out.stderr
    assert plain.kubectl("get", "namespace", "sro-e2e-refused", check=False).returncode != 0
    assert plain.kubectl("get", "crd", "specialresources.sro.dev", check=False).returncode != 0


@pytest.fixture(scope="module")
def installed(openshift: LocalCluster, sro_image: str) -> Iterator[LocalCluster]:
    hooks_dir_existed = HOOK.parent.exists()
    t0 = time.monotonic()
    out = sro(openshift, "install", "--platform", "openshift", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    figure(f"sro install --platform openshift: {time.monotonic() - t0:.1f} s")
    try:
        yield openshift
    finally:
        openshift.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=180s", check=False)
        sro(openshift, "uninstall", "--timeout", "180")
        if not hooks_dir_existed:  # the runtime state's pod made it (hostPath DirectoryOrCreate)
            for d in (HOOK.parent, HOOK.parent.parent, HOOK.parent.parent.parent):
                if d.is_dir() and not any(d.iterdir()):
                    d.rmdir()


def test_install_creates_the_sccs_and_grants(installed: LocalCluster) -> None:
    for op in scc.OPERANDS:
        got = get_json(installed, SCCS, op.scc)
        want = scc.scc(op)
        for key, value in want.items():
            if key not in ("metadata", "apiVersion", "kind"):
                assert got.get(key) == value, f"{op.scc}.{key}: {got.get(key)} (the schema pruned it?)"
        assert _can_use(installed, op.scc, op.account), f"{op.account} may not use {op.scc}"
    # each grant is for its account only: no one else may use the privileged SCC
    assert not _can_use(installed, "sro-driver", "sro-validation")
    assert not _can_use(installed, "sro-driver", "default")
    assert not _can_use(installed, "sro-driver", "sro-driver", namespace="default")
    get_json(installed, "clusterrole", scc.OPERATOR_ROLE)
    get_json(installed, "clusterrolebinding", scc.OPERATOR_ROLE)


def test_special_resource_goes_ready_and_the_cluster_operator_follows(installed: LocalCluster) -> None:
    t0 = time.monotonic()
    installed.kubectl("apply", "-f", "-", input=SR_DOC)

    def ready() -> bool:
        doc = get_json(installed, "sr", SR)
        return _condition(doc, "Ready").get("status") == "True"

    wait_for(f"SpecialResource {SR} Ready", ready, timeout=480, every=2, why=lambda: _debug(installed))
    figure(f"SpecialResource on OpenShift CRDs Ready: {time.monotonic() - t0:.1f} s")
    # the runtime state wrote the CRI-O hooks.d entry, naming the host's python and its archive
    ds = get_json(installed, "-n", NS, "daemonset", f"sro-{SR}-runtime")
    command = ds["spec"]["template"]["spec"]["containers"][0]["command"]
    assert f"--crio-hooks-dir={CRIO_HOOKS_DIR}" in command
    entry = json.loads(HOOK.read_text())
    assert (
        entry["hook"]["path"] == "/usr/bin/python3"
        and "/var/lib/sro/runtime/sro-hook.pyz" in entry["hook"]["args"][4]
    )
    assert entry["when"] == {"always": True} and entry["stages"] == ["prestart"]

    def mirrored() -> bool:
        co = _cluster_operator(installed)
        related = {(o["resource"], o["name"]) for o in (co.get("status") or {}).get("relatedObjects") or []}
        return (
            _condition(co, "Available").get("status") == "True"
            and _condition(co, "Progressing").get("status") == "False"
            and _condition(co, "Degraded").get("status") == "False"
            and ("specialresources", SR) in related
        )

    wait_for(
        "ClusterOperator sro to mirror the SpecialResource",
        mirrored,
        timeout=60,
        why=lambda: _debug(installed),
    )
    co = _cluster_operator(installed)
    assert co["status"]["versions"] == [{"name": "operator", "version": __import__("sro").__version__}]
    printed = installed.kubectl("get", COS, "sro").stdout
    assert "True" in printed and "False" in printed


def test_operator_puts_back_a_deleted_scc_and_grant(installed: LocalCluster) -> None:
    installed.kubectl("delete", SCCS, "sro-exporter")
    installed.kubectl("-n", NS, "delete", "rolebinding", "sro-scc-exporter")
    took = wait_for("the operator to re-create them", lambda: _grants_in_place(installed, NS), timeout=150, every=2,
                    why=lambda: _debug(installed))  # fmt: skip
    figure(f"operator re-created a deleted SCC and grant in {took:.0f} s")


def test_uninstall_removes_them(installed: LocalCluster) -> None:
    installed.kubectl("delete", "sr", SR, "--timeout=180s")
    assert not HOOK.exists(), "the CRI-O hooks.d entry outlived its SpecialResource"
    out = _ok(sro(installed, "uninstall", "--timeout", "180"))
    assert "deleted SecurityContextConstraints sro-driver" in out
    left = installed.kubectl("get", f"{SCCS},{COS}", "-o", "name").stdout.split()
    assert left == []
    roles = installed.kubectl("get", "clusterroles,clusterrolebindings", "-o", "name").stdout.split()
    assert not [r for r in roles if "sro-scc-" in r or scc.OPERATOR_ROLE in r]


def test_bundle_deployment_brings_the_operator_up(
    openshift: LocalCluster, sro_image: str, tmp_path: Path
) -> None:
    """The CSV installed the way OLM would: with its RBAC alone the operator runs, leads, and on
    OpenShift creates the SCCs, their grants and the ClusterOperator by itself."""
    if _in_use(openshift):
        pytest.skip(f"an sro install is in use ({_in_use(openshift)})")
    version = sro_image.rsplit(":", 1)[1]
    made = generate(version, sro_image)
    docs = [yaml.safe_load(t) for p, t in made.files.items() if p.startswith("manifests/")]
    objs = olm_objects(made.csv, docs, BUNDLE_NS)
    text = "---\n".join(yaml.safe_dump(o) for o in objs)
    (tmp_path / "olm.yaml").write_text(text)
    t0 = time.monotonic()
    try:
        openshift.kubectl("create", "namespace", BUNDLE_NS)
        openshift.kubectl("apply", "-f", str(tmp_path / "olm.yaml"))
        openshift.kubectl("-n", BUNDLE_NS, "rollout", "status", "deployment/sro-operator", "--timeout=240s")
        figure(f"bundle's operator Deployment available: {time.monotonic() - t0:.1f} s")

        def leading() -> bool:
            out = openshift.kubectl(
                "-n", BUNDLE_NS, "get", "lease", "sro-operator", "-o", "json", check=False
            )
            holder = json.loads(out.stdout)["spec"].get("holderIdentity", "") if out.returncode == 0 else ""
            return str(holder).startswith("sro-operator-")

        wait_for("a replica to lead", leading, timeout=120, why=lambda: _debug(openshift, BUNDLE_NS))
        wait_for("the bundle's operator to create the SCCs and grants", lambda: _grants_in_place(openshift, BUNDLE_NS),
                 timeout=120, every=2, why=lambda: _debug(openshift, BUNDLE_NS))  # fmt: skip
        wait_for(
            "the ClusterOperator", lambda: _condition(_cluster_operator(openshift), "Available").get("status") == "True",
            timeout=60, why=lambda: _debug(openshift, BUNDLE_NS),
        )  # fmt: skip
        for op in scc.OPERANDS:
            assert _can_use(openshift, op.scc, op.account, BUNDLE_NS)
    finally:
        openshift.kubectl("delete", "-f", str(tmp_path / "olm.yaml"), "--ignore-not-found", "--timeout=120s",
                          check=False)  # fmt: skip
        openshift.kubectl(
            "delete", "namespace", BUNDLE_NS, "--ignore-not-found", "--timeout=180s", check=False
        )
        for op in scc.OPERANDS:
            openshift.kubectl("delete", "clusterrole", op.role, "--ignore-not-found", check=False)
        openshift.kubectl("delete", SCCS, "-l", "app.kubernetes.io/managed-by=sro", check=False)
        openshift.kubectl("delete", COS, "sro", "--ignore-not-found", check=False)
