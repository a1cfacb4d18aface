"""node-feature-discovery's API objects, NodeFeature and NodeFeatureRule: their names and CRDs.

Why sro installs NFD's own group and kinds (`nfd.k8s-sigs.io/v1alpha1`) rather than its own: admins
and vendors' operators already ship NodeFeatureRules and write NodeFeatures; with the same group,
version and field names (from NFD's published API reference) they apply unchanged. NodeFeature is
namespaced (a node's raw features and labels asked for; the node is named by the label
`nfd.node.kubernetes.io/node-name`), NodeFeatureRule is cluster-scoped (short name `nfr`). The
schemas are NFD's shape; the operator's parser (`sro.nfd.rules`) checks what a schema cannot
(regular expressions, numbers, namespaces) and skips one bad rule, never the others.
"""

from __future__ import annotations

from typing import Any, Final

from sro.api.openapi import STRING_SCHEMA, crd_document

NFD_GROUP: Final = "nfd.k8s-sigs.io"
NFD_VERSION: Final = "v1alpha1"
NFD_API_VERSION: Final = f"{NFD_GROUP}/{NFD_VERSION}"
NODE_FEATURE: Final = "NodeFeature"
NODE_FEATURES: Final = "nodefeatures"
NODE_FEATURE_RULE: Final = "NodeFeatureRule"
NODE_FEATURE_RULES: Final = "nodefeaturerules"
# The label naming the node a NodeFeature is for (NFD's).
NODE_NAME_LABEL: Final = "nfd.node.kubernetes.io/node-name"
MATCH_OPS: Final = (
    "In", "NotIn", "InRegexp", "Exists", "DoesNotExist", "Gt", "Ge", "Lt", "Le", "GtLt", "GeLe",
    "IsTrue", "IsFalse",
)  # fmt: skip

# Maps of strings (labels, attribute elements, ...). Their values are not typed in the schema: an empty
# string is a real value here (a kernel config option set to "", a label with no value), and some
# API servers' schema validation, this project's local 1.20 build among them, refuses "" for
# `type: string` as if it were null. The readers (`sro.nfd`) check the values instead.
_STR_MAP: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _match_expression() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["op"],
        "properties": {
            "op": {"type": "string", "enum": list(MATCH_OPS)},
            "value": {"type": "array", "items": STRING_SCHEMA},
            "type": {"type": "string", "description": "version: compare as major.minor.patch."},
        },
    }


def _matcher_terms() -> dict[str, Any]:
    return {
        "type": "array",
        "description": "All terms must match (logical AND).",
        "items": {
            "type": "object",
            "required": ["feature"],
            "properties": {
                "feature": {"type": "string", "description": "The feature set, e.g. pci.device."},
                "matchExpressions": {
                    "type": "object",
                    "additionalProperties": _match_expression(),
                    "description": "Per element (attribute, for instances) name: an expression on its value.",
                },
                "matchName": {**_match_expression(), "description": "An expression on element names."},
            },
        },
    }


def _rule() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": STRING_SCHEMA,
            "labels": {**_STR_MAP, "description": "Node labels to set when the rule matches."},
            "labelsTemplate": {
                **STRING_SCHEMA,
                "description": "A template expanding to key=value lines of labels.",
            },
            "annotations": {**_STR_MAP, "description": "Node annotations to set when the rule matches."},
            "extendedResources": {
                **_STR_MAP,
                "description": "Extended resources (node capacity) to advertise.",
            },
            "taints": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "effect"],
                    "properties": {
                        "key": STRING_SCHEMA,
                        "value": STRING_SCHEMA,
                        "effect": STRING_SCHEMA,
                        "timeAdded": STRING_SCHEMA,
                    },
                },
            },
            "vars": {**_STR_MAP, "description": "Values for later rules (rule.matched), not published."},
            "varsTemplate": STRING_SCHEMA,
            "matchFeatures": _matcher_terms(),
            "matchAny": {
                "type": "array",
                "description": "At least one must match (logical OR).",
                "items": {
                    "type": "object",
                    "required": ["matchFeatures"],
                    "properties": {"matchFeatures": _matcher_terms()},
                },
            },
        },
    }


def _feature_sets(elements: dict[str, Any]) -> dict[str, Any]:
    """A map of feature name -> `{elements}`: one of the three kinds of features."""
    return {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "required": ["elements"],
            "properties": {"elements": elements},
        },
    }


def _features() -> dict[str, Any]:
    instance = {"type": "object", "required": ["attributes"], "properties": {"attributes": _STR_MAP}}
    return {
        "type": "object",
        "description": "Raw features, input to NodeFeatureRules.",
        "properties": {
            "flags": _feature_sets({"type": "object", "additionalProperties": {"type": "object"}}),
            "attributes": _feature_sets(_STR_MAP),
            "instances": _feature_sets({"type": "array", "items": instance}),
        },
    }


def _crd(kind: str, plural: str, scope: str, spec: dict[str, Any], short: list[str]) -> dict[str, Any]:
    return crd_document(
        NFD_GROUP,
        NFD_VERSION,
        kind,
        plural,
        scope,
        spec,
        short_names=short,
        list_kind=True,
        spec_required=True,
    )


def node_feature_crd() -> dict[str, Any]:
    spec = {
        "type": "object",
        "properties": {
            "features": _features(),
            "labels": {**_STR_MAP, "description": "Labels to set on the node directly."},
        },
    }
    return _crd(NODE_FEATURE, NODE_FEATURES, "Namespaced", spec, [])


def node_feature_rule_crd() -> dict[str, Any]:
    spec = {
        "type": "object",
        "required": ["rules"],
        "properties": {"rules": {"type": "array", "items": _rule(), "description": "Evaluated in order."}},
    }
    return _crd(NODE_FEATURE_RULE, NODE_FEATURE_RULES, "Cluster", spec, ["nfr"])


def nfd_crds() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions `sro install` adds after the SpecialResource one."""
    return [node_feature_crd(), node_feature_rule_crd()]
