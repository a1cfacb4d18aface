"""OpenShift's API names sro uses: SecurityContextConstraints, ClusterOperator, the detection group.

Why here: `sro install --platform openshift`, the operator's OpenShift loop, the OLM bundle and the
tests all name the same groups, kinds and objects; written once, from OpenShift's published API
reference (security.openshift.io/v1 SecurityContextConstraints, config.openshift.io/v1
ClusterOperator), with their field names unchanged.

OpenShift is recognised by the API group `config.openshift.io` (cluster-wide configuration and the
ClusterOperators: every OpenShift 4 cluster serves it, no plain Kubernetes cluster does); SCCs need
`security.openshift.io` as well.
"""

from __future__ import annotations

from typing import Final

# SecurityContextConstraints: cluster-scoped, the fields at the top level (no spec).
SCC_GROUP: Final = "security.openshift.io"
SCC_VERSION: Final = "v1"
SCC_API_VERSION: Final = f"{SCC_GROUP}/{SCC_VERSION}"
SCC_KIND: Final = "SecurityContextConstraints"
SCC_PLURAL: Final = "securitycontextconstraints"

# ClusterOperator: cluster-scoped; `spec` is required (empty), the status has conditions,
# versions and relatedObjects; a status subresource.
CONFIG_GROUP: Final = "config.openshift.io"
CONFIG_VERSION: Final = "v1"
CLUSTER_OPERATOR_API_VERSION: Final = f"{CONFIG_GROUP}/{CONFIG_VERSION}"
CLUSTER_OPERATOR_KIND: Final = "ClusterOperator"
CLUSTER_OPERATOR_PLURAL: Final = "clusteroperators"
CLUSTER_OPERATOR_NAME: Final = "sro"  # `oc get clusteroperator sro`

# How a client sees that a group is served: every OpenShift 4 serves these two groups from CRDs.
GROUP_CRDS: Final = {
    CONFIG_GROUP: f"{CLUSTER_OPERATOR_PLURAL}.{CONFIG_GROUP}",
    SCC_GROUP: f"{SCC_PLURAL}.{SCC_GROUP}",
}
OPENSHIFT_CRD: Final = GROUP_CRDS[CONFIG_GROUP]

# What `--platform openshift` needs served, in the order a refusal names them.
DETECTION_GROUP: Final = CONFIG_GROUP
REQUIRED_GROUPS: Final = (CONFIG_GROUP, SCC_GROUP)

PLATFORMS: Final = ("kubernetes", "openshift")

# CRI-O reads OCI hooks from here on RHCOS (the only hooks_dir the machine-config operator's
# crio.conf names since 4.3); podman reads it too.
CRIO_HOOKS_DIR: Final = "/etc/containers/oci/hooks.d"
