"""`sro install` and `sro uninstall` on the real local cluster.

Installed with --no-operator into a namespace of its own (so the shared sro-system of other tests is
left alone): this test is about what install puts there, not about the operator running (the
operator's e2e tests install it whole). The operator Deployment is still checked by the API server,
with a server-side dry run. Cluster-scoped objects (the CRD, ClusterRoles) are the cluster's one
copy: the test skips when another test is using them (a SpecialResource or an operator exists).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from sro.api.crd import crd
from sro.api.names import MANAGED_BY_LABEL
from sro.install.objects import objects
from sro.local.cluster import LocalCluster
from tests.e2e.helpers import sro

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NS = "sro-e2e-install"
CRD_NAME = crd()["metadata"]["name"]
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BLOCKER = "sro.dev/e2e-install-blocker"  # a finalizer no operator removes


def _ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"rc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout + r.stderr


def _sr(name: str, spec: str, finalizers: str = "") -> str:
    return (
        f"apiVersion: sro.dev/v1alpha1\nkind: SpecialResource\nmetadata:\n  name: {name}\n{finalizers}"
        f"spec:\n{spec}"
    )


def _leftovers(cluster: LocalCluster) -> list[str]:
    """Objects labelled managed-by=sro that this install owned: cluster-scoped ones, and all in NS."""
    selector = f"{MANAGED_BY_LABEL}=sro"
    cluster_scoped = cluster.kubectl(
        "get", "customresourcedefinitions,clusterroles,clusterrolebindings", "-l", selector, "-o", "name"
    ).stdout.split()
    namespaced = json.loads(
        cluster.kubectl(
            "get",
            "all,serviceaccounts,configmaps,roles,rolebindings,leases",
            "-A",
            "-l",
            selector,
            "-o",
            "json",
        ).stdout
    )["items"]
    in_ns = [f"{o['kind']}/{o['metadata']['name']}" for o in namespaced if o["metadata"]["namespace"] == NS]
    gone = cluster.kubectl("get", "namespace", NS, check=False).returncode != 0
    return [*cluster_scoped, *in_ns, *([] if gone else [f"namespace/{NS}"])]


def _in_use(cluster: LocalCluster) -> str:
    """What of the cluster's one sro install another test is using now (uninstall would remove it)."""
    srs = cluster.kubectl("get", "specialresources", "-o", "name", check=False).stdout.split()
    deployments = json.loads(
        cluster.kubectl(
            "get", "deployments", "-A", "-l", "app.kubernetes.io/name=sro-operator", "-o", "json"
        ).stdout
    )["items"]
    operators = [f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in deployments]
    return ", ".join([*srs, *(f"operator {o}" for o in operators if not o.startswith(NS + "/"))])


def test_install_then_uninstall(cluster: LocalCluster, sro_image: str) -> None:
    busy = _in_use(cluster)
    if busy:
        pytest.skip(f"the cluster's sro install is in use ({busy}); uninstalling would remove it")
    install = ("install", "--namespace", NS, "--image", sro_image, "--no-operator", "--timeout", "180")
    try:
        t0 = time.monotonic()
        out = _ok(sro(cluster, *install))
        first = time.monotonic() - t0
        assert "created Namespace sro-e2e-install" in out and "Done" in out

        # the CRD is served, and the printer columns work
        doc = json.loads(cluster.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
        established = {c["type"]: c["status"] for c in doc["status"]["conditions"]}
        assert established["Established"] == "True"
        assert cluster.kubectl("get", "sr").returncode == 0
        # every object of the install is there; discovery has rolled out (install waited for it)
        for obj in objects(NS, sro_image, operator=False):
            ns = ["-n", NS] if obj["kind"] not in ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding") else []  # fmt: skip
            cluster.kubectl("get", *ns, obj["kind"].lower(), obj["metadata"]["name"])
        ds = json.loads(cluster.kubectl("-n", NS, "get", "daemonset", "sro-discovery", "-o", "json").stdout)
        assert ds["status"]["numberAvailable"] == ds["status"]["desiredNumberScheduled"] >= 1

        # a second install changes nothing and is quick (one look per object)
        t0 = time.monotonic()
        again = _ok(sro(cluster, *install))
        second = time.monotonic() - t0
        assert "created" not in again and "configured" not in again, again
        assert second < 15, f"second install took {second:.1f} s (first {first:.1f} s)"

        # the operator Deployment and the rest pass the API server's validation and admission
        yaml_text = _ok(sro(cluster, "install", "--namespace", NS, "--image", sro_image, "--dry-run"))
        checked = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml_text).stdout
        assert "deployment.apps/sro-operator" in checked
        # deploy/ is what kubectl 1.20's kustomize (v2.0.3) reads
        listed = cluster.kubectl("apply", "-k", str(DEPLOY), "--dry-run=client").stdout
        assert "customresourcedefinition.apiextensions.k8s.io/specialresources.sro.dev" in listed
        assert "deployment.apps/sro-operator" in listed

        # a SpecialResource that violates the schema is refused, with the field named
        bad = cluster.kubectl(
            "apply", "-f", "-", input=_sr("sro-e2e-bad", "  recipe: simulated-gpu\n  driver: {mode: sideways}\n"),
            check=False,
        )  # fmt: skip
        assert bad.returncode != 0
        assert "spec.driver.mode" in bad.stderr and "sideways" in bad.stderr, bad.stderr

        # a SpecialResource whose finalizer no one runs (no operator here): uninstall waits, then says
        # which one and what to do, having deleted nothing else
        good = _sr(
            "sro-e2e-install",
            "  recipe: simulated-gpu\n  nodeSelector: {sro.dev/e2e-install-nowhere: 'true'}\n",
            finalizers=f"  finalizers: [{BLOCKER}]\n",
        )
        cluster.kubectl("apply", "-f", "-", input=good)
        stuck = sro(cluster, "uninstall", "--namespace", NS, "--timeout", "3")
        assert stuck.returncode == 1
        assert "sro-e2e-install" in stuck.stderr and BLOCKER in stuck.stderr and "--force" in stuck.stderr
        assert cluster.kubectl("get", "namespace", NS).returncode == 0
        assert cluster.kubectl("get", "crd", CRD_NAME).returncode == 0

        # --force removes the finalizer and goes on; nothing of the install is left
        out = _ok(sro(cluster, "uninstall", "--namespace", NS, "--timeout", "180", "--force"))
        assert "removed the finalizers of SpecialResource sro-e2e-install" in out
        assert "sro discover --cleanup" in out  # discovery's labels stay on the node, and it says how
        left = _leftovers(cluster)
        if left and _in_use(cluster):
            pytest.skip(
                f"another test installed sro meanwhile ({_in_use(cluster)}): cannot tell what is left"
            )
        assert left == []
        # a second uninstall has nothing to do and says so
        again = _ok(sro(cluster, "uninstall", "--namespace", NS, "--timeout", "60"))
        assert "deleted" not in again
    finally:
        cluster.kubectl("patch", "sr", "sro-e2e-install", "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                        check=False)  # fmt: skip
        cluster.kubectl("delete", "sr", "sro-e2e-install", "--ignore-not-found", check=False)
        if _in_use(cluster):  # another test installed sro meanwhile: remove only what is ours alone
            cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--timeout=120s", check=False)
        else:
            sro(cluster, "uninstall", "--namespace", NS, "--timeout", "180", "--force")
