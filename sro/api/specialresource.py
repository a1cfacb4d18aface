"""The SpecialResource API (`sro.dev/v1alpha1`, cluster-scoped): its spec as typed records.

Why here, in `api/`: the operator reconciles these records, parsed by `sro.api.specparsing` from the
same field table (`sro.api.specfields`) the CRD's schema is built from (`sro.api.crd`), so the API
server's checks and the operator's cannot drift apart. The state names and every node label key
are in `sro.api.names`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    FEATURE_DISCOVERY,
    MONITORING,
    RUNTIME,
)

# The spec's field for each state (camelCase, as Kubernetes APIs spell fields).
STATE_FIELDS: Final = {
    DRIVER: "driver",
    DRIVER_VALIDATION: "driverValidation",
    RUNTIME: "runtime",
    DEVICE_PLUGIN: "devicePlugin",
    DEVICE_PLUGIN_VALIDATION: "devicePluginValidation",
    MONITORING: "monitoring",
    FEATURE_DISCOVERY: "featureDiscovery",
}
# States an admin must turn on; every state is on by default (monitoring included, as dcgm-exporter
# is in NVIDIA's operator).
DISABLED_BY_DEFAULT: Final = frozenset[str]()

# Variables a driver image template may use, filled per node from NFD labels.
IMAGE_TEMPLATE_VARS: Final = ("version", "kernel", "os_id", "os_version", "os_major")


class SpecError(ValueError):
    """The spec passes the schema but cannot work; the message names the field to fix."""


@dataclass(frozen=True)
class StateSpec:
    """What every state lets an admin set: on/off, the container image, args, env, resources, the
    container's probes, and (validation states) how long a validation pod may run."""

    enabled: bool = True
    image: str = ""  # empty: the operator's own image
    image_pull_policy: str = ""  # empty: IfNotPresent (Never for localhost/ images)
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    resources: Mapping[str, Any] = field(default_factory=dict)
    readiness_probe: Mapping[str, Any] = field(default_factory=dict)  # replaces the container's
    liveness_probe: Mapping[str, Any] = field(default_factory=dict)  # replaces the container's
    timeout_seconds: int = 0  # validation states: the pod's activeDeadlineSeconds; 0: 300


@dataclass(frozen=True)
class DrainSpec:
    """Which other pods leave a node before its driver is replaced (pods using the device always do)."""

    enable: bool = False  # evict the pods matching pod_selector too (DaemonSet pods never)
    pod_selector: str = ""  # a label selector ("a=b,c!=d,e,!f"); empty: every pod
    timeout_seconds: int = 300  # how long evictions may take before the node is failed
    delete_empty_dir: bool = False  # evict pods with emptyDir volumes (their data is lost)
    force: bool = False  # evict pods no controller will recreate


@dataclass(frozen=True)
class WaitForCompletionSpec:
    """Pods (jobs) on the node that must finish before anything is evicted."""

    pod_selector: str = ""  # empty: wait for nothing
    timeout_seconds: int = 0  # 0: wait as long as they run


@dataclass(frozen=True)
class UpgradePolicy:
    """How a change of the driver (version, image, config) rolls over the nodes."""

    auto_upgrade: bool = True  # False: nodes keep their driver; they show upgrade-required
    max_parallel_upgrades: int = 1  # nodes upgrading at once; 0: no limit but max_unavailable
    max_unavailable: int | str = "25%"  # nodes (count or percent of the selected) out of service at once
    paused: bool = False  # start no node; nodes past their evictions finish
    timeout_seconds: int = 600  # driver replaced -> validated, else the node fails
    drain: DrainSpec = DrainSpec()
    wait_for_completion: WaitForCompletionSpec = WaitForCompletionSpec()


@dataclass(frozen=True)
class DriverSpec:
    mode: str = "container"  # container | host (pre-installed: nothing deployed) | simulated (sro's driver)
    version: str = ""
    image_template: str = ""  # e.g. registry/driver:{version}-{kernel}; default per recipe
    devices_config: str = ""  # a simulated driver's devices YAML (default: 8 GPUs, NVLink)
    upgrade_policy: UpgradePolicy = UpgradePolicy()


