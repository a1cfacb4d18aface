"""Custom recipes end to end (issue 28): the FPGA and SmartNIC examples beside the simulated GPU.

On one node of the local cluster, through the deployed operator: examples/fpga and examples/smartnic
are tried exactly as their comments say (the node opts in, `kubectl create configmap ...
--from-file=recipe.yaml`, `kubectl apply -f specialresource.yaml`) while the simulated-gpu
SpecialResource is Ready on the same node, and all three go Ready with every state validated. Then,
in file order on one installation: a pod asking for `example.com/fpga: 1` sees exactly its card's two
nodes (xclmgmtN and renderD(128+N)), the recipe's library, and `xbutil examine` runs; a pod asking for
two VFs of pool a sees exactly two /dev/sro-vf* nodes of PF 0 (and a node it makes for any other VF
cannot be opened: the device cgroup, EPERM); each exporter publishes device health under the
resource the device is announced as and no readings (`metrics: health`); `sro status` shows the
three; a recipe ConfigMap with an unknown field leaves its SpecialResource Degraded naming the
field, with nothing deployed; deleting each custom SpecialResource leaves nothing of it (objects,
device nodes, driver files, node labels, the runtime's recipe file, allocatable) while the simulated
GPU stays Ready. Latencies are printed as FIGURE lines, never asserted tightly.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.api.names import RUNTIME_ROOT, validated_label
from sro.api.recipes import SIMULATED_GPU, Recipe, recipe_from_file, recipe_to_dict
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE, RUNTIME_HANDLER
from tests.e2e.helpers import condition, figure, get_json, sr_doc, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(1800)]

NS = "sro-system"
APPS = "sro-e2e-custom"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPU_SR = "simulated-gpu"
FPGA = recipe_from_file(EXAMPLES / "fpga" / "recipe.yaml")
NIC = recipe_from_file(EXAMPLES / "smartnic" / "recipe.yaml")
CUSTOM = {"fpga": FPGA, "smartnic": NIC}  # example folder -> its recipe; SR and recipe share a name
BAD = "example-bad"
BAD_CM = "example-bad-recipe"
POOL_A = "example.com/vf-pool-a"
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def config_map(example: str) -> str:
    """The ConfigMap the example's SpecialResource names (what its comments say to create)."""
    doc = yaml.safe_load((EXAMPLES / example / "specialresource.yaml").read_text())
    return str(doc["spec"]["recipeConfigMap"])


def count(recipe: Recipe) -> int:
    """How many devices the example's devices.yaml makes."""
    example = next(k for k, r in CUSTOM.items() if r == recipe)
    return int(yaml.safe_load((EXAMPLES / example / "devices.yaml").read_text())["count"])


def expand(pattern: str, index: int) -> str:
    """A node pattern for device `index`: {index} or {index+N} (the examples' patterns)."""
    return re.sub(r"\{index(?:\+(\d+))?\}", lambda m: str(index + int(m.group(1) or 0)), pattern)


def opt_in(recipe: Recipe) -> str:
    (term,) = recipe.default_node_selector_terms()
    (label,) = term
    return label


def host_nodes(recipe: Recipe) -> list[str]:
    """The host's device nodes of the recipe's simulated driver that exist: every device's primary,
    then its companions, then the control nodes (the example's devices only: a host's own
    /dev/dri/renderD130 is no business of the FPGA example's)."""
    n = count(recipe)
    wanted = [expand(recipe.device_node, i) for i in range(n)]
    wanted += [expand(c, i) for c in recipe.companion_nodes for i in range(n)]
    return [p for p in (*wanted, *recipe.control_nodes) if os.path.lexists(p)]


def node(cluster: LocalCluster) -> dict[str, Any]:
    return dict(get_json(cluster, "node", cluster.node_name))


def allocatable(cluster: LocalCluster, resource: str) -> int:
    return int(node(cluster)["status"].get("allocatable", {}).get(resource, "0"))


def is_ready(cluster: LocalCluster, name: str) -> bool:
    return condition(sr_doc(cluster, name), "Ready").get("status") == "True"


def debug(cluster: LocalCluster, *names: str) -> str:
    pods = cluster.kubectl("-n", NS, "get", "pods,daemonsets", "-o", "wide", check=False).stdout
    logs = cluster.kubectl(
        "-n", NS, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=200", "--prefix", check=False
    ).stdout
    said = [ln for ln in logs.splitlines() if "/healthz" not in ln][-40:]
    statuses = {n: sr_doc(cluster, n).get("status", {}) for n in names}
    return f"{pods}\nstatus: {json.dumps(statuses, indent=1)}\noperator:\n" + "\n".join(said)


