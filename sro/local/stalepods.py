"""Pods that still run an image which was re-imported under the same tag, and rolling them.

The local cluster's sro image keeps one tag (`localhost/sro:<version>`) across rebuilds, and its
pull policy is Never: `sro install` after a rebuild leaves the operator's Deployment and the
discovery DaemonSet as they were, and their pods go on running the code of the image they started
from. A registry user would push a new tag; here the image's ID tells instead. Every pod's status
names the image ID its container runs (`imageID`, the config digest), so a pod whose ID is not the
tag's current one is stale, and its owner gets a `kubectl rollout restart` — the same rolling
update a new tag would start, readiness and the PodDisruptionBudget included.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sro.console.progress import Progress

if TYPE_CHECKING:
    from sro.local.cluster import LocalCluster


def stale_owners(pods: Iterable[dict[str, Any]], ref: str, image_id: str) -> list[str]:
    """`deployment/NAME` and `daemonset/NAME` owning a running container of `ref` whose image ID is
    not `image_id`, sorted. A container not started yet (no ID) starts from the current image."""
    owners: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata", {})
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if not any(s.get("image") == ref and s.get("imageID") not in (None, "", image_id) for s in statuses):
            continue
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == "DaemonSet":
                owners.add(f"daemonset/{owner['name']}")
            elif owner.get("kind") == "ReplicaSet":
                suffix = meta.get("labels", {}).get("pod-template-hash")
                name = owner["name"]
                if suffix and name.endswith(f"-{suffix}"):
                    owners.add(f"deployment/{name[: -len(suffix) - 1]}")
    return sorted(owners)


def on_delete(daemonsets: Iterable[dict[str, Any]]) -> set[str]:
    """`daemonset/NAME` of those whose pods are replaced only when deleted (the driver's: its upgrade
    controller deletes them node by node); `rollout restart` would only make their pods out of date."""
    return {
        f"daemonset/{ds['metadata']['name']}"
        for ds in daemonsets
        if ds.get("spec", {}).get("updateStrategy", {}).get("type") == "OnDelete"
    }


def roll_stale(
    cluster: LocalCluster, ref: str, image_id: str, namespace: str, progress: Progress = lambda _: None
) -> list[str]:
    """Restarts the owners of `namespace`'s stale pods of `ref` and waits for each rollout; returns them.
    An OnDelete DaemonSet is left to whoever deletes its pods, and said so."""

    def items(kind: str) -> list[dict[str, Any]]:
        out = cluster.kubectl("-n", namespace, "get", kind, "-o", "json", check=False)
        return json.loads(out.stdout).get("items", []) if out.returncode == 0 else []

    owners = stale_owners(items("pods"), ref, image_id)
    manual = on_delete(items("daemonsets")) if any(o.startswith("daemonset/") for o in owners) else set()
    for owner in [o for o in owners if o in manual]:
        progress(f"  {owner} runs an older build of {ref} and updates OnDelete: left as it is")
    owners = [o for o in owners if o not in manual]
    for owner in owners:
        progress(f"  {owner} runs an older build of {ref}: restarting it")
        cluster.kubectl("-n", namespace, "rollout", "restart", owner)
    for owner in owners:
        cluster.kubectl("-n", namespace, "rollout", "status", owner, "--timeout=240s", timeout=260)
    return owners
