"""What an admin asks of `sro nodepool create`, checked before anything is generated or sent.

Why checked up front and all at once: a pool is several objects (the MachineSet or MachineDeployment,
templates, autoscaler objects); refusing a bad label after the first of them reached the API server
would leave half a pool. Every refusal is a `NodepoolError` naming the option or field to fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from sro.api.names import LABEL_NAME_MAX, PREFIX, longest_label_name, not_ready_taint

TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The node label the cluster autoscaler reads a node's GPU type from (Cluster API provider; OpenShift's
# ClusterAutoscaler `resourceLimits.gpus[].type` is matched against it too).
ACCELERATOR_LABEL: Final = "cluster-api/accelerator"
POOL_LABEL: Final = f"{PREFIX}nodepool"  # every node of a pool: `sro.dev/nodepool=<pool>`

# Kubernetes' qualified names (apimachinery validation): an optional DNS-subdomain prefix, then a
# name of at most 63 characters; label values at most 63, possibly empty.
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class NodepoolError(ValueError):
    """Refused input; `field` names the option or the source object's field to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, **({"value": self.value} if self.value else {}), "effect": self.effect}

    def __str__(self) -> str:  # kubectl's `key[=value]:Effect`, as the autoscaler's annotation takes it
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


@dataclass(frozen=True)
class PoolRequest:
    instance_type: str
    replicas: int
    name: str = ""  # empty: derived from the source's name
    min_replicas: int | None = None
    max_replicas: int | None = None
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    special_resource: str = ""


def label_key_problem(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "a key has at most one '/'"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"prefix {prefix!r} is not a DNS subdomain (lower case, digits, '-', '.')"
    if not name or len(name) > 63 or not _NAME.match(name):
        return f"name {name!r} must be 1-63 characters, alphanumeric at both ends, '-', '_', '.' inside"
    return ""


def label_value_problem(value: str) -> str:
    if value and (len(value) > 63 or not _NAME.match(value)):
        return (
            f"value {value!r} must be at most 63 characters, alphanumeric at both ends, '-', '_', '.' inside"
        )
    return ""


def parse_label(text: str) -> tuple[str, str]:
    """`key=value` (the value may be empty: `key=`)."""
    key, eq, value = text.partition("=")
    if not eq:
        raise NodepoolError("--label", f"{text!r} is not key=value")
    problem = label_key_problem(key) or label_value_problem(value)
    if problem:
        raise NodepoolError("--label", f"{text!r}: {problem}")
    return key, value


def parse_taint(text: str) -> Taint:
    """kubectl's `key[=value]:Effect`."""
    kv, colon, effect = text.rpartition(":")
    if not colon or not kv:
        raise NodepoolError("--taint", f"{text!r} is not key[=value]:Effect")
    if effect not in TAINT_EFFECTS:
        raise NodepoolError("--taint", f"{text!r}: effect must be one of {', '.join(TAINT_EFFECTS)}")
    key, _, value = kv.partition("=")
    problem = label_key_problem(key) or label_value_problem(value)
    if problem:
        raise NodepoolError("--taint", f"{text!r}: {problem}")
    return Taint(key, value, effect)


def startup_taint(special_resource: str) -> Taint:
    """The operator's `spec.startupTaint` (same key and value as sro.operator.taints puts there)."""
    return Taint(not_ready_taint(special_resource), "true", "NoSchedule")


def check(req: PoolRequest) -> None:
    """Everything about the request itself (the source object is checked where it is read)."""
    if req.replicas < 0:
        raise NodepoolError("--replicas", f"must be 0 or more, not {req.replicas}")
    if (req.min_replicas is None) != (req.max_replicas is None):
        raise NodepoolError("--min/--max", "give both (the autoscaler's bounds) or neither")
    if req.min_replicas is not None and req.max_replicas is not None:
        if req.min_replicas < 0:
            raise NodepoolError("--min", f"must be 0 or more, not {req.min_replicas}")
        if req.max_replicas < 1:
            raise NodepoolError("--max", f"must be 1 or more, not {req.max_replicas}")
        if req.min_replicas > req.max_replicas:
            raise NodepoolError("--min/--max", f"--min {req.min_replicas} is above --max {req.max_replicas}")
        if not req.min_replicas <= req.replicas <= req.max_replicas:
            raise NodepoolError(
                "--replicas",
                f"{req.replicas} is outside --min {req.min_replicas} .. --max {req.max_replicas}",
            )
    # The name is also a label value (machine.openshift.io/cluster-api-machineset,
    # cluster.x-k8s.io/deployment-name, sro.dev/nodepool): a DNS label of at most 63.
    if req.name and (len(req.name) > 63 or not _DNS_LABEL.match(req.name)):
        raise NodepoolError(
            "--name", f"{req.name!r} must be at most 63 lower-case letters, digits and '-' (a label value)"
        )
    keys = [k for k, _ in req.labels]
    for k in keys:
        if keys.count(k) > 1:
            raise NodepoolError("--label", f"{k} given twice")
    seen: set[tuple[str, str]] = set()
    for t in req.taints:
        if (t.key, t.effect) in seen:
            raise NodepoolError("--taint", f"{t.key}:{t.effect} given twice")
        seen.add((t.key, t.effect))
    if req.special_resource:
        sr = req.special_resource
        if not _DNS_SUBDOMAIN.match(sr) or len(longest_label_name(sr)) > LABEL_NAME_MAX:
            raise NodepoolError(
                "--special-resource",
                f"{sr!r} is not a SpecialResource name (a DNS subdomain short enough for its label keys)",
            )