def leftovers(cluster: LocalCluster, recipe: Recipe) -> list[str]:
    """Anything of the custom SpecialResource `recipe.name` still on the cluster or the host."""
    sr = recipe.name
    found = [
        f"label {k}" for k in node(cluster)["metadata"].get("labels", {}) if k.startswith(f"sro.dev/{sr}.")
    ]
    found += [
        f"taint {t['key']}"
        for t in node(cluster)["spec"].get("taints", [])
        if t["key"].startswith(f"sro.dev/{sr}.")
    ]
    for kind in ("daemonsets", "pods", "configmaps", "services"):
        items = get_json(cluster, kind, "-n", NS, "-l", f"sro.dev/specialresource={sr}")["items"]
        found += [f"{kind}/{i['metadata']['name']}" for i in items]
    if cluster.kubectl("-n", NS, "get", "configmap", f"sro-{sr}-recipe", check=False).returncode == 0:
        found.append(f"configmap/sro-{sr}-recipe")
    found += [f"device node {p}" for p in host_nodes(recipe)]
    root = Path(recipe.driver_root)
    if root.exists():  # the driver pod's mount point may stay, empty
        found += [f"driver file {p}" for p in sorted(root.rglob("*"))]
    recipe_file = Path(RUNTIME_ROOT) / "recipes" / f"{sr}.json"
    found += [f"runtime recipe {recipe_file}"] if recipe_file.exists() else []
    found += [f"allocatable {r}" for r in recipe.announced_resources if allocatable(cluster, r)]
    return found


def delete_custom(cluster: LocalCluster, name: str) -> None:
    cluster.kubectl("delete", "sr", name, "--ignore-not-found", "--timeout=180s", check=False)


@pytest.fixture(scope="module")
def installed(cluster: LocalCluster, sro_image: str) -> Iterator[None]:
    """sro installed from the local image, on a node with nothing of the two examples."""
    for name in (FPGA.name, NIC.name, BAD):
        delete_custom(cluster, name)
    for recipe in CUSTOM.values():
        assert not host_nodes(recipe), f"{recipe.name}'s device nodes are on the host: {host_nodes(recipe)}"
    t0 = time.monotonic()
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    figure(f"custom recipes: sro install: {time.monotonic() - t0:.1f} s")
    cluster.kubectl("create", "namespace", APPS, check=False)
    gpu_was_there = bool(sr_doc(cluster, GPU_SR))
    try:
        yield
    finally:
        cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--timeout=120s", check=False)
        for name in (FPGA.name, NIC.name, BAD):
            delete_custom(cluster, name)
        if not gpu_was_there:
            delete_custom(cluster, GPU_SR)
        for cm in (config_map("fpga"), config_map("smartnic"), BAD_CM):
            cluster.kubectl("-n", NS, "delete", "configmap", cm, "--ignore-not-found", check=False)
        for recipe in CUSTOM.values():
            cluster.kubectl("label", "node", cluster.node_name, f"{opt_in(recipe)}-", check=False)
        out = sro(cluster, "uninstall", "--timeout", "180")
        assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def ready(cluster: LocalCluster, installed: None) -> None:
    """The simulated GPU Ready (applied here when no other test has), then both examples, tried as
    their comments say, Ready beside it on the same node."""
    t0 = time.monotonic()
    if not sr_doc(cluster, GPU_SR):
        cluster.kubectl("apply", "-f", str(EXAMPLES / "simulated-gpu.yaml"))
    took = wait_for(
        f"{GPU_SR} Ready", lambda: is_ready(cluster, GPU_SR), 300, why=lambda: debug(cluster, GPU_SR)
    )
    figure(f"custom recipes: {GPU_SR} Ready first: {took:.1f} s")
    started: dict[str, float] = {}
    for example, recipe in CUSTOM.items():
        cluster.kubectl("label", "node", cluster.node_name, f"{opt_in(recipe)}=true", "--overwrite")
        cluster.kubectl(
            "-n",
            NS,
            "create",
            "configmap",
            config_map(example),
            f"--from-file=recipe.yaml={EXAMPLES / example / 'recipe.yaml'}",
        )
        cluster.kubectl("apply", "-f", str(EXAMPLES / example / "specialresource.yaml"))
        started[recipe.name] = time.monotonic()
    names = [r.name for r in CUSTOM.values()]
    pending = set(names)

    def all_ready() -> bool:
        for name in sorted(pending):
            if is_ready(cluster, name):
                figure(
                    f"custom recipes: label + configmap + apply -> {name} Ready: {time.monotonic() - started[name]:.1f} s"
                )
                pending.discard(name)
        return not pending

    wait_for("both custom SpecialResources Ready", all_ready, 420, why=lambda: debug(cluster, *names))
    figure(f"custom recipes: all three SpecialResources Ready on one node: {time.monotonic() - t0:.1f} s")


