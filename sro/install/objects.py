"""What `sro install` puts on a cluster, in apply order, as plain objects (`deploy.py` writes them out).

Why one list for everything: `sro install` applies it, `sro uninstall` deletes it in reverse, and
`deploy/` (for `kubectl apply -k`, which cannot read Jinja2) is the same list written out, so the
three cannot drift. The operator creates no RBAC at run time, so every ServiceAccount, Role and
ClusterRole its operands will use is installed here, up front: the install kinds of every component
under `sro/manifests/`. The templates of a component are rendered one file at a time with only the
install values (namespace, image, pull policy): an account or role file must not depend on a
SpecialResource or its recipe (one account serves every recipe), and a file that needs per-resource
values (a validation pod, a driver DaemonSet) is the operator's to render, not ours. Discovery is
installed whole, once for the cluster. The CRD is `sro.api.crd.crd()` itself, placed
after the Namespace (its schema lives in Python, once), followed by node-feature-discovery's
NodeFeature and NodeFeatureRule CRDs (`sro.api.nfd_crds`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import jinja2
import yaml

from sro.api.crd import crd
from sro.api.images import pull_policy_for
from sro.api.names import IMAGE, MANAGED_BY_LABEL, MANAGED_BY_VALUE, NAMESPACE
from sro.api.nfd_crds import nfd_crds
from sro.install.scc import objects as openshift_objects
from sro.manifests import components, render_template, templates

OPERATOR: Final = "operator"
DISCOVERY: Final = "discovery"
DISCOVERY_INTERVAL: Final = "10s"
OPERATOR_DEPLOYMENT: Final = "sro-operator"
# The kinds `sro install` owns in every component (accounts and RBAC): the operator renders the rest
# and creates no RBAC at run time.
INSTALL_KINDS: Final = frozenset(
    {"Namespace", "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
)

# Apply order by kind: what a kind refers to exists before it (accounts before bindings, the CRD
# and RBAC before the operator that needs them). Deletion goes the other way.
KIND_ORDER: Final = (
    "Namespace",
    "CustomResourceDefinition",
    "SecurityContextConstraints",  # --platform openshift: before the accounts that may use them
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Service",
    "DaemonSet",
    "ClusterOperator",  # --platform openshift; before the operator, so uninstall deletes it after
    "Deployment",
)
CLUSTER_SCOPED: Final = frozenset(
    {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    | {"SecurityContextConstraints", "ClusterOperator"}
)

_INSTALL_KIND_LINE = re.compile(r"^kind:\s*(" + "|".join(sorted(INSTALL_KINDS)) + r")\s*$", re.MULTILINE)


class InstallError(ValueError):
    """The manifests cannot make an install list (a template names the file and what is wrong)."""


@dataclass(frozen=True)
class Key:
    """An object's identity on the cluster."""

    kind: str
    name: str
    namespace: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


def key(obj: Mapping[str, Any]) -> Key:
    md = obj["metadata"]
    return Key(obj["kind"], md["name"], "" if obj["kind"] in CLUSTER_SCOPED else md.get("namespace", ""))


def _render_file(component: str, name: str, text: str, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One template file's objects, or [] for a file that needs values only the operator has."""
    try:
        rendered = render_template(text, values)
    except jinja2.UndefinedError as e:
        if component == DISCOVERY or _INSTALL_KIND_LINE.search(text):
            raise InstallError(
                f"{component}/{name}: {e.message}; what `sro install` creates must render with the "
                f"install values only ({', '.join(sorted(values))}), not per SpecialResource or recipe"
            ) from e
        return []
    except jinja2.TemplateError as e:
        raise InstallError(f"{component}/{name}: {e}") from e
    try:
        return [d for d in yaml.safe_load_all(rendered) if d]
    except yaml.YAMLError as e:
        raise InstallError(f"{component}/{name}: not valid YAML once rendered: {e}") from e


def component_objects(
    component: str, values: Mapping[str, Any], kinds: Iterable[str] | None
) -> list[dict[str, Any]]:
    """The component's objects of `kinds` (None: all), each file rendered alone, in file order."""
    wanted = None if kinds is None else frozenset(kinds)
    out = []
    for name, text in templates(component).items():
        for obj in _render_file(component, name, text, values):
            if not isinstance(obj, dict) or "kind" not in obj or "metadata" not in obj:
                raise InstallError(
                    f"{component}/{name}: a document is not a Kubernetes object (kind/metadata)"
                )
            if wanted is None or obj["kind"] in wanted:
                out.append(obj)
    return out


def objects(
    namespace: str = NAMESPACE,
    image: str = IMAGE,
    pull_policy: str | None = None,
    operator: bool = True,
    platform: str = "kubernetes",
    discovery_labels_nodes: bool = False,
) -> list[dict[str, Any]]:
    """Everything `sro install` applies, in apply order (`operator=False`: all but the Deployment;
    `platform="openshift"`: with the SCCs and grants of `sro.install.scc`; `discovery_labels_nodes`:
    discovery labels its Node itself, with the ClusterRole that lets it patch Nodes, instead of
    leaving the labels in its NodeFeature for the operator to apply)."""
    values = {
        "namespace": namespace,
        "image": image,
        "pull_policy": pull_policy or pull_policy_for(image),
        # NFD's default pass is every 60 s; the operator's feature-discovery state waits for the
        # labels of a newly installed driver, and a pass costs a few ms: 10 s keeps nodes waiting
        # seconds, not a minute.
        "sleep_interval": DISCOVERY_INTERVAL,
        "discovery_labels_nodes": discovery_labels_nodes,
    }
    found: list[dict[str, Any]] = []
    found += component_objects(OPERATOR, values, None)
    found.append(crd())
    found += nfd_crds()  # NFD's NodeFeature and NodeFeatureRule, which the operator evaluates
    found += component_objects(DISCOVERY, values, None)
    for component in components():
        if component not in (OPERATOR, DISCOVERY):
            found += component_objects(component, values, INSTALL_KINDS)
    if platform == "openshift":
        found += openshift_objects(namespace)
    elif platform != "kubernetes":
        raise InstallError(f"unknown platform {platform!r} (kubernetes or openshift)")
    seen: dict[Key, dict[str, Any]] = {}
    for obj in found:
        k = key(obj)
        if k.kind not in KIND_ORDER:
            raise InstallError(f"{k}: sro install does not know where a {k.kind} goes in apply order")
        if k.namespace and k.namespace != namespace:
            raise InstallError(f"{k}: outside the install namespace {namespace}")
        labels = obj["metadata"].get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            raise InstallError(
                f"{k}: lacks the label {MANAGED_BY_LABEL}={MANAGED_BY_VALUE} (uninstall finds it by it)"
            )
        if k in seen:
            # Several components carry the same Namespace; anything else twice is a clash
            if k.kind != "Namespace" and seen[k] != obj:
                raise InstallError(f"{k}: two components define it differently")
            continue
        seen[k] = obj
    ordered = sorted(
        seen.values(), key=lambda o: KIND_ORDER.index(o["kind"])
    )  # stable: file order within a kind
    if not operator:
        ordered = [o for o in ordered if key(o) != Key("Deployment", OPERATOR_DEPLOYMENT, namespace)]
    return ordered


def to_yaml(objs: Iterable[Mapping[str, Any]]) -> str:
    """Multi-document YAML, keys in the manifests' own order (what `kubectl apply -f -` reads)."""
    return "---\n".join(yaml.safe_dump(dict(o), sort_keys=False, default_flow_style=False) for o in objs)
