"""Fixed names of the project: API group, label prefixes, image, namespace, the states in order,
and every builder of a node label, taint or annotation key.

Every other module takes these from here so that a label written by a node agent and the selector
the operator renders can never drift apart (`sro status` reads the same keys the operator writes).
"""

from __future__ import annotations

from typing import Final

from sro import __version__

GROUP: Final = "sro.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "SpecialResource"
PLURAL: Final = "specialresources"
SHORT_NAME: Final = "sr"

# Our own node labels, taints and annotations: "sro.dev/<name>".
PREFIX: Final = f"{GROUP}/"
# node-feature-discovery's namespace, used verbatim so existing selectors keep working.
NFD_PREFIX: Final = "feature.node.kubernetes.io/"

NAMESPACE: Final = "sro-system"
FIELD_MANAGER: Final = "sro"
OPERATOR_LEASE: Final = "sro-operator"  # the Lease the operator replicas elect their leader on
IMAGE_REPOSITORY: Final = "localhost/sro"
IMAGE: Final = f"{IMAGE_REPOSITORY}:{__version__}"

# Labels on every object sro creates, so that uninstall and tests can find them.
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "sro"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"


# Labels the operator puts on every object it renders for a SpecialResource, and on their pods.
SPECIALRESOURCE_LABEL: Final = f"{GROUP}/specialresource"
STATE_LABEL: Final = f"{GROUP}/state"
# On the driver DaemonSets and their pods: the driver revision (version, image, config) they run.
DRIVER_REVISION_LABEL: Final = f"{GROUP}/driver-revision"

# Where the operator's `runtime` state keeps the node's runtime files (the stdlib-only hook as a
# zipapp, the launcher the containerd runtime handler `sro` runs, hooks.d entries, CDI specs).
RUNTIME_ROOT: Final = "/var/lib/sro/runtime"
RUNTIME_LAUNCHER: Final = f"{RUNTIME_ROOT}/sro-runtime"
# The RuntimeClass (and containerd handler) whose hook injects a recipe's devices and driver files.
RUNTIME_CLASS: Final = "sro"
# A node agent's container of this name carries the agent's latest note (the runtime state's CDI
# spec repairs) as its termination message: it exits to say it and is started again. The operator
# shows the note in the node's status row and counts neither its readiness nor its restarts.
REPORT_CONTAINER: Final = "report"

# The ordered states, as the seeds name them. Each starts on a node only after the previous one is
# ready there; `sro.dev/<sr>.<state>=ready` records it on the Node.
DRIVER: Final = "driver"
DRIVER_VALIDATION: Final = "driver-validation"
RUNTIME: Final = "runtime"
DEVICE_PLUGIN: Final = "device-plugin"
DEVICE_PLUGIN_VALIDATION: Final = "device-plugin-validation"
MONITORING: Final = "monitoring"
FEATURE_DISCOVERY: Final = "feature-discovery"
STATE_NAMES: Final = (
    DRIVER,
    DRIVER_VALIDATION,
    RUNTIME,
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    MONITORING,
    FEATURE_DISCOVERY,
)

READY: Final = "ready"
# A state a new driver invalidated, walked again while its pods (and the later states') keep running.
REVALIDATING: Final = "revalidating"
# The gate of a state's DaemonSet: the previous state's label at either value. "|" is not a label
# value character, so it can only mean "one of" (`sro.operator.rendering.node_affinity`).
GATE_VALUES: Final = f"{READY}|{REVALIDATING}"
LABEL_NAME_MAX: Final = 63  # the part of a label key after the prefix


def state_label(sr: str, state: str) -> str:
    """`sro.dev/<sr>.<state>`: set to `ready` on a node when the state is ready there."""
    return f"{PREFIX}{sr}.{state}"


def validated_label(sr: str) -> str:
    return f"{PREFIX}{sr}.validated"


def not_ready_taint(sr: str) -> str:
    """The startup taint (`spec.startupTaint`) kept on a matching node until it is validated."""
    return f"{PREFIX}{sr}.not-ready"


def reached_annotation(sr: str) -> str:
    """Node annotation with the time each state became ready there (`state=RFC3339,...`)."""
    return f"{PREFIX}{sr}.reached"


def simulated_opt_in_label(recipe: str) -> str:
    """Nodes opt in to a simulated recipe with this label set to `true` (no PCI device to match)."""
    return f"{PREFIX}{recipe}.enabled"


def simulated_driver_opt_in_label(recipe: str) -> str:
    """Nodes opt in to sro's simulated driver standing in for a real recipe's (`spec.driver.mode:
    simulated`, e.g. `sro.dev/nvidia-gpu.simulated=true`): such nodes have no PCI device to match."""
    return f"{PREFIX}{recipe}.simulated"


# On every object of a SpecialResource whose driver is simulated: no one takes it for hardware.
SIMULATED_LABEL: Final = f"{GROUP}/simulated"


def driver_revision_label(sr: str) -> str:
    """`sro.dev/<sr>.driver-revision`: which driver revision's DaemonSet runs on the node (the
    operator moves it from the old revision to the new one when the node's upgrade reaches it)."""
    return f"{PREFIX}{sr}.driver-revision"


def upgrade_state_label(sr: str) -> str:
    """`sro.dev/<sr>.upgrade-state`: where the node is in a driver upgrade (see `UPGRADE_STATES`)."""
    return f"{PREFIX}{sr}.upgrade-state"


def upgrade_annotation(sr: str) -> str:
    """Node annotation with the node's upgrade record (JSON: from, to, state, step times, reason)."""
    return f"{PREFIX}{sr}.upgrade"


def longest_label_name(sr: str) -> str:
    """The longest of SpecialResource `sr`'s label names (after the prefix), to check against
    `LABEL_NAME_MAX`."""
    suffixes = (*STATE_NAMES, "validated", "not-ready", "reached", "driver-revision", "upgrade-state")
    return max((f"{sr}.{s}" for s in suffixes), key=len)