def run_pod(cluster: LocalCluster, name: str, limits: dict[str, str], script: str) -> str:
    """A busybox pod of the sro runtime class asking for `limits`; its log once it has finished."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": APPS, "labels": {"app.kubernetes.io/managed-by": "sro-e2e"}},
        "spec": {
            "restartPolicy": "Never",
            "runtimeClassName": RUNTIME_HANDLER,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "work",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", script],
                    "resources": {"limits": limits},
                }
            ],
        },
    }
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    try:

        def phase() -> str:
            return str(get_json(cluster, "pod", name, "-n", APPS).get("status", {}).get("phase", ""))

        wait_for(
            f"pod {name} to finish",
            lambda: phase() in ("Succeeded", "Failed"),
            120,
            why=lambda: debug(cluster),
        )
        figure(f"custom recipes: pod asking for {limits} created -> finished: {time.monotonic() - t0:.1f} s")
        out = cluster.kubectl("logs", name, "-n", APPS, check=False)
        log = out.stdout + out.stderr
        assert phase() == "Succeeded", log
        return log
    finally:
        cluster.kubectl("delete", "pod", name, "-n", APPS, "--ignore-not-found", "--wait=false", check=False)


def test_all_three_ready_on_the_same_node(cluster: LocalCluster, ready: None) -> None:
    for name in (GPU_SR, FPGA.name, NIC.name):
        status = sr_doc(cluster, name)["status"]
        assert status["validatedCount"] == 1 and status["ready"] == "True", (name, status)
        assert [r["name"] for r in status["nodes"]] == [cluster.node_name], (name, status["nodes"])
        assert node(cluster)["metadata"]["labels"].get(validated_label(name)) == "true", name
    # every agent got the admitted recipe from the operator's ConfigMap, canonical JSON
    for recipe in CUSTOM.values():
        cm = get_json(cluster, "configmap", f"sro-{recipe.name}-recipe", "-n", NS)
        assert cm["data"]["recipe.json"] == json.dumps(recipe_to_dict(recipe), sort_keys=True)
        installed = Path(RUNTIME_ROOT) / "recipes" / f"{recipe.name}.json"
        assert json.loads(installed.read_text()) == recipe_to_dict(recipe), installed
    # the host: the simulated driver's nodes of both classes, character devices of one free major each
    fpga_nodes, nic_nodes = host_nodes(FPGA), host_nodes(NIC)
    assert fpga_nodes == ["/dev/xclmgmt0", "/dev/xclmgmt1", "/dev/dri/renderD128", "/dev/dri/renderD129"]
    assert nic_nodes == [f"/dev/sro-vf{i}" for i in range(8)] + ["/dev/sro-nicctl"], nic_nodes
    majors = {}
    for recipe, paths in ((FPGA, fpga_nodes), (NIC, nic_nodes)):
        modes = [os.stat(p) for p in paths]
        assert all(stat.S_ISCHR(m.st_mode) for m in modes), paths
        (majors[recipe.name],) = {os.major(m.st_rdev) for m in modes}
    gpu_major = os.major(os.stat("/dev/sro-simgpu0").st_rdev)
    assert len({*majors.values(), gpu_major}) == 3, (majors, gpu_major)  # no two drivers share a major
    # the node announces the cards and each pool of VFs, beside the GPUs
    wait_for(
        "the pools allocatable", lambda: allocatable(cluster, POOL_A) == 4, 60, why=lambda: debug(cluster)
    )
    assert allocatable(cluster, FPGA.resource) == 2
    assert allocatable(cluster, "example.com/vf-pool-b") == 4
    assert allocatable(cluster, SIMULATED_GPU.resource) >= 1


def test_a_pod_gets_exactly_its_fpga_card(cluster: LocalCluster, ready: None) -> None:
    script = (
        f'echo "VISIBLE=${FPGA.visible_devices_env}"; ls /dev /dev/dri 2>/dev/null | grep -E "^(xclmgmt|renderD)"; '
        "ls /lib | grep libxrt_core; xbutil examine; echo XBUTIL-RC=$?"
    )
    log = run_pod(cluster, "fpga-user", {FPGA.resource: "1"}, script)
    cards = re.findall(r"^xclmgmt(\d+)$", log, re.M)
    renders = re.findall(r"^renderD(\d+)$", log, re.M)
    assert len(cards) == 1 and renders == [str(128 + int(cards[0]))], log  # its card, both nodes
    visible = re.search(r"^VISIBLE=(\S+)$", log, re.M)
    assert visible and "," not in visible.group(1) and visible.group(1) != "all", log
    assert re.search(r"^libxrt_core\.so\.\S+$", log, re.M), log
    assert "XBUTIL-RC=0" in log and "SIMULATED" in log, log
    # the driver's xbutil lists exactly the granted card (it reads the recipe's visible-devices env)
    rows = re.findall(r"^\d+\s+ok\s+(/dev/\S+ /dev/\S+)\s", log, re.M)
    assert rows == [f"/dev/xclmgmt{cards[0]} /dev/dri/renderD{renders[0]}"], log


def test_a_pod_gets_exactly_two_vfs_of_its_pool(cluster: LocalCluster, ready: None) -> None:
    vfs = {i: os.stat(f"/dev/sro-vf{i}").st_rdev for i in range(8)}
    # every VF's node made anew in the container: only the two granted open past the device cgroup
    forge = "; ".join(
        f'mknod /dev/forged{i} c {os.major(rdev)} {os.minor(rdev)} && echo "FORGED {i} $(cat /dev/forged{i} 2>&1 >/dev/null)"'
        for i, rdev in vfs.items()
    )
    script = (
        f'echo "VISIBLE=${NIC.visible_devices_env}"; ls /dev | grep -E "^sro-(vf|nic)"; '
        f"ls /lib | grep libexnic; {forge}; exnic-ctl list; echo CTL-RC=$?"
    )
    log = run_pod(cluster, "vf-user", {POOL_A: "2"}, script)
    given = sorted(int(i) for i in re.findall(r"^sro-vf(\d+)$", log, re.M))
    assert len(given) == 2 and all(i < 4 for i in given), log  # two VFs, both of PF 0 (pool a)
    assert re.search(r"^sro-nicctl$", log, re.M) and re.search(r"^libexnic\.so\.\S+$", log, re.M), log
    forged = dict(re.findall(r"^FORGED (\d) (.*)$", log, re.M))
    assert sorted(forged) == [str(i) for i in range(8)], log
    refused = sorted(int(i) for i, err in forged.items() if "Operation not permitted" in err)
    assert refused == [i for i in range(8) if i not in given], log  # the cgroup: EPERM for the others
    assert "CTL-RC=0" in log, log
    listed = sorted(int(i) for i in re.findall(r"^\d+\s+ok\s+/dev/sro-vf(\d+)\s.*pf=0", log, re.M))
    assert listed == given, log  # exnic-ctl lists exactly the granted VFs, both of PF 0


def scrape_exporter(cluster: LocalCluster, sr: str) -> str:
    """The metrics of the SpecialResource's exporter pod on the node ("" until one is Ready)."""
    selector = f"sro.dev/specialresource={sr},sro.dev/state=monitoring"
    for p in get_json(cluster, "pods", "-n", NS, "-l", selector)["items"]:
        conds = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
        if conds.get("Ready") == "True" and p["status"].get("podIP"):
            try:
                with urllib.request.urlopen(f"http://{p['status']['podIP']}:9400/metrics", timeout=10) as r:
                    return str(r.read().decode())
            except OSError:
                return ""
    return ""


