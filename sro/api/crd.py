"""The SpecialResource CustomResourceDefinition: its OpenAPI v3 schema, printer columns and status.

Why apart from the spec's parsing (`specparsing.py`): the schema is what the API server checks
before the operator sees anything (bad specs refused with the field named); `sro install` and
`deploy/` apply `crd()`. The spec's part is rendered from the field table the parser reads
(`sro.api.specfields`), so the two say the same.
"""

from __future__ import annotations

from typing import Any

from sro.api.names import GROUP, KIND, PLURAL, SHORT_NAME, VERSION
from sro.api.openapi import STRING_SCHEMA, crd_document, schema
from sro.api.specfields import SPEC


def status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": STRING_SCHEMA,
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": STRING_SCHEMA,
            "message": STRING_SCHEMA,
            "lastTransitionTime": STRING_SCHEMA,
        },
    }
    node_row = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": STRING_SCHEMA,
            "state": {"type": "string", "description": "The last state ready on the node (validated: all)."},
            "failing": {"type": "string", "description": "The state that is not ready yet."},
            "reason": STRING_SCHEMA,
            "message": STRING_SCHEMA,
            "log": {"type": "string", "description": "Tail of the failing pod's log (at most 1 KiB)."},
            "note": {
                "type": "string",
                "description": "What passed states said, e.g. the checks a validation skipped and why.",
            },
            "since": STRING_SCHEMA,
            "upgrade": {
                "type": "object",
                "description": "The node's driver upgrade while one is under way.",
                "properties": {
                    "state": STRING_SCHEMA,
                    "from": STRING_SCHEMA,
                    "to": STRING_SCHEMA,
                    "reason": STRING_SCHEMA,
                    "steps": {"type": "object", "additionalProperties": STRING_SCHEMA},
                },
            },
            "remediation": {
                "type": "object",
                "description": "The node's remediation while one is under way or holds it (spec.remediation).",
                "properties": {
                    "class": STRING_SCHEMA,
                    "devices": {"type": "array", "items": STRING_SCHEMA},
                    "action": STRING_SCHEMA,
                    "step": STRING_SCHEMA,
                    "since": STRING_SCHEMA,
                    "attempts": {"type": "integer"},
                    "reason": STRING_SCHEMA,
                },
            },
        },
    }
    return {
        "type": "object",
        "properties": {
            "ready": STRING_SCHEMA,
            "resource": STRING_SCHEMA,
            "resources": {
                "type": "array",
                "items": STRING_SCHEMA,
                "description": "Every extended resource the recipe announces, when it has pools.",
            },
            "observedGeneration": {"type": "integer"},
            "nodeCount": {"type": "integer"},
            "validatedCount": {"type": "integer"},
            "stateCounts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "states": {
                "type": "object",
                "additionalProperties": STRING_SCHEMA,
                "description": "Per state: enabled, disabled or not deployed.",
            },
            "conditions": {"type": "array", "items": condition},
            "quotas": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "namespace": STRING_SCHEMA,
                        "resource": STRING_SCHEMA,
                        "used": STRING_SCHEMA,
                        "hard": STRING_SCHEMA,
                        "problem": STRING_SCHEMA,
                    },
                },
            },
            "nodes": {"type": "array", "items": node_row},
            "driverUpgrade": {
                "type": "object",
                "description": "The driver rollout: target version, nodes per upgrade state, what blocks it.",
                "properties": {
                    "target": STRING_SCHEMA,
                    "revision": STRING_SCHEMA,
                    "paused": {"type": "boolean"},
                    "autoUpgrade": {"type": "boolean"},
                    "nodes": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "blocked": STRING_SCHEMA,
                },
            },
            "remediation": {
                "type": "object",
                "description": "Self-healing (spec.remediation): nodes per remediation step, the circuit breaker.",
                "properties": {
                    "nodes": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "breaker": {
                        "type": "object",
                        "properties": {
                            "limit": {"type": "integer"},
                            "unavailable": {"type": "integer"},
                            "tripped": {"type": "boolean"},
                        },
                    },
                    "paused": {"type": "boolean"},
                    "dryRun": {"type": "boolean"},
                },
            },
        },
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition document (apiextensions.k8s.io/v1)."""
    return crd_document(
        GROUP,
        VERSION,
        KIND,
        PLURAL,
        "Cluster",
        schema(SPEC),
        short_names=[SHORT_NAME],
        status=status_schema(),
        printer_columns=[
            {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
            {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodeCount"},
            {"name": "Validated", "type": "integer", "jsonPath": ".status.validatedCount"},
            {"name": "Recipe", "type": "string", "jsonPath": ".spec.recipe", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )
