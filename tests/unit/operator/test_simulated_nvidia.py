"""nvidia-gpu on sro's simulated driver (`spec.driver.mode: simulated`), as the operator renders it.

The example examples/simulated-nvidia.yaml, reconciled over recorded nodes: only the nodes that opt in
with `sro.dev/nvidia-gpu.simulated=true` are selected (not the ones with NVIDIA's PCI labels); the
driver DaemonSet runs `sro driver simulate --personality nvidia` with CAP_MKNOD alone; every agent
(runtime, device plugin, exporter, validations, holder scan) has the driver root /run/nvidia/driver;
the validations run with `--simulated-driver`; every object says it is simulated. A custom recipe
asking for the mode is refused, saying what to set instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from sro.api.builtin_recipes import SIMULATED_NVIDIA_DRIVER_ROOT
from sro.api.crd import crd
from sro.api.names import driver_revision_label
from sro.api.recipes import NVIDIA_GPU
from sro.operator.admission import Admitted, admit
from sro.operator.observed import Observed, PodInfo, SpecialResourceInfo, pod_from_json
from sro.operator.plan import Plan
from sro.operator.reconcile import reconcile
from sro.operator.rendering import Context
from sro.operator.states import INPUTS_ANNOTATION, KERNEL_LABEL, STATES, ValidationState, skipped_note
from sro.operator.upgrade.revision import driver_revision
from sro.operator.upgrade.scan import scan_pod
from tests.schema_fit import fits
from tests.unit.operator.test_conflicts import CUSTOM_GPU, PCI_NVIDIA
from tests.unit.operator.test_reconcile import IMAGE, NOW, NS, cond, node

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "simulated-nvidia.yaml"
DOC = yaml.safe_load(EXAMPLE.read_text())
NAME = DOC["metadata"]["name"]
OPT_IN = "sro.dev/nvidia-gpu.simulated"
ROOT = "/run/nvidia/driver"


def example(
    spec: Mapping[str, Any] | None = None, name: str = NAME, created: str = ""
) -> SpecialResourceInfo:
    return SpecialResourceInfo(
        name=name, uid=f"uid-{name}", spec=spec or DOC["spec"], created=created or "2026-11-22T10:00:00Z"
    )


def nodes() -> list[Any]:
    return [
        node("sim", opt_in=False, **{OPT_IN: "true"}),
        node("real", opt_in=False, **{PCI_NVIDIA: "true"}),
        node("cpu", opt_in=False),
    ]


def plan_for(the_sr: SpecialResourceInfo | None = None, **kw: Any) -> Plan:
    obs = Observed(sr=the_sr or example(), nodes=tuple(nodes()), image=IMAGE, **kw)
    return reconcile(obs, NS, NOW)


def context() -> Context:
    sr = example()
    admitted = admit(Observed(sr=sr, nodes=(), image=IMAGE), NS)
    assert isinstance(admitted, Admitted)
    return Context(sr.name, sr.uid, admitted.spec, admitted.recipe, NS, IMAGE)


def by_state(plan: Plan, state: str, kind: str = "DaemonSet") -> dict[str, Any]:
    found = [o for o in plan.apply if o["kind"] == kind and o["metadata"]["labels"]["sro.dev/state"] == state]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def pod_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"])


def command(obj: Mapping[str, Any]) -> list[str]:
    return list(pod_spec(obj)["containers"][0]["command"])


def host_paths(obj: Mapping[str, Any]) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod_spec(obj).get("volumes", []) if "hostPath" in v}


def affinity_keys(obj: Mapping[str, Any]) -> list[set[str]]:
    terms = pod_spec(obj)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [{e["key"] for e in t["matchExpressions"]} for t in terms["nodeSelectorTerms"]]


def validation_pods(ctx: Context) -> dict[str, dict[str, Any]]:
    return {s.name: s.pod(ctx, "sim", "inputs") for s in STATES if isinstance(s, ValidationState)}


def test_the_example_fits_the_crd_schema_and_parses() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert fits(schema["properties"]["spec"], DOC["spec"], "spec") == []
    ctx = context()
    assert ctx.spec.driver.mode == "simulated" and ctx.simulated_driver
    assert all(ctx.spec.state(s.name).enabled for s in STATES), "the example enables every state"
    assert ctx.recipe.driver_root == ROOT == SIMULATED_NVIDIA_DRIVER_ROOT
    # the same recipe otherwise: nvidia.com/gpu through NVML, NVIDIA's env and device nodes
    assert ctx.recipe.backend == NVIDIA_GPU.backend == "nvml"
    assert (ctx.recipe.resource, ctx.recipe.device_node) == (NVIDIA_GPU.resource, NVIDIA_GPU.device_node)


def test_only_the_nodes_that_opt_in_are_selected() -> None:
    plan = plan_for()
    assert [r.name for r in plan.rows] == ["sim"]
    assert plan.status["resource"] == "nvidia.com/gpu"
    assert cond(plan, "Degraded")["status"] == "False"
    driver = by_state(plan, "driver")
    assert affinity_keys(driver) == [{KERNEL_LABEL, OPT_IN, "sro.dev/simulated-nvidia.driver-revision"}]
    assert OPT_IN in plan.label_keys and PCI_NVIDIA not in plan.label_keys


def test_the_driver_is_the_simulated_one_with_the_nvidia_personality() -> None:
    plan = plan_for()
    driver = by_state(plan, "driver")
    container = pod_spec(driver)["containers"][0]
    assert container["image"] == IMAGE  # the operator's own image, no driver image template
    assert command(driver) == [
        "sro",
        "driver",
        "simulate",
        "--config=/etc/sro/driver/devices.yaml",
        "--personality=nvidia",
        "--hold",
        f"--driver-root=/host{ROOT}",
        "--dev-root=/host/dev",
        "--driver-version=550.90.07",
    ]
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["MKNOD"]} and "privileged" not in sc
    assert host_paths(driver) == {"driver-root": ROOT, "dev": "/dev"}
    assert container["readinessProbe"]["exec"]["command"][-1] == f"/host{ROOT}/.ready"
    # the devices come from spec.driver.devicesConfig, in the DaemonSet's ConfigMap
    config = by_state(plan, "driver", kind="ConfigMap")
    assert config["metadata"]["name"] == driver["metadata"]["name"]
    assert config["data"]["devices.yaml"].strip() == DOC["spec"]["driver"]["devicesConfig"].strip()
    assert "personality: nvidia" in config["data"]["devices.yaml"]


def test_every_agent_has_the_simulated_driver_root() -> None:
    plan = plan_for()
    runtime = by_state(plan, "runtime")
    assert f"--driver-root={ROOT}" in command(runtime)
    assert host_paths(runtime)["driver-root"] == ROOT
    plugin = by_state(plan, "device-plugin")
    assert "--recipe=nvidia-gpu" in command(plugin) and "--driver-root=/driver-root" in command(plugin)
    assert host_paths(plugin)["driver-root"] == ROOT
    exporter = by_state(plan, "monitoring")
    assert host_paths(exporter)["driver-root"] == ROOT
    for agent in (plugin, exporter):
        # NVML lists the GPUs whose nodes it has: the `sro` class's hook gives them all
        assert pod_spec(agent)["runtimeClassName"] == "sro"
        env = {e["name"]: e.get("value") for e in pod_spec(agent)["containers"][0]["env"]}
        assert env["SRO_MANAGEMENT_DEVICES"] == "all"
    ctx = context()
    pods = validation_pods(ctx)
    assert host_paths(pods["driver-validation"])["driver-root"] == ROOT
    assert host_paths(scan_pod(ctx, "sim", "inputs"))["driver-root"] == ROOT


def test_the_validations_know_the_driver_is_simulated() -> None:
    pods = validation_pods(context())
    driver = pods["driver-validation"]
    assert command(driver) == [
        "sro",
        "validate",
        "driver",
        "--recipe=nvidia-gpu",
        "--simulated-driver",
        "--driver-root=/driver-root",
        "--dev-root=/host-dev",
        "--termination-log=/dev/termination-log",
    ]
    # it opens no device (the simulated NVML reads its state): unprivileged, as nobody
    assert pod_spec(driver)["serviceAccountName"] == "sro-validation"
    assert pod_spec(driver)["securityContext"]["runAsUser"] == 65534
    assert "privileged" not in pod_spec(driver)["containers"][0]["securityContext"]
    workload = pods["device-plugin-validation"]
    assert command(workload) == [
        "sro",
        "validate",
        "workload",
        "--recipe=nvidia-gpu",
        "--simulated-driver",
        "--termination-log=/dev/termination-log",
    ]
    assert pod_spec(workload)["runtimeClassName"] == "sro"
    assert pod_spec(workload)["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_every_object_says_it_is_simulated() -> None:
    plan = plan_for()
    ctx = context()
    objects: Sequence[Mapping[str, Any]] = [
        *plan.apply,
        *validation_pods(ctx).values(),
        scan_pod(ctx, "sim", "inputs"),
    ]
    for obj in objects:
        assert obj["metadata"]["labels"].get("sro.dev/simulated") == "true", obj["metadata"]["name"]
        if obj["kind"] in ("DaemonSet", "Deployment"):
            assert obj["spec"]["template"]["metadata"]["labels"]["sro.dev/simulated"] == "true"


def test_simulated_mode_is_refused_for_a_custom_recipe() -> None:
    spec = {"recipe": "my-gpu", "recipeConfigMap": "my-gpu", "driver": {"mode": "simulated"}}
    plan = plan_for(example(spec, name="mine"), custom_recipe=CUSTOM_GPU)
    degraded = cond(plan, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "SpecInvalid"
    message = degraded["message"]
    assert message.startswith("spec.driver.mode: simulated")
    assert "'my-gpu'" in message and "container" in message and "host" in message
    assert not plan.apply and not plan.deployable


def test_a_simulated_driver_holds_only_its_opted_in_nodes() -> None:
    """An older SpecialResource on the simulated driver claims nvidia.com/gpu on the nodes that opt
    in, not on the nodes with NVIDIA's PCI labels: a real nvidia-gpu deploys there beside it."""
    older = example(created="2026-11-22T09:00:00Z")
    real = SpecialResourceInfo(
        name="real",
        uid="uid-real",
        spec={"recipe": "nvidia-gpu", "driver": {"mode": "host"}},
        created=NOW.isoformat(),
    )
    plan = plan_for(real, others=(older,))
    assert [r.name for r in plan.rows] == ["real"] and plan.deployable
    assert not [n for n in plan.status["nodes"] if n.get("state") == "refused"]
    # and a later one on the simulated driver is refused on the node the older one holds
    later = example(name="later", created=NOW.isoformat())
    refused = plan_for(later, others=(older,))
    assert not refused.deployable
    assert "'simulated-nvidia' already manages nvidia.com/gpu" in cond(refused, "Degraded")["message"]