def test_the_exporters_publish_health_only(cluster: LocalCluster, ready: None) -> None:
    """`metrics: health`: each device's health under the resource it is announced as, no readings."""
    expected = {
        FPGA.name: {str(i): FPGA.resource for i in range(2)},
        NIC.name: {str(i): POOL_A if i < 4 else "example.com/vf-pool-b" for i in range(8)},
    }
    for name, want in expected.items():

        def exporting(sr: str = name) -> bool:
            return "sro_device_healthy{" in scrape_exporter(cluster, sr)

        wait_for(f"{name}'s exporter", exporting, 120, why=lambda: debug(cluster))
        text = scrape_exporter(cluster, name)
        healthy = [
            (dict(LABEL.findall(m.group(1))), m.group(2))
            for m in re.finditer(r"^sro_device_healthy\{(.*)\} (\S+)$", text, re.M)
        ]
        assert {lb["gpu"]: lb["resource"] for lb, _ in healthy} == want, text[-3000:]
        assert all(v == "1" and lb["simulated"] == "true" for lb, v in healthy), healthy
        readings = sorted({ln.split("{")[0] for ln in text.splitlines() if ln.startswith("DCGM_")})
        assert not readings, readings  # health only: no telemetry series at all


def test_sro_status_shows_all_three(cluster: LocalCluster, ready: None) -> None:
    out = sro(cluster, "status", "--no-logs")
    assert out.returncode == 0, out.stdout + out.stderr
    words = re.sub(r"[\s│┃]+", " ", out.stdout)
    for name, recipe in ((GPU_SR, GPU_SR), (FPGA.name, FPGA.name), (NIC.name, NIC.name)):
        assert f" {name} {recipe} " in words and f"{name}: nodes" in out.stdout, (name, out.stdout)


