"""What sro's ClusterServiceVersion shows a reader of OperatorHub: the description, the icon, the
form's spec and status descriptors and the example SpecialResources.

Why apart from `bundle`: this is text and tables for people, edited for wording; `bundle` is the
logic that turns the install list into OLM's format.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from sro.api.names import GROUP, KIND, VERSION

ICON_SVG: Final = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64">'
    '<rect x="10" y="14" width="44" height="36" rx="4" fill="#2d6a4f"/>'
    '<rect x="18" y="22" width="28" height="20" rx="2" fill="#95d5b2"/>'
    '<g stroke="#2d6a4f" stroke-width="3">'
    '<path d="M18 8v6M26 8v6M34 8v6M42 8v6M18 50v6M26 50v6M34 50v6M42 50v6"/></g>'
    '<text x="32" y="37" font-family="sans-serif" font-size="10" text-anchor="middle" fill="#1b4332">sro</text>'
    "</svg>"
)

DESCRIPTION: Final = """\
sro (the Special Resource Operator) makes GPUs and other special hardware usable by workloads: a
`SpecialResource` names a recipe (`nvidia-gpu`, `simulated-gpu`, or a custom one) and the operator
walks the states driver, driver-validation, runtime, device-plugin, device-plugin-validation,
monitoring and feature-discovery on every matching node, each state starting on a node only once
the previous one is validated there.

On OpenShift the operator creates one SecurityContextConstraints per operand (privileged for the
driver only) with the `use` grant of each, and mirrors its SpecialResources into the
ClusterOperator `sro`.

Not in this bundle (OLM installs Deployments only): node feature discovery. Install the Node
Feature Discovery operator (the same `feature.node.kubernetes.io` labels), or sro's discovery:
`sro manifests render discovery --namespace NAMESPACE --image IMAGE | oc apply -f -`.
"""

# spec paths shown in the console's form, with OLM's UI descriptors
SPEC_DESCRIPTORS: Final[tuple[tuple[str, str, str, tuple[str, ...]], ...]] = (
    ("recipe", "Recipe", "nvidia-gpu, simulated-gpu, or a custom recipe's name.",
     ("urn:alm:descriptor:com.tectonic.ui:text",)),
    ("nodeSelector", "Node selector", "Nodes to deploy on (default: where discovery found the recipe's hardware).",
     ("urn:alm:descriptor:com.tectonic.ui:selector:core:v1:Node",)),
    ("startupTaint", "Startup taint", "Keep workloads off a node until its whole stack is validated.",
     ("urn:alm:descriptor:com.tectonic.ui:booleanSwitch",)),
    ("driver.version", "Driver version", "The driver version; a change starts a driver upgrade.",
     ("urn:alm:descriptor:com.tectonic.ui:text",)),
    ("driver.imageTemplate", "Driver image template",
     "Driver container image per node, e.g. registry.example/driver:{version}-{os_id}{os_version}.",
     ("urn:alm:descriptor:com.tectonic.ui:text",)),
    ("driver.upgradePolicy.autoUpgrade", "Automatic driver upgrades", "Upgrade nodes one by one when the driver changes.",
     ("urn:alm:descriptor:com.tectonic.ui:booleanSwitch",)),
    ("partitioning.taint", "Partitioning taint", "Taint the nodes with the extended resource's name.",
     ("urn:alm:descriptor:com.tectonic.ui:booleanSwitch",)),
    ("priorityClassName", "Operand priority class", "The priority class of the operand pods.",
     ("urn:alm:descriptor:io.kubernetes:PriorityClass",)),
    ("monitoring.enabled", "Monitoring", "Deploy the exporter and its dashboard.",
     ("urn:alm:descriptor:com.tectonic.ui:booleanSwitch",)),
)  # fmt: skip
STATUS_DESCRIPTORS: Final[tuple[tuple[str, str, str, tuple[str, ...]], ...]] = (
    ("conditions", "Conditions", "Ready, Progressing and Degraded, with reasons.",
     ("urn:alm:descriptor:io.kubernetes.conditions",)),
    ("ready", "Ready", "Every selected node is validated.", ("urn:alm:descriptor:text",)),
    ("nodeCount", "Nodes", "Nodes the SpecialResource selects.", ("urn:alm:descriptor:text",)),
    ("validatedCount", "Validated nodes", "Nodes whose whole stack is validated.", ("urn:alm:descriptor:text",)),
)  # fmt: skip
EXAMPLES: Final = (
    {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": "simulated-gpu"},
        "spec": {"recipe": "simulated-gpu", "startupTaint": True},
    },
    {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": "nvidia-gpu"},
        "spec": {
            "recipe": "nvidia-gpu",
            "driver": {
                "version": "550.90.07",
                "imageTemplate": "registry.example/driver:{version}-{os_id}{os_version}",
            },
        },
    },
)


def descriptors(rows: Iterable[tuple[str, str, str, tuple[str, ...]]]) -> list[dict[str, Any]]:
    return [
        {"path": path, "displayName": name, "description": text, "x-descriptors": list(xs)}
        for path, name, text, xs in rows
    ]
