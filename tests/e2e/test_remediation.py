"""Self-healing GPU nodes on the real local cluster (issue 24): a fault becomes the node's
`GpuHealthy` condition, `spec.remediation` repairs the node, the limit holds a flapping node.

One installation and one simulated-gpu SpecialResource (`spec.remediation` set, the device plugin's
quiet period 2 s so a reset device is back at once) for the module; the tests run in file order,
each injecting its faults with `sro simulate fault` on the host (the simulated driver's fault
state, as a real driver's Xid) and cleaning its own up:
  1. reset-device: two Deployments' pods, each holding one GPU (A and B); Xid 79 on A → the
     condition False (`GpuLost`, naming A and the Xid) within seconds, the node cordoned by sro,
     only A's pod evicted (B's never terminating, same uid), a reset action pod on the node with
     the record's token, A's fault cleared by it, the node revalidated and uncordoned, the
     condition True again, the Deployment's pod running; events, status and the figures (fault →
     condition, fault → back in service) printed as FIGURE lines.
  2. an application Xid (13): nothing changes (condition, cordon, pods) within a bounded wait.
  3. maxAttempts 1: the fault after case 1's attempt is past the limit → the node left cordoned,
     record `limit`, a Warning `RemediationLimit`; `sro remediation retry NODE` → it goes again.
  4. dryRun: a fault on A → a `RemediationDryRun` event naming A's pod, the condition False, no
     cordon, no eviction.
  5. paused (`sro remediation pause`): a fault waits; `sro remediation resume` → it is repaired.
Why on the real cluster: the channel (device plugin → report file → discovery's NodeFeature →
operator → Node condition), the action pod and the revalidation are only whole here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.local.cluster import LocalCluster
from sro.operator.remediation.record import Record, remediation_annotation
from tests.e2e.helpers import condition, figure, get_json, sr_doc, sro, wait_for
from tests.e2e.remediation_support import (
    APPS,
    ATTEMPTS,
    DEVICES,
    NS,
    SR,
    TOKEN,
    Seen,
    all_back,
    back_in_service,
    clear_all,
    cordoned,
    debug,
    deployment,
    device_names,
    events,
    faults,
    gpu_condition,
    history,
    holds,
    idle_device,
    inject,
    node,
    patch_remediation,
    poll,
    reasons,
    record,
    record_of,
    report,
    running,
    sr_spec,
    wait_running,
    wall_time,
)

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(900)]


# ---- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def installed(cluster: LocalCluster, sro_image: str) -> Iterator[None]:
    out = cluster.kubectl("get", "sr", "-o", "json", check=False)
    for item in json.loads(out.stdout)["items"] if out.returncode == 0 else []:
        # an earlier run's SpecialResource of the recipe would hold its resource (ours refused); the
        # cluster lock means no one else's test is running
        if item["spec"].get("recipe") == SIMULATED_GPU.name:
            name = item["metadata"]["name"]
            cluster.kubectl("delete", "sr", name, "--ignore-not-found", "--timeout=180s", check=False)
    assert not cordoned(cluster), "the node is cordoned already (by someone else): nothing to test on"
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    yield
    clear_all()
    cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--timeout=120s", check=False)
    rec = record(cluster)
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=180s", check=False)
    left = cordoned(cluster)
    if left and rec is not None and rec.cordoned:
        cluster.kubectl("uncordon", cluster.node_name, check=False)  # sro's, left by a failed case
    out = sro(cluster, "uninstall", "--timeout", "180")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not left, f"deleting the SpecialResource left the node cordoned (record: {rec})"
    annotations = node(cluster)["metadata"].get("annotations", {})
    assert remediation_annotation(SR) not in annotations


@pytest.fixture(scope="module")
def ready(cluster: LocalCluster, installed: None) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(sr_spec()))
    took = wait_for(
        "the SpecialResource Ready",
        lambda: condition(sr_doc(cluster, SR), "Ready").get("status") == "True",
        300,
        why=lambda: debug(cluster),
    )
    figure(f"remediation e2e: SpecialResource Ready in {took:.1f} s")
    clear_all()


@pytest.fixture(scope="module")
def apps(cluster: LocalCluster, ready: None) -> None:
    cluster.kubectl("create", "namespace", APPS, check=False)
    for name in ("dev-a", "dev-b"):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(deployment(name)))
    a, b = wait_running(cluster, "dev-a"), wait_running(cluster, "dev-b")
    assert a.device != b.device


@pytest.fixture
def tidy(cluster: LocalCluster, apps: None) -> Iterator[None]:
    """Each case leaves no fault and the spec's defaults behind (and sro's cordon, should it fail)."""
    yield
    clear_all()
    patch_remediation(cluster, maxAttempts=ATTEMPTS, dryRun=False, paused=False)
    rec = record(cluster)
    if cordoned(cluster) and rec is not None and rec.state in ("limit", "failed"):
        out = sro(cluster, "remediation", "retry", cluster.node_name, "--specialresource", SR)
        assert out.returncode == 0, out.stdout + out.stderr
    wait_for("the node back in service", lambda: not cordoned(cluster), 120, why=lambda: debug(cluster))


# ---- the cases -----------------------------------------------------------------------------------
def test_reset_device_evicts_only_the_faulty_devices_pod_and_brings_the_node_back(
    cluster: LocalCluster, tidy: None
) -> None:
    a, b = wait_running(cluster, "dev-a"), wait_running(cluster, "dev-b")
    names_a, names_b = device_names(a.device), device_names(b.device)
    # the channel: the device plugin's report, on the NodeFeature discovery publishes, names the holders
    wait_for(
        "the health report naming both pods as their devices' holders",
        lambda: (
            holds(rep := report(cluster), names_a, f"{APPS}/{a.pod}")
            and holds(rep, names_b, f"{APPS}/{b.pod}")
        ),
        30,
        why=lambda: f"report: {report(cluster)}\n{debug(cluster)}",
    )
    wall = time.time()
    t0 = inject(a.device, 79)

    def lost() -> bool:
        c = gpu_condition(node(cluster))
        return c.get("status") == "False" and c.get("reason") == "GpuLost"

    to_condition = wait_for("GpuHealthy False (GpuLost)", lost, 30, every=0.2, why=lambda: debug(cluster))
    message = str(gpu_condition(node(cluster)).get("message", ""))
    assert "79" in message and any(n in message for n in names_a), message
    figure(f"remediation: Xid 79 injected -> GpuHealthy False (GpuLost): {to_condition:.1f} s")
    rep = report(cluster)
    assert rep is not None and any(f.device in names_a and 79 in f.xids for f in rep.faults), rep
    assert to_condition < 10, f"the condition took {to_condition:.1f} s"

    seen = Seen()
    last: dict[str, Any] = {}

    def done() -> bool:
        nonlocal last
        last = poll(cluster, seen, {"dev-b": b, "dev-a": a})
        return back_in_service(last)

    wait_for("the node repaired and back in service", done, 240, why=lambda: debug(cluster))
    back = time.monotonic() - t0
    a2 = wait_running(cluster, "dev-a")
    served = time.monotonic() - t0
    figure(
        f"remediation reset-device, one node: fault -> validated and uncordoned {back:.1f} s; "
        f"-> the evicted Deployment's pod running again {served:.1f} s"
    )
    rec = record_of(last)
    assert rec is not None, debug(cluster)
    start = rec.entered("cordoned") or rec.entered("evicting")
    assert start is not None, rec
    steps = sorted((t, s) for s in rec.steps if (t := rec.entered(s)) is not None)
    figure("remediation steps: " + ", ".join(f"{s} +{(t - start).total_seconds():.1f}s" for t, s in steps))
    # sro cordoned it and uncordoned it; only A's pod went, B's never terminated
    assert seen.cordoned, "the node was never seen cordoned"
    assert a.uid in seen.gone, f"A's pod was not evicted: {seen.gone}"
    assert b.uid not in seen.gone, seen.gone[b.uid]
    was = seen.under_way  # the fault as the record named it while under way
    assert was is not None and (was.fault_class, was.action, was.xids) == ("GpuLost", "reset-device", (79,))
    assert set(was.devices) & names_a, was
    assert f"{APPS}/{a.pod}" in rec.evicted and f"{APPS}/{b.pod}" not in rec.evicted, rec
    assert {"cordoned", "evicting", "resetting", "validating", "done"} <= set(rec.steps), rec.steps
    assert len(rec.attempts) == 1, rec
    b_now = running(cluster, "dev-b")
    assert b_now is not None and b_now.uid == b.uid, b_now
    assert a2.uid != a.uid
    # the reset: an action pod on the node, for the record's token and device A; the fault is gone
    resets = [
        p for p in seen.action_pods.values() if p["metadata"]["annotations"][TOKEN] == rec.steps["resetting"]
    ]
    assert resets, f"no action pod with token {rec.steps['resetting']}: {list(seen.action_pods)}"
    pod = resets[0]
    assert pod["spec"].get("nodeName") == cluster.node_name, pod["spec"].get("nodeName")
    assert set(pod["metadata"]["annotations"][DEVICES].split(",")) & names_a, pod["metadata"]["annotations"]
    assert pod["metadata"]["annotations"].get("sro.dev/remediation-action") == "reset", pod["metadata"]
    command = pod["spec"]["containers"][0].get("command", [])
    assert command[:3] == ["sro", "driver", "reset"] and f"--token={rec.steps['resetting']}" in command, (
        command
    )
    assert a.device not in faults(), faults()
    wait_for("device A back in allocatable", lambda: all_back(cluster), 30, why=lambda: debug(cluster))
    # validations ran again after the reset: the record waited in validating for them
    validating, finished = rec.entered("validating"), rec.entered("done")
    resetting = rec.entered("resetting")
    assert resetting is not None and validating is not None and finished is not None
    assert resetting <= validating <= finished, rec.steps
    selector = f"app.kubernetes.io/name=sro-validation,sro.dev/specialresource={SR}"
    anew = [
        p["metadata"]["name"]
        for p in get_json(cluster, "pods", "-n", NS, "-l", selector)["items"]
        if wall_time(p["metadata"]["creationTimestamp"]) >= int(validating.timestamp())
    ]
    assert anew, f"no validation pod created since the validating step ({validating})\n{debug(cluster)}"
    # the status showed it while it ran, and keeps the count
    assert seen.steps & {"cordoned", "evicting", "resetting", "validating"}, seen.steps
    assert seen.row.get("class") == "GpuLost" and seen.row.get("action") == "reset-device", seen.row
    summary = sr_doc(cluster, SR)["status"].get("remediation", {})
    assert summary.get("breaker", {}).get("tripped") is False, summary
    # events on the node and the SpecialResource
    on_node = reasons(cluster, cluster.node_name, wall)
    assert {"RemediationStarted", "RemediationResetting", "RemediationSucceeded"} <= on_node, on_node
    on_sr = reasons(cluster, SR, wall)
    assert "RemediationStarted" in on_sr, on_sr
    out = sro(cluster, "remediation", "status", SR)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "done 1" in out.stdout and "tripped: no" in out.stdout, out.stdout  # a done node: its count


def test_an_application_xid_changes_nothing(cluster: LocalCluster, tidy: None) -> None:
    a, b = wait_running(cluster, "dev-a"), wait_running(cluster, "dev-b")
    before = history(record(cluster))
    was = gpu_condition(node(cluster))
    inject(a.device, 13)
    seen = Seen()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        doc = poll(cluster, seen, {"dev-a": a, "dev-b": b})
        assert gpu_condition(doc).get("status", "True") == "True", debug(cluster)
        time.sleep(0.5)
    assert not seen.cordoned and not seen.gone and not seen.action_pods, seen
    assert history(record(cluster)) == before, record(cluster)
    now = gpu_condition(node(cluster))
    assert now.get("lastTransitionTime") == was.get("lastTransitionTime"), (was, now)
    assert a.device in faults()  # the driver has it: the node's health says it is none of its business


def test_past_max_attempts_the_node_stays_cordoned_until_retried(cluster: LocalCluster, tidy: None) -> None:
    a, b = wait_running(cluster, "dev-a"), wait_running(cluster, "dev-b")
    patch_remediation(cluster, maxAttempts=1)
    rec = record(cluster)
    if rec is None or not rec.attempts:  # run alone: one remediation first, to be within the window
        inject(idle_device(a, b), 79)
        wait_for(
            "a first remediation", lambda: back_in_service(node(cluster)), 180, why=lambda: debug(cluster)
        )
    device = idle_device(a, b)
    wall = time.time()
    t0 = inject(device, 79)
    seen = Seen()

    def held() -> bool:
        doc = poll(cluster, seen, {"dev-a": a, "dev-b": b})
        rec = record_of(doc)
        return rec is not None and rec.state == "limit" and bool(doc["spec"].get("unschedulable"))

    took = wait_for("the node held at its limit", held, 60, why=lambda: debug(cluster))
    figure(f"remediation: a fault past maxAttempts -> node held cordoned (limit): {took:.1f} s")
    rec = record(cluster)
    assert rec is not None and rec.cordoned and "maxAttempts" in rec.reason, rec
    assert not seen.gone and not seen.action_pods, seen  # nothing evicted, nothing reset
    warnings = [e for e in events(cluster, cluster.node_name, wall) if e["reason"] == "RemediationLimit"]
    assert warnings and warnings[0]["type"] == "Warning", warnings
    time.sleep(4)  # it stays so (a pass or two)
    assert cordoned(cluster) and (record(cluster) or Record("")).state == "limit"
    out = sro(cluster, "remediation", "status", SR)
    assert "limit" in out.stdout, out.stdout + out.stderr
    # a person looks and retries: the machine goes again and repairs it
    out = sro(cluster, "remediation", "retry", cluster.node_name, "--specialresource", SR)
    assert out.returncode == 0, out.stdout + out.stderr
    wait_for(
        "the retried node repaired", lambda: back_in_service(node(cluster)), 180, why=lambda: debug(cluster)
    )
    figure(f"remediation: limit -> retried -> back in service: {time.monotonic() - t0:.1f} s from the fault")
    assert device not in faults()
    rec = record(cluster)
    assert rec is not None and len(rec.attempts) == 1 and "resetting" in rec.steps, rec


def test_dry_run_says_what_it_would_do_and_does_nothing(cluster: LocalCluster, tidy: None) -> None:
    a, b = wait_running(cluster, "dev-a"), wait_running(cluster, "dev-b")
    patch_remediation(cluster, dryRun=True)
    before = history(record(cluster))
    wall = time.time()
    inject(a.device, 79)
    seen = Seen()

    def dry_runs() -> list[dict[str, Any]]:
        return [e for e in events(cluster, cluster.node_name, wall) if e["reason"] == "RemediationDryRun"]

    def said() -> bool:
        poll(cluster, seen, {"dev-a": a, "dev-b": b})
        return bool(dry_runs())

    wait_for("a RemediationDryRun event", said, 30, why=lambda: debug(cluster))
    dry = dry_runs()
    assert f"{APPS}/{a.pod}" in dry[-1]["message"] and f"{APPS}/{b.pod}" not in dry[-1]["message"], dry
    assert gpu_condition(node(cluster)).get("status") == "False"  # a fact, set in a dry run too
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        poll(cluster, seen, {"dev-a": a, "dev-b": b})
        time.sleep(0.5)
    assert not seen.cordoned and not seen.gone and not seen.action_pods, seen
    assert history(record(cluster)) == before, record(cluster)
    assert a.device in faults()  # nothing reset it
    # cleared before the dry run is turned off (else the real machine would start on it)
    clear_all()
    wait_for(
        "GpuHealthy True again",
        lambda: gpu_condition(node(cluster)).get("status") == "True",
        30,
        why=lambda: debug(cluster),
    )


def test_paused_waits_and_resume_repairs(cluster: LocalCluster, tidy: None) -> None:
    a, b = wait_running(cluster, "dev-a"), wait_running(cluster, "dev-b")
    out = sro(cluster, "remediation", "pause", SR)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sr_doc(cluster, SR)["spec"]["remediation"]["paused"] is True
    device = idle_device(a, b)
    inject(device, 79)
    seen = Seen()

    def waiting() -> bool:
        rec = record_of(poll(cluster, seen, {"dev-a": a, "dev-b": b}))
        return rec is not None and rec.state == "waiting" and "paused" in rec.reason

    wait_for("the node waiting (paused)", waiting, 30, why=lambda: debug(cluster))
    time.sleep(3)
    poll(cluster, seen, {"dev-a": a, "dev-b": b})
    assert not seen.cordoned and not seen.action_pods, seen
    assert (record(cluster) or Record("")).state == "waiting"
    t0 = time.monotonic()
    out = sro(cluster, "remediation", "resume", SR)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sr_doc(cluster, SR)["spec"]["remediation"]["paused"] is False

    def repaired() -> bool:
        return back_in_service(poll(cluster, seen, {"dev-a": a, "dev-b": b}))

    wait_for("the node repaired after resume", repaired, 180, why=lambda: debug(cluster))
    figure(f"remediation: resume -> back in service: {time.monotonic() - t0:.1f} s")
    assert seen.cordoned and seen.action_pods, seen
    assert not seen.gone, seen.gone  # the device was idle: no pod of ours evicted
    assert device not in faults()
