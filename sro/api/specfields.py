"""The SpecialResource spec's fields, once: name, type, default, pattern/enum, bounds, description.

Why one table: the CRD's OpenAPI schema (`sro.api.crd`) is rendered from it and the operator's parser
(`sro.api.specparsing`) reads every field through it, so what the API server refuses and what the
operator refuses cannot drift apart (tests/unit/test_api_spec_fields.py holds them to it).
"""

from __future__ import annotations

from typing import Final

from sro.api.builtin_recipes import SIMULATED_NVIDIA_DRIVER_ROOT
from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    FEATURE_DISCOVERY,
    MONITORING,
    RUNTIME,
    simulated_driver_opt_in_label,
)
from sro.api.openapi import ARRAY, BOOLEAN, INT_OR_STRING, INTEGER, OBJECT, STRING, Field
from sro.api.specialresource import (
    DEFAULT_REMEDIATION_ACTIONS,
    DISABLED_BY_DEFAULT,
    FAULT_CLASS_FIELDS,
    IMAGE_TEMPLATE_VARS,
    PREEMPTION_POLICIES,
    PRIORITY_MAX,
    PRIORITY_MIN,
    REMEDIATION_ACTIONS,
    STATE_FIELDS,
)

DAY: Final = 86_400
QUOTA_MAX: Final = 1_000_000  # the reader's ceiling on a quota's counts
PARALLEL_UPGRADES_MAX: Final = 10_000  # the reader's ceiling on maxParallelUpgrades
DNS_LABEL: Final = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# an object name (a ConfigMap's): DNS-1123 subdomain, so it never walks out of its API path
DNS_SUBDOMAIN: Final = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
IMAGE_TEMPLATE_MAX: Final = 512  # characters of spec.driver.imageTemplate
IMAGE_MAX: Final = 1024  # characters of the image it fills in, at the most
VERSION_MAX: Final = 128  # characters of spec.driver.version
COUNT_OR_PERCENT: Final = "^(100|[1-9][0-9]?)%$|^[1-9][0-9]*$"
DRIVER_MODES: Final = ("container", "host", "simulated")  # spec.driver.mode
DURATION: Final = "^[1-9][0-9]{0,5}[smh]$"  # spec.remediation.window: 90s, 30m, 1h
WINDOW_MAX: Final = 7 * DAY  # the reader's ceiling on spec.remediation.window
ATTEMPTS_MAX: Final = 1_000  # the reader's ceiling on spec.remediation.maxAttempts


def _strings(name: str, description: str = "") -> Field:
    return Field(name, ARRAY, description, items=Field("", STRING))


def _name_value(value_required: bool) -> Field:
    """`{name, value}` items: env variables, HTTP headers."""
    return Field(
        "",
        OBJECT,
        fields=(Field("name", STRING, required=True), Field("value", STRING, required=value_required)),
    )


def _probe(kind: str) -> Field:
    """A container probe as Kubernetes spells it (one handler and its timings)."""
    port = Field("port", INT_OR_STRING, required=True)
    return Field(
        f"{kind}Probe",
        OBJECT,
        f"Replaces the container's {kind} probe, e.g. an httpGet on the operand's health endpoint.",
        fields=(
            Field(
                "httpGet",
                OBJECT,
                fields=(
                    Field("host", STRING),
                    Field("path", STRING),
                    port,
                    Field("scheme", STRING, enum=("HTTP", "HTTPS")),
                    Field("httpHeaders", ARRAY, items=_name_value(True)),
                ),
            ),
            Field("tcpSocket", OBJECT, fields=(Field("host", STRING), port)),
            Field("exec", OBJECT, fields=(_strings("command"),)),
            Field("initialDelaySeconds", INTEGER, minimum=0, ceiling=DAY),
            Field("periodSeconds", INTEGER, minimum=1, ceiling=DAY),
            Field("timeoutSeconds", INTEGER, minimum=1, ceiling=DAY),
            Field("successThreshold", INTEGER, minimum=1, ceiling=DAY),
            Field("failureThreshold", INTEGER, minimum=1, ceiling=DAY),
        ),
    )


def _quantities(name: str) -> Field:
    return Field(name, OBJECT, values=Field("", INT_OR_STRING))


_VALIDATION_TIMEOUT = Field(
    "timeoutSeconds",
    INTEGER,
    "How long a validation pod may run before it is failed (its activeDeadlineSeconds; 0: 300).",
    minimum=0,
    maximum=DAY,
    absent=0,
)
_SELECTOR = Field("podSelector", STRING, "Label selector: key=value, key!=value, key, !key, comma-separated.")

UPGRADE_POLICY: Final = Field(
    "upgradePolicy",
    OBJECT,
    "How a change of the driver rolls over the nodes, one node's state machine at a time: "
    "upgrade-required, cordoned, waiting-for-jobs, pods-evicted, driver-replaced, validated, "
    "uncordoned, done (or failed); see `sro upgrade status`.",
    fields=(
        Field(
            "autoUpgrade", BOOLEAN, "false: nodes keep their driver and show upgrade-required.", default=True
        ),
        Field(
            "maxParallelUpgrades",
            INTEGER,
            "Nodes upgrading at once (0: no limit but maxUnavailable).",
            minimum=0,
            ceiling=PARALLEL_UPGRADES_MAX,
            default=1,
        ),
        Field(
            "maxUnavailable",
            INT_OR_STRING,
            "Nodes out of service at once: a count (at least 1) or a percentage (1% to 100%) "
            "of the selected nodes, rounded up.",
            pattern=COUNT_OR_PERCENT,
            default="25%",
        ),
        Field(
            "paused",
            BOOLEAN,
            "Start no node; a node past its evictions finishes (`sro upgrade pause|resume`).",
            default=False,
        ),
        Field(
            "timeoutSeconds",
            INTEGER,
            "From driver replaced to validated; a node slower than this fails and goes back "
            "to its old driver, cordoned, and the rollout stops.",
            minimum=1,
            maximum=DAY,
            default=600,
        ),
        Field(
            "drain",
            OBJECT,
            "Pods using the device are always evicted; with enable, the pods matching podSelector too.",
            fields=(
                Field("enable", BOOLEAN, default=False),
                _SELECTOR,
                Field(
                    "timeoutSeconds",
                    INTEGER,
                    "How long evictions may take.",
                    minimum=1,
                    maximum=DAY,
                    default=300,
                ),
                Field("deleteEmptyDir", BOOLEAN, "Evict pods with emptyDir volumes.", default=False),
                Field("force", BOOLEAN, "Evict pods no controller recreates.", default=False),
            ),
        ),
        Field(
            "waitForCompletion",
            OBJECT,
            "Pods on the node that must finish (Succeeded or Failed) before any eviction.",
            fields=(
                _SELECTOR,
                Field(
                    "timeoutSeconds",
                    INTEGER,
                    "0: wait as long as they run.",
                    minimum=0,
                    ceiling=DAY,
                    default=0,
                ),
            ),
        ),
    ),
)

PARTITIONING: Final = Field(
    "partitioning",
    OBJECT,
    "Keep other work off these nodes, rank work on them, cap what each namespace takes.",
    fields=(
        Field(
            "taint",
            BOOLEAN,
            "Taint the nodes <resource>:NoSchedule; the API server's ExtendedResourceToleration "
            "admission plugin gives every pod requesting the resource the toleration.",
            default=False,
        ),
        Field(
            "priorities",
            ARRAY,
            "PriorityClasses this SpecialResource owns; pods name one in spec.priorityClassName.",
            items=Field(
                "",
                OBJECT,
                fields=(
                    Field("name", STRING, max_length=253, required=True),
                    Field("value", INTEGER, minimum=PRIORITY_MIN, maximum=PRIORITY_MAX, required=True),
                    Field(
                        "preemptionPolicy", STRING, enum=PREEMPTION_POLICIES, absent=PREEMPTION_POLICIES[0]
                    ),
                    Field("description", STRING),
                ),
            ),
        ),
        Field(
            "quotas",
            ARRAY,
            "Per namespace: ResourceQuota requests.<resource>, optionally a LimitRange max.",
            items=Field(
                "",
                OBJECT,
                fields=(
                    Field("namespace", STRING, max_length=63, required=True),
                    Field("limit", INTEGER, minimum=0, ceiling=QUOTA_MAX, required=True),
                    Field("maxPerContainer", INTEGER, minimum=1, ceiling=QUOTA_MAX),
                    Field("resource", STRING, "Default: the recipe's resource."),
                ),
            ),
        ),
    ),
)

_ACTION_DOCS: Final = {
    "XidFatal": "A fatal driver or firmware error (Xid 46, 61, 62, 74, 119, 120, ...).",
    "GpuLost": "The GPU fell off the bus (Xid 79).",
    "EccUncorrectable": "An uncorrectable memory error (Xid 48, 95, 140).",
    "RowRemapFailure": "The GPU could not remap a bad memory row (Xid 64).",
    "Thermal": "The GPU is over its slowdown temperature (reported from telemetry, no Xid).",
}

REMEDIATION: Final = Field(
    "remediation",
    OBJECT,
    "What the operator does about a node whose GPU fails: the node's GpuHealthy condition names "
    "the fault class, the class's action repairs the node (none; restart-workload: evict the pods "
    "holding the faulty devices; reset-device: cordon, evict the devices' users, reset them, "
    "revalidate, uncordon; drain-and-reset: every pod using the resource leaves first; reboot: "
    "drain, then reboot the node), within a circuit breaker; see `sro remediation status`. "
    "Absent: nothing of it (not even the condition); `remediation: {}` turns it on with the defaults.",
    fields=(
        Field(
            "actions",
            OBJECT,
            "Per fault class, the action (the GpuHealthy condition's reason is the class).",
            default={},
            fields=tuple(
                Field(
                    fld,
                    STRING,
                    f"{cls}: {_ACTION_DOCS[cls]}",
                    enum=REMEDIATION_ACTIONS,
                    default=DEFAULT_REMEDIATION_ACTIONS[cls],
                )
                for cls, fld in FAULT_CLASS_FIELDS.items()
            ),
        ),
        Field(
            "maxConcurrentNodes",
            INTEGER,
            "Nodes under remediation at once.",
            minimum=1,
            ceiling=PARALLEL_UPGRADES_MAX,
            default=1,
        ),
        Field(
            "maxUnavailable",
            INT_OR_STRING,
            "The circuit breaker: nodes of this SpecialResource out of service at once (under "
            "remediation, or cordoned by sro for any reason), a count (at least 1) or a percentage "
            "(1% to 100%) rounded up; a node past it waits.",
            pattern=COUNT_OR_PERCENT,
            default="25%",
        ),
        Field(
            "maxAttempts",
            INTEGER,
            "Remediations of one node within window; past them the node is left cordoned "
            "(RemediationLimit) for a person to look at (`sro remediation retry NODE`).",
            minimum=1,
            ceiling=ATTEMPTS_MAX,
            default=3,
        ),
        Field(
            "window",
            STRING,
            "The span maxAttempts counts in: a number and s, m or h (at most 168h).",
            pattern=DURATION,
            default="1h",
        ),
        Field("dryRun", BOOLEAN, "Say in events what would be done; do nothing.", default=False),
        Field(
            "paused",
            BOOLEAN,
            "Start no remediation; a node under way finishes (`sro remediation pause|resume`).",
            default=False,
        ),
    ),
)