# Self-healing (spec.remediation): the fault classes a node's GPU health is sorted into (the
# `GpuHealthy` condition's reasons; which Xid is which: sro.devices.faultclasses), each one's field
# under spec.remediation.actions, and what may be done about one, mildest first.
FAULT_CLASS_FIELDS: Final = {
    "XidFatal": "xidFatal",
    "GpuLost": "gpuLost",
    "EccUncorrectable": "eccUncorrectable",
    "RowRemapFailure": "rowRemapFailure",
    "Thermal": "thermal",
}
FAULT_CLASSES: Final = tuple(FAULT_CLASS_FIELDS)
REMEDIATION_ACTIONS: Final = ("none", "restart-workload", "reset-device", "drain-and-reset", "reboot")
# A lost GPU or a bad memory row needs the device reset to come back; an uncorrectable ECC error may
# have hit any work on the GPU, so every GPU pod leaves first; a GPU too hot is the room's or the
# fans' problem, which no reset repairs.
DEFAULT_REMEDIATION_ACTIONS: Final = {
    "XidFatal": "reset-device",
    "GpuLost": "reset-device",
    "EccUncorrectable": "drain-and-reset",
    "RowRemapFailure": "drain-and-reset",
    "Thermal": "none",
}


@dataclass(frozen=True)
class RemediationSpec:
    """What the operator does about a node whose GPU fails (`spec.remediation`)."""

    actions: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_REMEDIATION_ACTIONS))
    max_concurrent_nodes: int = 1  # nodes under remediation at once
    max_unavailable: int | str = "25%"  # the breaker: nodes (count or percent, rounded up) out of service
    max_attempts: int = 3  # remediations per node within `window_seconds`; past them: RemediationLimit
    window_seconds: int = 3600
    dry_run: bool = False  # say what would be done (events), do nothing
    paused: bool = False  # start nothing new; a node under way finishes

    def action(self, fault_class: str) -> str:
        return self.actions.get(fault_class, DEFAULT_REMEDIATION_ACTIONS.get(fault_class, "none"))


PRIORITY_MAX: Final = 1_000_000_000  # user-defined PriorityClasses; above is reserved for system classes
PRIORITY_MIN: Final = -2_147_483_648
PREEMPTION_POLICIES: Final = ("PreemptLowerPriority", "Never")


@dataclass(frozen=True)
class PriorityClassSpec:
    """A PriorityClass the SpecialResource owns (soft partitioning)."""

    name: str
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    description: str = ""


@dataclass(frozen=True)
class QuotaSpec:
    """A namespace's cap on the resource: ResourceQuota `requests.<resource>`, optional LimitRange max."""

    namespace: str
    limit: int
    max_per_container: int | None = None
    resource: str = ""  # empty: the recipe's resource


@dataclass(frozen=True)
class PartitioningSpec:
    taint: bool = False  # hard partitioning: taint the nodes `<resource>:NoSchedule`
    priorities: tuple[PriorityClassSpec, ...] = ()
    quotas: tuple[QuotaSpec, ...] = ()


@dataclass(frozen=True)
class SpecialResourceSpec:
    recipe: str
    recipe_config_map: str = ""  # a ConfigMap in the operator's namespace whose `recipe.yaml` is a recipe
    node_selector: Mapping[str, str] = field(default_factory=dict)  # empty: the recipe's default
    startup_taint: bool = False
    tolerations: tuple[Mapping[str, Any], ...] = ()
    priority_class_name: str = ""
    custom_manifests: str = ""  # a ConfigMap in the operator's namespace: `<state>.<NNNN>_<name>.yaml`
    states: Mapping[str, StateSpec] = field(default_factory=dict)
    driver: DriverSpec = DriverSpec()
    device_plugin_config: str = ""  # the plugin's config.yaml
    cuda_sample: str = ""  # device-plugin-validation, nvidia-gpu: the CUDA program the workload runs
    partitioning: PartitioningSpec = PartitioningSpec()
    remediation: RemediationSpec = RemediationSpec()

    def state(self, name: str) -> StateSpec:
        return self.states.get(name) or StateSpec(enabled=name not in DISABLED_BY_DEFAULT)
