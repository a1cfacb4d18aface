"""The SpecialResource CustomResourceDefinition: its OpenAPI v3 schema, printer columns and status.

Why apart from the spec's parsing (`specialresource.py`): the schema is what the API server checks
before the operator sees anything (bad specs refused with the field named); `sro install` and
`deploy/` apply `crd()`, and the operator's own parsing only adds what a schema cannot say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    FEATURE_DISCOVERY,
    GROUP,
    KIND,
    MONITORING,
    PLURAL,
    RUNTIME,
    SHORT_NAME,
    VERSION,
)
from sro.api.specialresource import (
    DISABLED_BY_DEFAULT,
    IMAGE_TEMPLATE_VARS,
    PREEMPTION_POLICIES,
    PRIORITY_MAX,
    PRIORITY_MIN,
    STATE_FIELDS,
)

_STR = {"type": "string"}
_PORT = {"x-kubernetes-int-or-string": True}


def _probe_schema(kind: str) -> dict[str, Any]:
    """A container probe as Kubernetes spells it (one handler and its timings)."""
    return {
        "type": "object",
        "description": f"Replaces the container's {kind} probe, e.g. an httpGet on a health endpoint "
        "(hollow nodes: http://sro-hollow-rules:<port>/healthy/<state>, see `sro local up --hollow-nodes`).",
        "properties": {
            "httpGet": {
                "type": "object",
                "required": ["port"],
                "properties": {
                    "host": _STR,
                    "path": _STR,
                    "port": _PORT,
                    "scheme": {"type": "string", "enum": ["HTTP", "HTTPS"]},
                    "httpHeaders": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "value"],
                            "properties": {"name": _STR, "value": _STR},
                        },
                    },
                },
            },
            "tcpSocket": {
                "type": "object",
                "required": ["port"],
                "properties": {"host": _STR, "port": _PORT},
            },
            "exec": {"type": "object", "properties": {"command": {"type": "array", "items": _STR}}},
            "initialDelaySeconds": {"type": "integer", "minimum": 0},
            "periodSeconds": {"type": "integer", "minimum": 1},
            "timeoutSeconds": {"type": "integer", "minimum": 1},
            "successThreshold": {"type": "integer", "minimum": 1},
            "failureThreshold": {"type": "integer", "minimum": 1},
        },
    }


_VALIDATION_TIMEOUT = {
    "timeoutSeconds": {
        "type": "integer",
        "minimum": 0,
        "maximum": 86400,
        "description": "How long a validation pod may run before it is failed (its activeDeadlineSeconds; "
        "0: 300).",
    }
}


def _state_schema(
    description: str, enabled_default: bool, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    props: dict[str, Any] = {
        "enabled": {"type": "boolean", "default": enabled_default, "description": "Deploy this state."},
        "image": {"type": "string", "description": "Container image (default: the operator's own image)."},
        "imagePullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
        "args": {"type": "array", "items": _STR, "description": "Extra arguments for the container."},
        "env": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": _STR, "value": _STR},
            },
        },
        "resources": {
            "type": "object",
            "properties": {
                "requests": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": True}},
                "limits": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": True}},
            },
        },
        "readinessProbe": _probe_schema("readiness"),
        "livenessProbe": _probe_schema("liveness"),
    }
    props.update(extra or {})
    return {"type": "object", "description": description, "default": {}, "properties": props}


def spec_schema() -> dict[str, Any]:
    state_docs = {
        DRIVER: "The driver container, one DaemonSet per kernel version among the selected nodes (OnDelete).",
        DRIVER_VALIDATION: "A pod per node that checks the driver's device list against the backend.",
        RUNTIME: "Installs the OCI hook, the runtime handler's launcher and CDI specs under /var/lib/sro/runtime.",
        DEVICE_PLUGIN: "The kubelet device plugin announcing the recipe's extended resource.",
        DEVICE_PLUGIN_VALIDATION: "A pod per node that gets one device through the scheduler and uses it.",
        MONITORING: "The metrics exporter (dcgm-exporter's metrics, per pod), its Service, and with the "
        "Prometheus operator a ServiceMonitor and PrometheusRule; a Grafana dashboard ConfigMap.",
        FEATURE_DISCOVERY: "Ready once discovery has published the recipe's device labels on the node.",
    }
    extras: dict[str, dict[str, Any]] = {
        DRIVER: {
            "mode": {
                "type": "string",
                "enum": ["container", "host"],
                "default": "container",
                "description": "host: the driver is pre-installed on the nodes; nothing is deployed.",
            },
            "version": {"type": "string", "description": "Driver version ({version} in the image template)."},
            "imageTemplate": {
                "type": "string",
                "description": "Driver image per node; variables: "
                + ", ".join("{" + v + "}" for v in IMAGE_TEMPLATE_VARS)
                + " (from the node's NFD kernel and os_release labels).",
            },
            "devicesConfig": {"type": "string", "description": "simulated-gpu: the simulated devices YAML."},
            "upgradePolicy": upgrade_policy_schema(),
        },
        DEVICE_PLUGIN: {"config": {"type": "string", "description": "The plugin's config.yaml."}},
        DRIVER_VALIDATION: dict(_VALIDATION_TIMEOUT),
        DEVICE_PLUGIN_VALIDATION: {
            **_VALIDATION_TIMEOUT,
            "cudaSample": {
                "type": "string",
                "description": "nvidia-gpu: the CUDA program the workload check runs (default: vectorAdd "
                "when the image has it); set the image with devicePluginValidation.image.",
            },
        },
    }
    props: dict[str, Any] = {
        "recipe": {
            "type": "string",
            "minLength": 1,
            "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            "description": "A built-in recipe (simulated-gpu, nvidia-gpu) or the name of a custom one.",
        },
        "recipeConfigMap": {
            "type": "string",
            "description": "ConfigMap in sro-system whose recipe.yaml defines a custom recipe.",
        },
        "nodeSelector": {
            "type": "object",
            "additionalProperties": _STR,
            "description": "Node labels that must all match (default: the recipe's PCI match).",
        },
        "startupTaint": {
            "type": "boolean",
            "default": False,
            "description": "Taint matching nodes sro.dev/<name>.not-ready:NoSchedule until validated.",
        },
        "tolerations": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "description": "Added to every operand pod.",
        },
        "priorityClassName": {"type": "string", "description": "Priority class of the operand pods."},
        "customManifests": {
            "type": "string",
            "description": "ConfigMap in sro-system; keys <state>.<NNNN>_<name>.yaml add to or "
            "replace (same file name) a state's templates.",
        },
    }
    props["partitioning"] = partitioning_schema()
    for state, fld in STATE_FIELDS.items():
        props[fld] = _state_schema(state_docs[state], state not in DISABLED_BY_DEFAULT, extras.get(state))
    return {"type": "object", "required": ["recipe"], "properties": props}


def upgrade_policy_schema() -> dict[str, Any]:
    seconds = {"type": "integer", "minimum": 1, "maximum": 86400}
    selector = {
        "type": "string",
        "description": "Label selector: key=value, key!=value, key, !key, comma-separated.",
    }
    return {
        "type": "object",
        "description": "How a change of the driver rolls over the nodes, one node's state machine at a time: "
        "upgrade-required, cordoned, waiting-for-jobs, pods-evicted, driver-replaced, validated, "
        "uncordoned, done (or failed); see `sro upgrade status`.",
        "properties": {
            "autoUpgrade": {
                "type": "boolean",
                "default": True,
                "description": "false: nodes keep their driver and show upgrade-required.",
            },
            "maxParallelUpgrades": {
                "type": "integer",
                "minimum": 0,
                "default": 1,
                "description": "Nodes upgrading at once (0: no limit but maxUnavailable).",
            },
            "maxUnavailable": {
                "x-kubernetes-int-or-string": True,
                "pattern": "^(100|[1-9][0-9]?)%$|^[1-9][0-9]*$",
                "default": "25%",
                "description": "Nodes out of service at once: a count (at least 1) or a percentage (1% to 100%) "
                "of the selected nodes, rounded up.",
            },
            "paused": {
                "type": "boolean",
                "default": False,
                "description": "Start no node; a node past its evictions finishes (`sro upgrade pause|resume`).",
            },
            "timeoutSeconds": {
                **seconds,
                "default": 600,
                "description": "From driver replaced to validated; a node slower than this fails and goes back "
                "to its old driver, cordoned, and the rollout stops.",
            },
            "drain": {
                "type": "object",
                "description": "Pods using the device are always evicted; with enable, the pods matching podSelector too.",
                "properties": {
                    "enable": {"type": "boolean", "default": False},
                    "podSelector": selector,
                    "timeoutSeconds": {
                        **seconds,
                        "default": 300,
                        "description": "How long evictions may take.",
                    },
                    "deleteEmptyDir": {
                        "type": "boolean",
                        "default": False,
                        "description": "Evict pods with emptyDir volumes.",
                    },
                    "force": {
                        "type": "boolean",
                        "default": False,
                        "description": "Evict pods no controller recreates.",
                    },
                },
            },
            "waitForCompletion": {
                "type": "object",
                "description": "Pods on the node that must finish (Succeeded or Failed) before any eviction.",
                "properties": {
                    "podSelector": selector,
                    "timeoutSeconds": {
                        "type": "integer",
                        "minimum": 0,
                        "default": 0,
                        "description": "0: wait as long as they run.",
                    },
                },
            },
        },
    }


def partitioning_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "Keep other work off these nodes, rank work on them, cap what each namespace takes.",
        "properties": {
            "taint": {
                "type": "boolean",
                "default": False,
                "description": "Taint the nodes <resource>:NoSchedule; the API server's ExtendedResourceToleration "
                "admission plugin gives every pod requesting the resource the toleration.",
            },
            "priorities": {
                "type": "array",
                "description": "PriorityClasses this SpecialResource owns; pods name one in spec.priorityClassName.",
                "items": {
                    "type": "object",
                    "required": ["name", "value"],
                    "properties": {
                        "name": {"type": "string", "maxLength": 253},
                        "value": {"type": "integer", "minimum": PRIORITY_MIN, "maximum": PRIORITY_MAX},
                        "preemptionPolicy": {"type": "string", "enum": list(PREEMPTION_POLICIES)},
                        "description": _STR,
                    },
                },
            },
            "quotas": {
                "type": "array",
                "description": "Per namespace: ResourceQuota requests.<resource>, optionally a LimitRange max.",
                "items": {
                    "type": "object",
                    "required": ["namespace", "limit"],
                    "properties": {
                        "namespace": {"type": "string", "maxLength": 63},
                        "limit": {"type": "integer", "minimum": 0},
                        "maxPerContainer": {"type": "integer", "minimum": 1},
                        "resource": {"type": "string", "description": "Default: the recipe's resource."},
                    },
                },
            },
        },
    }


def status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": _STR,
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": _STR,
            "message": _STR,
            "lastTransitionTime": _STR,
        },
    }
    node_row = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": _STR,
            "state": {"type": "string", "description": "The last state ready on the node (validated: all)."},
            "failing": {"type": "string", "description": "The state that is not ready yet."},
            "reason": _STR,
            "message": _STR,
            "log": {"type": "string", "description": "Tail of the failing pod's log (at most 1 KiB)."},
            "since": _STR,
            "upgrade": {
                "type": "object",
                "description": "The node's driver upgrade while one is under way.",
                "properties": {
                    "state": _STR,
                    "from": _STR,
                    "to": _STR,
                    "reason": _STR,
                    "steps": {"type": "object", "additionalProperties": _STR},
                },
            },
        },
    }
    return {
        "type": "object",
        "properties": {
            "ready": _STR,
            "resource": _STR,
            "observedGeneration": {"type": "integer"},
            "nodeCount": {"type": "integer"},
            "validatedCount": {"type": "integer"},
            "stateCounts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "states": {
                "type": "object",
                "additionalProperties": _STR,
                "description": "Per state: enabled, disabled or not deployed.",
            },
            "conditions": {"type": "array", "items": condition},
            "quotas": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "namespace": _STR,
                        "resource": _STR,
                        "used": _STR,
                        "hard": _STR,
                        "problem": _STR,
                    },
                },
            },
            "nodes": {"type": "array", "items": node_row},
            "driverUpgrade": {
                "type": "object",
                "description": "The driver rollout: target version, nodes per upgrade state, what blocks it.",
                "properties": {
                    "target": _STR,
                    "revision": _STR,
                    "paused": {"type": "boolean"},
                    "autoUpgrade": {"type": "boolean"},
                    "nodes": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "blocked": _STR,
                },
            },
        },
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition document (apiextensions.k8s.io/v1)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}", "labels": {"app.kubernetes.io/managed-by": "sro"}},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"plural": PLURAL, "singular": KIND.lower(), "kind": KIND, "shortNames": [SHORT_NAME]},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
                        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodeCount"},
                        {"name": "Validated", "type": "integer", "jsonPath": ".status.validatedCount"},
                        {"name": "Recipe", "type": "string", "jsonPath": ".spec.recipe", "priority": 1},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": _STR,
                                "kind": _STR,
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }
