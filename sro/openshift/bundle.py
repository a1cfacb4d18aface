"""An OLM bundle (registry+v1) of sro, made from the same objects `sro install` and `deploy/` use.

Why from `sro.install.objects.objects()`: the bundle is a third way to install the same thing; generated
from the one list, its Deployment, accounts and roles cannot drift from `deploy/`. OLM's bundle
format takes what the list has in three ways:

- the operator Deployment goes into the ClusterServiceVersion's install strategy (`deployments`),
  and every Role/ClusterRole bound to an account into `permissions` / `clusterPermissions` of that
  account (OLM creates the account, the roles and their bindings);
- the SpecialResource CRD, accounts that are bound to nothing, ConfigMaps and Services are plain
  files under `manifests/` (kinds OLM accepts there);
- what a bundle cannot carry is left out and said in the CSV's description: the Namespace (OLM
  installs into the OperatorGroup's), the discovery DaemonSet (OLM installs Deployments only; on
  OpenShift the Node Feature Discovery operator publishes the same labels, or apply discovery with
  `sro manifests`), other projects' CRDs (node-feature-discovery's are the NFD operator's to own:
  two CSVs may not own one CRD), and the SCCs, which the operator creates itself on OpenShift
  (`sro.install.scc`; the CSV grants it the rights, and `use` of OpenShift's `nonroot-v2` so
  that its own pod is admitted before its SCC exists).

Install mode: OwnNamespace only. The operator works cluster-wide through `clusterPermissions`
whatever its OperatorGroup says, its operands run in its own namespace, and any other mode makes
OLM widen its namespaced Role to every namespace.

`olm_objects` turns a CSV back into the objects OLM would create, so the e2e test installs the bundle
on a cluster without OLM the way OLM would.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from sro.api.names import GROUP, IMAGE, KIND, NAMESPACE, PLURAL
from sro.install.objects import OPERATOR_DEPLOYMENT
from sro.install.objects import objects as install_objects
from sro.install.scc import operator_rules
from sro.openshift.catalog import (
    DESCRIPTION,
    EXAMPLES,
    ICON_SVG,
    SPEC_DESCRIPTORS,
    STATUS_DESCRIPTORS,
    descriptors,
)

PACKAGE: Final = "sro"
CHANNEL: Final = "alpha"
CSV_API_VERSION: Final = "operators.coreos.com/v1alpha1"
CSV_KIND: Final = "ClusterServiceVersion"
OPERATOR_ACCOUNT: Final = "sro-operator"
BOOTSTRAP_SCC: Final = "nonroot-v2"  # OpenShift's built-in SCC for a fixed non-root uid (4.11+)
MIN_KUBE_VERSION: Final = "1.20.0"
# The kinds OLM accepts as plain files next to the CSV (operator-registry's supported resources).
SUPPORTED_KINDS: Final = frozenset(
    {
        "ClusterServiceVersion", "CustomResourceDefinition", "Secret", "ClusterRole", "ClusterRoleBinding",
        "ConfigMap", "ServiceAccount", "Service", "Role", "RoleBinding", "PrometheusRule", "ServiceMonitor",
        "PodDisruptionBudget", "PriorityClass", "VerticalPodAutoscaler", "ConsoleYAMLSample",
        "ConsoleQuickStart", "ConsoleCLIDownload", "ConsoleLink",
    }
)  # fmt: skip
ANNOTATIONS_FILE: Final = "metadata/annotations.yaml"
MANIFESTS: Final = "manifests/"
METADATA: Final = "metadata/"

# Semantic Versioning 2.0.0, the grammar of semver.org.
_NUM = r"(?:0|[1-9]\d*)"
_PRE_ID = r"(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
SEMVER = re.compile(
    rf"^{_NUM}\.{_NUM}\.{_NUM}(?:-{_PRE_ID}(?:\.{_PRE_ID})*)?(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?$"
)
# An image reference: [host[:port]/]path[:tag][@algorithm:hex]; the tag or the digest is required.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::\d+)?)"
)
IMAGE_REF = re.compile(
    rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}))?$"
)


class BundleError(ValueError):
    """The bundle cannot be made from these inputs; the message says which and why."""


def check_version(version: str, what: str = "--version") -> str:
    if not SEMVER.match(version):
        raise BundleError(
            f"{what} {version!r} is not a semantic version (MAJOR.MINOR.PATCH, e.g. 0.1.0 or 1.2.0-rc.1)"
        )
    return version


def check_image(image: str, what: str = "--image") -> str:
    m = IMAGE_REF.match(image)
    if not m:
        raise BundleError(f"{what} {image!r} is not an image reference (e.g. registry.example/sro:0.1.0)")
    if not m.group("tag") and not m.group("digest"):
        raise BundleError(
            f"{what} {image!r} has neither a tag (:TAG) nor a digest (@sha256:...): a bundle must pin the image"
        )
    return image


@dataclass(frozen=True)
class Bundle:
    """File path (relative to the bundle directory) -> YAML text."""

    files: Mapping[str, str]
    csv: Mapping[str, Any]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the description, alm-examples) as literal blocks, as people write them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _yaml(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def _bound_rules(objs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """account -> rules of the Roles / ClusterRoles bound to it (namespaced, cluster-wide)."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objs if o["kind"] in ("Role", "ClusterRole")}
    namespaced: dict[str, list[Any]] = {}
    cluster: dict[str, list[Any]] = {}
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = b["roleRef"]
        role = roles.get((ref["kind"], ref["name"]))
        if role is None:
            raise BundleError(
                f"{b['kind']} {b['metadata']['name']} binds {ref['kind']} {ref['name']}, not installed"
            )
        into = cluster if b["kind"] == "ClusterRoleBinding" else namespaced
        for s in b.get("subjects") or []:
            if s.get("kind") != "ServiceAccount":
                raise BundleError(f"{b['kind']} {b['metadata']['name']}: OLM binds service accounts only")
            into.setdefault(s["name"], []).extend(role.get("rules") or [])
    return namespaced, cluster


def images_in(doc: Any) -> set[str]:
    """Every image a document names: containers' `image` and the operator's `--image` argument."""
    found: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("image", "containerImage") and isinstance(v, str):
                found.add(v)
            else:
                found |= images_in(v)
        command = [*(doc.get("command") or []), *(doc.get("args") or [])]
        for i, arg in enumerate(command):
            if arg == "--image" and i + 1 < len(command) and isinstance(command[i + 1], str):
                found.add(command[i + 1])
            elif isinstance(arg, str) and arg.startswith("--image="):
                found.add(arg.split("=", 1)[1])
    elif isinstance(doc, list):
        for v in doc:
            found |= images_in(v)
    return found


def _related_name(image: str) -> str:
    path = image.split("@", 1)[0]
    last = path.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def generate(
    version: str,
    image: str | None = None,
    objects: Sequence[Mapping[str, Any]] | None = None,
    channels: Sequence[str] = (CHANNEL,),
    default_channel: str | None = None,
    replaces: str | None = None,
) -> Bundle:
    """The bundle for `version` of the operator `image` (default: sro's own image of that version)."""
    check_version(version)
    image = check_image(image or f"{IMAGE.rsplit(':', 1)[0]}:{version}")
    if replaces is not None:
        check_version(replaces, "--replaces")
    if not channels or any(not c or "," in c for c in channels):
        raise BundleError("--channel: at least one channel name, without commas")
    default_channel = default_channel or channels[0]
    if default_channel not in channels:
        raise BundleError(
            f"--default-channel {default_channel!r} is not one of the channels {list(channels)}"
        )
    if objects is None:
        objects = install_objects(NAMESPACE, image, "IfNotPresent")
    objs = [dict(o) for o in objects]
    namespaced, cluster = _bound_rules(objs)
    cluster[OPERATOR_ACCOUNT] = [
        *cluster.get(OPERATOR_ACCOUNT, []),
        *operator_rules(extra_sccs=(BOOTSTRAP_SCC,)),
    ]
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    ours = [c for c in crds if c["spec"]["group"] == GROUP]
    if [d["metadata"]["name"] for d in deployments] != [OPERATOR_DEPLOYMENT] or len(ours) != 1:
        raise BundleError(
            "the install list must have exactly the operator Deployment and the SpecialResource CRD"
        )
    bound = set(namespaced) | set(cluster)
    extra: list[dict[str, Any]] = []
    for o in objs:
        if o["kind"] in ("ConfigMap", "Service") or (
            o["kind"] == "ServiceAccount" and o["metadata"]["name"] not in bound
        ):
            doc = {**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "namespace"}}
            extra.append(doc)
    crd = ours[0]
    crd_version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    deployment = deployments[0]
    name = f"{PACKAGE}.v{version}"
    related = sorted(images_in(deployment) | {image})
    for ref in related:
        check_image(ref, "an image of the operator Deployment")
    csv: dict[str, Any] = {
        "apiVersion": CSV_API_VERSION,
        "kind": CSV_KIND,
        "metadata": {
            "name": name,
            "namespace": "placeholder",
            "annotations": {
                "alm-examples": json.dumps(list(EXAMPLES), indent=2),
                "capabilities": "Basic Install",
                "categories": "AI/Machine Learning, Drivers and plugins",
                "containerImage": image,
                "description": "GPUs and other special hardware from bare metal to the scheduler.",
                "operatorframework.io/suggested-namespace": NAMESPACE,
            },
            "labels": {"operatorframework.io/arch.amd64": "supported"},
        },
        "spec": {
            "displayName": "Special Resource Operator (sro)",
            "description": DESCRIPTION,
            "version": version,
            "maturity": CHANNEL,
            "minKubeVersion": MIN_KUBE_VERSION,
            "keywords": ["gpu", "accelerator", "driver", "device-plugin", "special-resource"],
            "maintainers": [{"name": "sro maintainers", "email": "maintainers@sro.example"}],
            "provider": {"name": "sro"},
            "icon": [
                {"base64data": base64.b64encode(ICON_SVG.encode()).decode(), "mediatype": "image/svg+xml"}
            ],
            "installModes": [
                {"type": "OwnNamespace", "supported": True},
                {"type": "SingleNamespace", "supported": False},
                {"type": "MultiNamespace", "supported": False},
                {"type": "AllNamespaces", "supported": False},
            ],
            "install": {
                "strategy": "deployment",
                "spec": {
                    "deployments": [
                        {
                            "name": deployment["metadata"]["name"],
                            "label": dict(deployment["metadata"].get("labels") or {}),
                            "spec": deployment["spec"],
                        }
                    ],
                    "permissions": [
                        {"serviceAccountName": sa, "rules": rules} for sa, rules in sorted(namespaced.items())
                    ],
                    "clusterPermissions": [
                        {"serviceAccountName": sa, "rules": rules} for sa, rules in sorted(cluster.items())
                    ],
                },
            },
            "customresourcedefinitions": {
                "owned": [
                    {
                        "name": crd["metadata"]["name"],
                        "version": crd_version["name"],
                        "kind": KIND,
                        "displayName": "Special Resource",
                        "description": "A kind of special hardware (a recipe) on a set of nodes, walked state by state.",
                        "resources": [
                            {"kind": kind, "version": "v1", "name": ""}
                            for kind in ("DaemonSet", "Pod", "ConfigMap", "Service")
                        ],
                        "specDescriptors": descriptors(SPEC_DESCRIPTORS),
                        "statusDescriptors": descriptors(STATUS_DESCRIPTORS),
                    }
                ]
            },
            "relatedImages": [{"name": _related_name(ref), "image": ref} for ref in related],
        },
    }
    if replaces is not None:
        csv["spec"]["replaces"] = f"{PACKAGE}.v{replaces}"
    annotations = {
        "annotations": {
            "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
            "operators.operatorframework.io.bundle.manifests.v1": MANIFESTS,
            "operators.operatorframework.io.bundle.metadata.v1": METADATA,
            "operators.operatorframework.io.bundle.package.v1": PACKAGE,
            "operators.operatorframework.io.bundle.channels.v1": ",".join(channels),
            "operators.operatorframework.io.bundle.channel.default.v1": default_channel,
        }
    }
    header = (
        f"# Generated by `sro bundle generate --version {version}` from sro's install objects; do not edit.\n"
    )
    files = {
        f"{MANIFESTS}{PACKAGE}.clusterserviceversion.yaml": header + _yaml(csv),
        f"{MANIFESTS}{GROUP}_{PLURAL}.yaml": header + _yaml(crd),
        ANNOTATIONS_FILE: header + _yaml(annotations),
    }
    for o in extra:
        files[f"{MANIFESTS}{o['metadata']['name']}_{o['kind'].lower()}.yaml"] = header + _yaml(o)
    return Bundle(files, csv)


def olm_objects(
    csv: Mapping[str, Any], manifests: Iterable[Mapping[str, Any]], namespace: str
) -> list[dict[str, Any]]:
    """What OLM creates for the CSV in `namespace` (an OwnNamespace OperatorGroup): the bundle's
    manifests, then per `permissions` entry an account, a Role and a RoleBinding, per
    `clusterPermissions` entry a ClusterRole and a ClusterRoleBinding, then the Deployments.
    Names follow OLM's pattern (the CSV's name, the account, a suffix); labels let `olm_cleanup`
    find them."""
    name = csv["metadata"]["name"]
    labels = {"olm.owner": name, "olm.owner.namespace": namespace, "app.kubernetes.io/managed-by": "sro"}
    spec = csv["spec"]["install"]["spec"]
    out: list[dict[str, Any]] = []
    for m in manifests:
        if m["kind"] == CSV_KIND:
            continue
        md = {**m["metadata"], "labels": {**(m["metadata"].get("labels") or {}), **labels}}
        if m["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            md["namespace"] = namespace
        out.append({**m, "metadata": md})
    accounts = {
        p["serviceAccountName"] for p in [*spec.get("permissions", []), *spec.get("clusterPermissions", [])]
    }
    have = {o["metadata"]["name"] for o in out if o["kind"] == "ServiceAccount"}
    for sa in sorted(accounts - have):
        meta = {"name": sa, "namespace": namespace, "labels": labels}
        out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    rbac = "rbac.authorization.k8s.io"
    for kind, key in (("Role", "permissions"), ("ClusterRole", "clusterPermissions")):
        for p in spec.get(key, []):
            role = f"{name}-{p['serviceAccountName']}"[:63].rstrip("-.")
            role_md: dict[str, Any] = {"name": role, "labels": labels}
            if kind == "Role":
                role_md["namespace"] = namespace
            out.append({"apiVersion": f"{rbac}/v1", "kind": kind, "metadata": role_md, "rules": p["rules"]})
            out.append(
                {
                    "apiVersion": f"{rbac}/v1",
                    "kind": f"{kind}Binding",
                    "metadata": dict(role_md),
                    "roleRef": {"apiGroup": rbac, "kind": kind, "name": role},
                    "subjects": [
                        {"kind": "ServiceAccount", "name": p["serviceAccountName"], "namespace": namespace}
                    ],
                }
            )
    for d in spec.get("deployments", []):
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": d["name"],
                    "namespace": namespace,
                    "labels": {**d.get("label", {}), **labels},
                },
                "spec": d["spec"],
            }
        )
    return out