VERDICT = (
    "workload validation passed (5 checks): recipe nvidia-gpu, SIMULATED driver, NVIDIA_VISIBLE_DEVICES=GPU-1\n"
    "SKIP device cgroup: cannot create a probe node c 195:200 (no CAP_MKNOD)\n"
    "SKIP cuda sample: no CUDA on a simulated driver (the driver is sro's simulated one: nothing runs CUDA)"
)


def walked_pods(ctx: Context, verdict: str = VERDICT) -> tuple[PodInfo, ...]:
    """Every state's pod on `sim`, ready; the validations Succeeded, the workload one with `verdict`."""
    rev = driver_revision(ctx)
    pods: list[PodInfo] = [
        PodInfo(
            name=f"{s}-sim", node="sim", state=s, uid=f"{s}-uid", phase="Running", ready=True, revision=rev
        )
        for s in ("driver", "runtime", "device-plugin", "monitoring")
    ]
    for state in STATES:
        if isinstance(state, ValidationState):
            pods.append(
                PodInfo(
                    name=state.pod_name(ctx, "sim"),
                    node="sim",
                    state=state.name,
                    uid=f"{state.name}-uid",
                    phase="Succeeded",
                    annotations={INPUTS_ANNOTATION: state.inputs(ctx, "sim", pods)},
                    verdict=verdict
                    if state.name == "device-plugin-validation"
                    else "driver validation passed",
                )
            )
    return tuple(pods)


