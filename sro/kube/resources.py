"""lightkube's resource types of every kind sro reads or writes, looked up by kind name.

Why by name: code above kube/ (the operator's cluster reads, the installer) says "DaemonSet" or
"SpecialResource" and never imports lightkube; the custom kinds (sro's own, NFD's, the Prometheus
operator's, OpenShift's) are registered with lightkube once, here, so server-side apply of a
rendered document finds them too (`sro.kube.applying.resource_type`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, LimitRange, Namespace, Node, Pod, ResourceQuota, Service
from lightkube.resources.scheduling_v1 import PriorityClass

from sro.api.names import GROUP, KIND, PLURAL, VERSION
from sro.api.nfd_crds import (
    NFD_GROUP,
    NFD_VERSION,
    NODE_FEATURE,
    NODE_FEATURE_RULE,
    NODE_FEATURE_RULES,
    NODE_FEATURES,
)
from sro.api.openshift import (
    CLUSTER_OPERATOR_KIND,
    CLUSTER_OPERATOR_PLURAL,
    CONFIG_GROUP,
    CONFIG_VERSION,
    SCC_GROUP,
    SCC_KIND,
    SCC_PLURAL,
    SCC_VERSION,
)

SpecialResource = create_global_resource(GROUP, VERSION, KIND, PLURAL)
NodeFeature = create_namespaced_resource(NFD_GROUP, NFD_VERSION, NODE_FEATURE, NODE_FEATURES)
NodeFeatureRule = create_global_resource(NFD_GROUP, NFD_VERSION, NODE_FEATURE_RULE, NODE_FEATURE_RULES)
SecurityContextConstraints = create_global_resource(SCC_GROUP, SCC_VERSION, SCC_KIND, SCC_PLURAL)
ClusterOperator = create_global_resource(
    CONFIG_GROUP, CONFIG_VERSION, CLUSTER_OPERATOR_KIND, CLUSTER_OPERATOR_PLURAL
)
ServiceMonitor = create_namespaced_resource(
    "monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors"
)
PrometheusRule = create_namespaced_resource(
    "monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules"
)

KINDS: Mapping[str, Any] = {
    res.__name__: res
    for res in (
        SpecialResource,
        NodeFeature,
        NodeFeatureRule,
        SecurityContextConstraints,
        ClusterOperator,
        ServiceMonitor,
        PrometheusRule,
        CustomResourceDefinition,
        DaemonSet,
        Lease,
        ConfigMap,
        LimitRange,
        Namespace,
        Node,
        Pod,
        ResourceQuota,
        Service,
        PriorityClass,
    )
}


def resource(kind: str) -> Any:
    """The resource type of `kind` (a KeyError names a kind sro does not use)."""
    return KINDS[kind]
