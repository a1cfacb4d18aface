"""Issue 8: pretty-printed answers must not take the API server down.

Kubernetes 1.20 vendors reflect2 1.0.1, which crashes under Go >= 1.18 as soon as json-iterator
pretty-prints an object holding a map (`?pretty=true`, or a User-Agent starting with curl, Wget or
Mozilla/5.0). The build replaces it (sro/local/kubebuild.py); this test asks for a Node, a Pod, a
ConfigMap and a list of each both ways, as admin from the host and as a service account from inside
a pod, and checks that every answer is pretty JSON of the right kind and the API server kept running.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from sro.local import supervisor
from sro.local.cluster import LocalCluster

pytestmark = pytest.mark.e2e

# (variant, query, User-Agent): each one makes kube-apiserver indent its JSON
VARIANTS = (
    ("pretty", "?pretty=true", "sro-e2e/1"),
    ("curl", "", "curl/8.0"),
    ("wget", "", "Wget"),  # what busybox wget sends
)

# Runs in the sro image: Python's urllib checks the API's certificate against the service account's
# CA (busybox wget has TLS here but cannot check certificates).
IN_POD = """
import json, os, ssl, sys, urllib.error, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(sa + "/token").read().strip()
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
base = "https://%s:%s" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
out = []
for path in json.loads(sys.argv[1]):
    for variant, query, agent in json.loads(sys.argv[2]):
        req = urllib.request.Request(base + path + query, headers={"Authorization": "Bearer " + token, "User-Agent": agent})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=20) as r:
                code, body = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            code, body = e.code, e.read().decode()
        except Exception as e:
            code, body = repr(e), ""
        out.append({"path": path, "variant": variant, "code": code, "body": body})
print(json.dumps(out))
"""


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    name = f"sro-e2e-pretty-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
        cluster.kubectl(
            "delete", "clusterrole,clusterrolebinding", f"{name}-reader", "--ignore-not-found", check=False
        )


@pytest.fixture
def apiserver(cluster: LocalCluster) -> Iterator[supervisor.Running]:
    """The API server's process; should it die anyway, it is brought back for the tests after this one."""
    before = supervisor.running(cluster.layout, "kube-apiserver")
    assert before is not None, "kube-apiserver is not running"
    yield before
    if supervisor.running(cluster.layout, "kube-apiserver") is None:
        tail = cluster.death_report("kube-apiserver")
        cluster.up()
        pytest.fail(f"kube-apiserver died during the test; the end of its log:\n{tail}")


def _kind(path: str) -> str:
    """The kind the API answers for one of our paths: /api/v1/nodes -> NodeList, .../pods/x -> Pod."""
    parts = path.strip("/").split("/")
    resource = parts[-1] if parts[-1] in ("nodes", "pods", "configmaps") else parts[-2]
    kind = {"nodes": "Node", "pods": "Pod", "configmaps": "ConfigMap"}[resource]
    return kind + "List" if parts[-1] == resource else kind


def _check(answers: list[dict[str, object]], paths: list[str], who: str) -> None:
    assert len(answers) == len(paths) * len(VARIANTS)
    for a in answers:
        where = f"{who} {a['variant']} {a['path']}"
        assert a["code"] == 200, f"{where}: {a['code']} {str(a['body'])[:300]}"
        body = str(a["body"])
        doc = json.loads(body)
        assert doc["kind"] == _kind(str(a["path"])), where
        assert '\n  "kind"' in body or '\n  "apiVersion"' in body, f"{where}: not pretty-printed"
        if doc["kind"].endswith("List"):
            assert doc["items"], f"{where}: an empty list proves nothing (no map was printed)"


def _admin_get(cluster: LocalCluster, path: str, query: str, agent: str) -> dict[str, object]:
    url = f"https://127.0.0.1:{cluster.layout.ports.apiserver}{path}{query}"
    req = urllib.request.Request(url, headers={"User-Agent": agent})
    try:
        with urllib.request.urlopen(req, context=supervisor.tls_context(cluster.layout), timeout=20) as r:
            return {"code": r.status, "body": r.read().decode()}
    except urllib.error.HTTPError as e:
        return {"code": e.code, "body": e.read().decode()}
    except (urllib.error.URLError, OSError) as e:
        return {"code": repr(e), "body": ""}


def _wait_finished(cluster: LocalCluster, ns: str, pod: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    phase = ""
    while time.monotonic() < deadline:
        phase = cluster.kubectl(
            "-n", ns, "get", "pod", pod, "-o", "jsonpath={.status.phase}", check=False
        ).stdout
        if phase in ("Succeeded", "Failed"):
            return phase
        time.sleep(0.5)
    describe = cluster.kubectl("-n", ns, "describe", "pod", pod, check=False).stdout
    raise AssertionError(f"pod {pod} stayed {phase!r}:\n{describe}")


def test_pretty_answers_as_admin_and_service_account_leave_the_apiserver_up(
    cluster: LocalCluster, sro_image: str, namespace: str, apiserver: supervisor.Running
) -> None:
    ns, pod, sa = namespace, "fetcher", "reader"
    paths = [
        f"/api/v1/nodes/{cluster.node_name}",
        "/api/v1/nodes",
        f"/api/v1/namespaces/{ns}/pods/{pod}",
        f"/api/v1/namespaces/{ns}/pods",
        f"/api/v1/namespaces/{ns}/configmaps/maps",
        f"/api/v1/namespaces/{ns}/configmaps",
    ]
    objects = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "maps", "namespace": ns, "labels": {"a": "1"}, "annotations": {"b": "2"}},
            "data": {f"key{i}": f"value {i}" for i in range(20)},
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{ns}-reader"},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes", "pods", "configmaps"], "verbs": ["get", "list"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{ns}-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{ns}-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": ns, "labels": {"app": "fetcher"}},
            "spec": {
                "serviceAccountName": sa,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "fetch",
                        "image": sro_image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-c", IN_POD, json.dumps(paths), json.dumps(VARIANTS)],
                    }
                ],
            },
        },
    ]
    t0 = time.monotonic()
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    phase = _wait_finished(cluster, ns, pod)
    log = cluster.kubectl("-n", ns, "logs", pod).stdout
    assert phase == "Succeeded", log
    _check(json.loads(log.strip().splitlines()[-1]), paths, "service account")
    t_pod = time.monotonic() - t0

    t1 = time.monotonic()
    answers = []
    for path in paths:
        for variant, query, agent in VARIANTS:
            answers.append({"path": path, "variant": variant, **_admin_get(cluster, path, query, agent)})
    _check(answers, paths, "admin")
    t_admin = time.monotonic() - t1

    # still up, and the same process: it did not die and get restarted behind our back
    assert supervisor.running(cluster.layout, "kube-apiserver") == apiserver
    ready = _admin_get(cluster, "/readyz", "", "sro-e2e/1")
    assert ready == {"code": 200, "body": "ok"}
    assert cluster.kubectl("get", "node", cluster.node_name, "-o", "name").stdout.strip() == (
        f"node/{cluster.node_name}"
    )
    print(f"in-pod service account: {len(paths) * len(VARIANTS)} requests, {t_pod:.1f}s with the pod; "
          f"admin: {len(answers)} requests in {t_admin:.2f}s")  # fmt: skip
