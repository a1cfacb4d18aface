"""The action pods of a remediation: one-shot `sro driver reset` / `sro driver reboot` on one node.

Why pods, as the upgrade's holder scan: the operator talks only to the API; clearing a device's
fault, resetting a GPU or asking for a reboot happens on the node, in a pod pinned there by nodeName
that tolerates every taint (the node is cordoned by then). One pod per (node, token): the machine's
token is the step's start time, so a step asked for again (an operator restarted mid-step) finds its
own pod by name instead of acting twice, and a pod of an earlier step never stands for this one —
its token annotation says which step it served, its devices annotation what it reset.

Pure: names and documents only; the adapter creates, reads and deletes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sro.api.images import pull_policy_for
from sro.api.names import PREFIX
from sro.operator.rendering import Context, decorate, render_state, short_hash, slug

ACTION_STATE: Final = "remediation"  # the state label of the action pods
ACTION_COMPONENT: Final = "remediation"  # sro/manifests/remediation/
TOKEN_ANNOTATION: Final = f"{PREFIX}remediation-token"
DEVICES_ANNOTATION: Final = f"{PREFIX}remediation-devices"
ACTION_ANNOTATION: Final = f"{PREFIX}remediation-action"
ACTIONS: Final = ("reset", "reboot")


def action_pod_name(ctx: Context, node: str, token: str) -> str:
    """`sro-<sr>-remediation-<node>-<hash of node and token>`: one name per (node, token)."""
    return ctx.object_name(ACTION_STATE, f"{slug(node, 20)}-{short_hash(node, token, length=8)}")


def action_pod(ctx: Context, node: str, action: str, devices: Sequence[str], token: str) -> dict[str, Any]:
    """The pod that runs `sro driver <action>` (reset or reboot) on `node` for the step `token`
    (devices: reset only; ValueError for anything else)."""
    if action not in ACTIONS:
        raise ValueError(f"remediation action {action!r}: expected one of {', '.join(ACTIONS)}")
    if not token:
        raise ValueError("a remediation action pod needs the step's token")
    if action == "reset" and not devices:
        raise ValueError("a reset names at least one device")
    values = {
        "name": action_pod_name(ctx, node, token),
        "node": node,
        "image": ctx.image,
        "pull_policy": pull_policy_for(ctx.image),
        "action": action,
        "devices": list(devices) if action == "reset" else [],
        "token": token,
        "backend": ctx.recipe.backend,
    }
    docs = [d for d in render_state(ctx, ACTION_STATE, ACTION_COMPONENT, **values) if d["kind"] == "Pod"]
    if len(docs) != 1:
        raise ValueError("the remediation templates must render exactly one Pod (the action pod)")
    return decorate(docs[0], ctx, ACTION_STATE)


def pod_token(pod: Any) -> str:
    """The token of the step an action pod served ("" for anything else)."""
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(TOKEN_ANNOTATION, ""))


def pod_devices(pod: Any) -> tuple[str, ...]:
    """The devices an action pod reset (from its annotation)."""
    text = str(((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICES_ANNOTATION, ""))
    return tuple(d for d in text.split(",") if d)
