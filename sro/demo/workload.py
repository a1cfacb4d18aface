"""The demo's workload pod and the check that it got its devices the way the stage line says (pure).

Why the pod's shape follows the node's runtime: the point of CDI (issue 23) is that a pod needs
nothing but its resource request. Where the node's container runtime reads CDI specs — the operator's
own rule (`sro.operator.cdiruntime.reads_cdi` on `status.nodeInfo.containerRuntimeVersion`, the
same rule that makes the device plugin answer with CDI names there) — the workload carries no
runtimeClassName and no env, and containerd injects the device nodes, the driver's libraries and
its tool from the node's live CDI spec. Only where the runtime reads no CDI (containerd 1.6) does it
name the `sro` runtime class, whose hook does the injecting. Deciding here from the same rule keeps
the demo from claiming a path the operator did not set up.

Why the check proves the path: a pod of the default runtime runs no sro hook, so the tool the
workload runs (simgpu-smi, nvidia-smi — in neither image) can only have come from the CDI spec; the
pod succeeding means it ran, and the two device nodes it listed are its grant. The check also reads
the pod back from the API, so a runtime class added on the way would be caught.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from sro.demo.flavours import SIMULATED, Flavour
from sro.local.layout import RUNTIME_HANDLER
from sro.operator.cdiruntime import reads_cdi

WORKLOAD = "sro-demo-workload"
GPUS = 2  # the workload asks for an NVLink pair
_RUNTIME = re.compile(r"^([a-z0-9.-]+)://v?(\d+(?:\.\d+)*)")


@dataclass(frozen=True)
class RuntimePath:
    cdi: bool  # the node's runtime reads CDI: the pod carries only its request
    runtime: str  # for people: "containerd 1.7.24"

    def words(self) -> str:
        if self.cdi:
            return f"devices through CDI by {self.runtime}, no runtime class"
        return f"through the {RUNTIME_HANDLER} runtime class ({self.runtime} reads no CDI)"


def runtime_path(runtime_version: str) -> RuntimePath:
    """How a pod on a node reporting `runtime_version` ("containerd://1.7.24~ds1") gets its devices."""
    m = _RUNTIME.match(runtime_version.strip().lower())
    shown = f"{m[1]} {m[2]}" if m else (runtime_version.strip() or "an unreported runtime")
    return RuntimePath(reads_cdi(runtime_version), shown)


def workload_pod(flavour: Flavour = SIMULATED, *, cdi: bool = True) -> dict[str, Any]:
    """The pod asking for two of the flavour's devices: nothing else where `cdi`, the runtime class where not."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "workload",
                "image": flavour.image,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", flavour.script],
                "resources": {"limits": {flavour.recipe.resource: str(GPUS)}},
            }
        ],
    }
    if not cdi:
        spec["runtimeClassName"] = RUNTIME_HANDLER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": WORKLOAD,
            "namespace": "default",
            "labels": {"app.kubernetes.io/managed-by": "sro"},
        },
        "spec": spec,
    }


def device_nodes(flavour: Flavour, listed: list[str]) -> list[str]:
    """The per-device nodes among the names the workload listed under /dev (not the control nodes)."""
    parts = re.split(r"(\{index\}|\{minor\})", flavour.recipe.device_node.rsplit("/", 1)[-1])
    pattern = "".join(r"\d+" if part in ("{index}", "{minor}") else re.escape(part) for part in parts)
    return [n for n in listed if re.fullmatch(pattern, n)]


def tool(flavour: Flavour) -> str:
    """The driver's tool the workload ends with (simgpu-smi, nvidia-smi)."""
    return shlex.split(flavour.script.rsplit(";", 1)[-1])[0]


def check(pod: dict[str, Any], output: str, flavour: Flavour, path: RuntimePath) -> tuple[list[str], str]:
    """(what is wrong, the evidence line) for the finished workload `pod` (as the API returns it),
    which printed `output`: its env line, its device nodes, then the tool's output."""
    problems: list[str] = []
    spec = pod.get("spec", {})
    runtime_class = spec.get("runtimeClassName")
    lines = output.splitlines()
    listed = lines[1].split() if len(lines) > 1 else []
    nodes = device_nodes(flavour, listed)
    env, _, visible = (lines[0] if lines else "").partition("=")
    phase = pod.get("status", {}).get("phase", "")
    if path.cdi:
        if runtime_class:
            problems.append(f"it carries runtimeClassName {runtime_class}")
        if any(c.get("env") or c.get("envFrom") for c in spec.get("containers", [])):
            problems.append("it carries env of its own")
    elif runtime_class != RUNTIME_HANDLER:
        problems.append(
            f"it should name runtimeClassName {RUNTIME_HANDLER}, it names {runtime_class or 'none'}"
        )
    if len(nodes) != GPUS:
        problems.append(f"it saw {len(nodes)} device nodes ({' '.join(nodes) or 'none'}), not {GPUS}")
    if len([v for v in visible.split(",") if v]) != GPUS:
        problems.append(f"{env or flavour.recipe.visible_devices_env} lists {visible or 'nothing'}")
    if phase != "Succeeded":
        problems.append(f"it ended {phase or 'in no phase'}: {tool(flavour)} did not run to the end")
    given = f"{' '.join(listed)}, {env} and {tool(flavour)}"
    if path.cdi:
        evidence = f"no runtimeClassName, no env; containerd gave it {given} from the node's CDI spec"
    else:
        evidence = f"runtimeClassName {RUNTIME_HANDLER}; the sro hook gave it {given}"
    return problems, evidence