def test_the_skipped_cuda_check_shows_in_the_node_row() -> None:
    ctx = context()
    sim = node("sim", opt_in=False, **{OPT_IN: "true", driver_revision_label(NAME): driver_revision(ctx)})
    ready = replace(sim, labels={**sim.labels, "nvidia.com/gpu.count": "4"})
    obs = Observed(sr=example(), nodes=(ready,), pods=walked_pods(ctx), image=IMAGE)
    plan = reconcile(obs, NS, NOW)
    (row,) = plan.status["nodes"]
    assert row["state"] == "validated", row
    assert row["note"] == (
        "device-plugin-validation: device cgroup: cannot create a probe node c 195:200 (no CAP_MKNOD); "
        "cuda sample: no CUDA on a simulated driver (the driver is sro's simulated one: nothing runs CUDA)"
    )
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert fits(schema, plan.status, "status", empty_is_null=True) == []
    # nothing skipped: no note
    quiet = reconcile(
        replace(obs, pods=walked_pods(ctx, verdict="workload validation passed (6 checks)")), NS, NOW
    )
    assert "note" not in quiet.status["nodes"][0]


def test_the_verdict_of_a_finished_pod_is_read() -> None:
    doc = {
        "metadata": {"name": "p", "labels": {"sro.dev/state": "device-plugin-validation"}},
        "spec": {"nodeName": "sim"},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 0, "message": VERDICT}}}],
        },
    }
    assert pod_from_json(doc).verdict == VERDICT
    failed = {
        **doc,
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 1, "message": "x"}}}],
        },
    }
    assert pod_from_json(failed).verdict == "" and pod_from_json(failed).message == "x"


def test_the_simulated_recipe_keeps_its_rows_as_they_were() -> None:
    """simulated-gpu skips CUDA by nature: its validated rows say nothing more than before."""
    sr = SpecialResourceInfo(name="gpus", uid="uid-gpus", spec={"recipe": "simulated-gpu"})
    admitted = admit(Observed(sr=sr, nodes=(), image=IMAGE), NS)
    assert isinstance(admitted, Admitted)
    ctx = Context(sr.name, sr.uid, admitted.spec, admitted.recipe, NS, IMAGE)
    assert skipped_note(ctx, VERDICT) == ""
    assert skipped_note(context(), VERDICT).startswith("device cgroup: cannot create")