def test_a_recipe_with_an_unknown_field_is_degraded_naming_it(cluster: LocalCluster, ready: None) -> None:
    text = (EXAMPLES / "fpga" / "recipe.yaml").read_text().replace("name: example-fpga", f"name: {BAD}", 1)
    text += 'deviceNodes: ["/dev/xclmgmt{index}"]\n'  # a typo'd field: refused, never ignored
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": BAD_CM, "namespace": NS},
        "data": {"recipe.yaml": text},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(cm))
    bad = {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": BAD},
        "spec": {"recipe": BAD, "recipeConfigMap": BAD_CM},
    }
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(bad))
    try:
        took = wait_for(
            "the bad one Degraded",
            lambda: condition(sr_doc(cluster, BAD), "Degraded").get("status") == "True",
            60,
            why=lambda: debug(cluster, BAD),
        )
        figure(f"custom recipes: bad recipe applied -> Degraded: {took:.1f} s")
        degraded = condition(sr_doc(cluster, BAD), "Degraded")
        assert "deviceNodes" in degraded["message"] and BAD_CM in degraded["message"], degraded
        for kind in ("daemonsets", "configmaps", "pods"):
            items = get_json(cluster, kind, "-n", NS, "-l", f"sro.dev/specialresource={BAD}")["items"]
            assert not items, (kind, [i["metadata"]["name"] for i in items])
        assert cluster.kubectl("-n", NS, "get", "configmap", f"sro-{BAD}-recipe", check=False).returncode != 0
        assert not [k for k in node(cluster)["metadata"]["labels"] if k.startswith(f"sro.dev/{BAD}.")]
        assert all(is_ready(cluster, n) for n in (GPU_SR, FPGA.name, NIC.name)), debug(cluster, GPU_SR)
    finally:
        delete_custom(cluster, BAD)
        cluster.kubectl("-n", NS, "delete", "configmap", BAD_CM, "--ignore-not-found", check=False)
    figure(f"custom recipes: bad recipe tried and removed in {time.monotonic() - t0:.1f} s")


@pytest.mark.parametrize("example", list(CUSTOM))
def test_deleting_a_custom_special_resource_leaves_nothing(
    cluster: LocalCluster, ready: None, example: str
) -> None:
    recipe = CUSTOM[example]
    t0 = time.monotonic()
    cluster.kubectl("delete", "sr", recipe.name, "--timeout=180s")
    figure(f"custom recipes: {recipe.name} deleted (finalizer done) in {time.monotonic() - t0:.1f} s")
    cluster.kubectl("label", "node", cluster.node_name, f"{opt_in(recipe)}-")
    cluster.kubectl("-n", NS, "delete", "configmap", config_map(example), "--ignore-not-found")
    took = wait_for(
        f"nothing of {recipe.name} left",
        lambda: not leftovers(cluster, recipe),
        180,
        why=lambda: "\n".join(leftovers(cluster, recipe)),
    )
    figure(
        f"custom recipes: {recipe.name} deleted -> nothing left: {time.monotonic() - t0:.1f} s ({took:.1f} s after the finalizer)"
    )
    assert is_ready(cluster, GPU_SR), debug(cluster, GPU_SR)  # the simulated GPU beside it untouched
    assert Path("/dev/sro-simgpu0").exists()
