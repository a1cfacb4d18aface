"""Fixed names of the project: API group, label prefixes, image, namespace.

Every other module takes these from here so that a label written by a node agent and the selector
the operator renders can never drift apart.
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
IMAGE_REPOSITORY: Final = "localhost/sro"
IMAGE: Final = f"{IMAGE_REPOSITORY}:{__version__}"

# Labels on every object sro creates, so that uninstall and tests can find them.
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "sro"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"


def sro_label(name: str) -> str:
    """Our label key for `name` (e.g. `sro_label("gpu.simulated")` -> `sro.dev/gpu.simulated`)."""
    return PREFIX + name


# Labels the operator puts on every object it renders for a SpecialResource, and on their pods.
SPECIALRESOURCE_LABEL: Final = f"{GROUP}/specialresource"
STATE_LABEL: Final = f"{GROUP}/state"
# On the driver DaemonSets and their pods: the driver revision (version, image, config) they run.
DRIVER_REVISION_LABEL: Final = f"{GROUP}/driver-revision"

# Where the operator's `runtime` state keeps the node's runtime files (the stdlib-only hook as a
# zipapp, the launcher the containerd runtime handler `sro` runs, hooks.d entries, CDI specs).
RUNTIME_ROOT: Final = "/var/lib/sro/runtime"
RUNTIME_LAUNCHER: Final = f"{RUNTIME_ROOT}/sro-runtime"
