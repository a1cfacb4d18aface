"""The ClusterOperator `sro`'s status: the SpecialResources' conditions summed up for a cluster admin.

Why: an OpenShift admin reads `oc get clusteroperators` (Available / Progressing / Degraded, with a
reason and a message) to see every component's health in one place; sro's health is spread over its
SpecialResources. So the operator folds theirs into one status, with OpenShift's meaning of each
condition:

  Available    False only when some SpecialResource gives nothing usable: it cannot be deployed
               (Degraded by its spec) or none of its nodes is validated while some fail. A rollout in
               progress is not unavailability.
  Progressing  True while some SpecialResource walks its nodes (its own Progressing), naming them.
  Degraded     True when some SpecialResource is Degraded (a failing node, a spec that cannot work).

The message names the SpecialResources concerned with their own reason and message, cut short: the
SpecialResources' status is where the detail is (`sro status`). Each condition keeps its
lastTransitionTime while its status does not change. `versions` carries the operator's version and
`relatedObjects` what `oc adm inspect` and must-gather should collect.

Pure: it reads SpecialResources as the API returns them (dicts) and returns the status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sro.api.names import GROUP, PLURAL
from sro.api.openshift import SCC_GROUP, SCC_PLURAL

CONDITIONS = ("Available", "Progressing", "Degraded")
MESSAGE_LIMIT = 1000
PER_RESOURCE = 200


def _condition(sr: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in (sr.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def _true(sr: Mapping[str, Any], ctype: str) -> bool:
    c = _condition(sr, ctype)
    return c is not None and c.get("status") == "True"


def _name(sr: Mapping[str, Any]) -> str:
    return str((sr.get("metadata") or {}).get("name", ""))


def _says(sr: Mapping[str, Any], ctype: str) -> str:
    c = _condition(sr, ctype) or {}
    text = f"{_name(sr)}: {c.get('reason', '')}: {c.get('message', '')}".rstrip(": ")
    return text if len(text) <= PER_RESOURCE else text[: PER_RESOURCE - 3] + "..."


def _join(parts: Sequence[str]) -> str:
    text = "; ".join(parts)
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def unusable(sr: Mapping[str, Any]) -> bool:
    """Nothing of it works: its spec cannot be deployed, or no node is validated while some fail."""
    status = sr.get("status") or {}
    if not status:
        return False  # not yet seen by the operator
    degraded = _true(sr, "Degraded")
    if degraded and not _true(sr, "Progressing") and int(status.get("nodeCount") or 0) == 0:
        return True
    return degraded and int(status.get("validatedCount") or 0) == 0 and int(status.get("nodeCount") or 0) > 0


def _stamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary(
    special_resources: Iterable[Mapping[str, Any]],
    version: str,
    namespace: str,
    sccs: Iterable[str] = (),
    previous: Sequence[Mapping[str, Any]] = (),
    now: datetime | None = None,
) -> dict[str, Any]:
    """The ClusterOperator's whole status (conditions, versions, relatedObjects)."""
    now = now or datetime.now(UTC)
    srs = sorted(
        (s for s in special_resources if not (s.get("metadata") or {}).get("deletionTimestamp")), key=_name
    )
    down = [s for s in srs if unusable(s)]
    moving = [s for s in srs if _true(s, "Progressing")]
    degraded = [s for s in srs if _true(s, "Degraded")]
    ready = [s for s in srs if _true(s, "Ready")]
    if not srs:
        available = (
            True,
            "NoSpecialResources",
            "no SpecialResource exists: the operator runs, nothing to deploy",
        )
    elif down:
        available = (False, "SpecialResourcesUnavailable", _join([_says(s, "Degraded") for s in down]))
    else:
        available = (True, "AsExpected", f"{len(ready)} of {len(srs)} SpecialResource(s) ready")
    if moving:
        progressing = (True, "SpecialResourcesProgressing", _join([_says(s, "Progressing") for s in moving]))
    else:
        progressing = (False, "AsExpected", "every SpecialResource is settled")
    if degraded:
        degraded_c = (True, "SpecialResourcesDegraded", _join([_says(s, "Degraded") for s in degraded]))
    else:
        degraded_c = (False, "AsExpected", "no SpecialResource is degraded")
    conditions = []
    for ctype, (ok, reason, message) in zip(CONDITIONS, (available, progressing, degraded_c), strict=True):
        status = "True" if ok else "False"
        prev = next((c for c in previous if c.get("type") == ctype), None)
        since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else None
        conditions.append(
            {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": since or _stamp(now),
            }
        )
    related: list[dict[str, str]] = [{"group": "", "resource": "namespaces", "name": namespace}]
    related += [{"group": GROUP, "resource": PLURAL, "name": _name(s)} for s in srs]
    related += [{"group": SCC_GROUP, "resource": SCC_PLURAL, "name": n} for n in sorted(sccs)]
    return {
        "conditions": conditions,
        "versions": [{"name": "operator", "version": version}],
        "relatedObjects": related,
    }
