"""Which owners run an older build of a re-imported tag (sro/local/stalepods.py)."""

from __future__ import annotations

from typing import Any

from sro.local.stalepods import on_delete, stale_owners

REF = "localhost/sro:0.1.0"
NEW = "sha256:new"


def pod(
    owner_kind: str, owner: str, image_id: str | None, image: str = REF, hash_: str = ""
) -> dict[str, Any]:
    labels = {"pod-template-hash": hash_} if hash_ else {}
    status = {"image": image, **({"imageID": image_id} if image_id is not None else {})}
    return {
        "metadata": {"labels": labels, "ownerReferences": [{"kind": owner_kind, "name": owner}]},
        "status": {"containerStatuses": [status]},
    }


def test_a_deployment_and_a_daemonset_on_an_older_build_are_named() -> None:
    pods = [
        pod("ReplicaSet", "sro-operator-584bdf5479", "sha256:old", hash_="584bdf5479"),
        pod("DaemonSet", "sro-discovery", "sha256:old"),
    ]
    assert stale_owners(pods, REF, NEW) == ["daemonset/sro-discovery", "deployment/sro-operator"]


def test_pods_on_the_current_build_not_started_or_of_another_image_are_left_alone() -> None:
    pods = [
        pod("ReplicaSet", "sro-operator-584bdf5479", NEW, hash_="584bdf5479"),
        pod("DaemonSet", "sro-discovery", None),  # not started: it starts from the current image
        pod("DaemonSet", "sro-discovery", ""),
        pod("DaemonSet", "other", "sha256:old", image="localhost/busybox:sro"),
        {"metadata": {}, "status": {}},
    ]
    assert stale_owners(pods, REF, NEW) == []


def test_a_replicaset_without_its_template_hash_is_not_guessed_at() -> None:
    assert stale_owners([pod("ReplicaSet", "sro-operator-584bdf5479", "sha256:old")], REF, NEW) == []


def test_only_on_delete_daemonsets_are_named_as_left_to_their_owner() -> None:
    def ds(name: str, strategy: str | None) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {"updateStrategy": {"type": strategy}} if strategy else {},
        }

    found = on_delete(
        [ds("sro-gpu-driver-6-1", "OnDelete"), ds("sro-discovery", "RollingUpdate"), ds("x", None)]
    )
    assert found == {"daemonset/sro-gpu-driver-6-1"}