_STATE_DOCS: Final = {
    DRIVER: "The driver container, one DaemonSet per kernel version among the selected nodes (OnDelete).",
    DRIVER_VALIDATION: "A pod per node that checks the driver's device list against the backend.",
    RUNTIME: "Installs the OCI hook, the runtime handler's launcher and CDI specs under /var/lib/sro/runtime.",
    DEVICE_PLUGIN: "The kubelet device plugin announcing the recipe's extended resource.",
    DEVICE_PLUGIN_VALIDATION: "A pod per node that gets one device through the scheduler and uses it.",
    MONITORING: "The metrics exporter (dcgm-exporter's metrics, per pod), its Service, and with the "
    "Prometheus operator a ServiceMonitor and PrometheusRule; a Grafana dashboard ConfigMap.",
    FEATURE_DISCOVERY: "Ready once discovery has published the recipe's device labels on the node.",
}
# What a state has beyond every state's fields.
_STATE_EXTRAS: Final[dict[str, tuple[Field, ...]]] = {
    DRIVER: (
        Field(
            "mode",
            STRING,
            "container: a driver container per node (imageTemplate); host: the driver is "
            "pre-installed on the nodes, nothing is deployed; simulated: sro's SIMULATED driver from "
            "the operator's image, devices from devicesConfig; for nvidia-gpu its NVIDIA personality "
            "(/dev/nvidia*, a libnvidia-ml.so.1 and nvidia-smi serving simulated GPUs, driver root "
            f"{SIMULATED_NVIDIA_DRIVER_ROOT}) on the nodes labelled "
            f"{simulated_driver_opt_in_label('nvidia-gpu')}=true; simulated-gpu is always simulated "
            "(the same as container); not for custom recipes.",
            enum=DRIVER_MODES,
            default="container",
        ),
        Field("version", STRING, "Driver version ({version} in the image template).", max_length=VERSION_MAX),
        Field(
            "imageTemplate",
            STRING,
            "Driver image per node; variables: "
            + ", ".join("{" + v + "}" for v in IMAGE_TEMPLATE_VARS)
            + " (from the node's NFD kernel and os_release labels), bare: no format spec or conversion.",
            max_length=IMAGE_TEMPLATE_MAX,
        ),
        Field(
            "devicesConfig",
            STRING,
            "simulated-gpu, mode simulated or a custom simulated recipe: the simulated devices YAML "
            "(sro driver simulate --config; a custom recipe's class config: examples/fpga/devices.yaml).",
        ),
        UPGRADE_POLICY,
    ),
    DEVICE_PLUGIN: (Field("config", STRING, "The plugin's config.yaml."),),
    DRIVER_VALIDATION: (_VALIDATION_TIMEOUT,),
    DEVICE_PLUGIN_VALIDATION: (
        _VALIDATION_TIMEOUT,
        Field(
            "cudaSample",
            STRING,
            "nvidia-gpu: the CUDA program the workload check runs (default: vectorAdd "
            "when the image has it); set the image with devicePluginValidation.image.",
        ),
    ),
}


def _state(state: str) -> Field:
    return Field(
        STATE_FIELDS[state],
        OBJECT,
        _STATE_DOCS[state],
        default={},
        fields=(
            Field("enabled", BOOLEAN, "Deploy this state.", default=state not in DISABLED_BY_DEFAULT),
            Field("image", STRING, "Container image (default: the operator's own image)."),
            Field("imagePullPolicy", STRING, enum=("Always", "IfNotPresent", "Never")),
            _strings("args", "Extra arguments for the container."),
            Field("env", ARRAY, items=_name_value(False)),
            Field("resources", OBJECT, fields=(_quantities("requests"), _quantities("limits"))),
            _probe("readiness"),
            _probe("liveness"),
            *_STATE_EXTRAS.get(state, ()),
        ),
    )


SPEC: Final = Field(
    "spec",
    OBJECT,
    fields=(
        Field(
            "recipe",
            STRING,
            "A built-in recipe (simulated-gpu, nvidia-gpu) or the name of a custom one.",
            min_length=1,
            pattern=DNS_LABEL,
            required=True,
        ),
        Field(
            "recipeConfigMap",
            STRING,
            "ConfigMap in sro-system whose recipe.yaml defines a custom recipe.",
            max_length=253,
            pattern=DNS_SUBDOMAIN,
        ),
        Field(
            "nodeSelector",
            OBJECT,
            "Node labels that must all match (default: the recipe's PCI match).",
            values=Field("", STRING),
        ),
        Field(
            "startupTaint",
            BOOLEAN,
            "Taint matching nodes sro.dev/<name>.not-ready:NoSchedule until validated.",
            default=False,
        ),
        Field(
            "tolerations",
            ARRAY,
            "Added to every operand pod.",
            items=Field("", OBJECT, opaque=True),
        ),
        Field("priorityClassName", STRING, "Priority class of the operand pods."),
        Field(
            "customManifests",
            STRING,
            "ConfigMap in sro-system; keys <state>.<NNNN>_<name>.yaml add to or "
            "replace (same file name) a state's templates.",
            max_length=253,
            pattern=DNS_SUBDOMAIN,
        ),
        PARTITIONING,
        REMEDIATION,
        *(_state(state) for state in STATE_FIELDS),
    ),
)
