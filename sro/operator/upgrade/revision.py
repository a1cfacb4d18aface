"""Which driver a spec asks for (its revision), and whether a node's driver of that revision is up.

Why a revision: it is the hash of everything that makes the driver pod (version, image template,
devices config, the state's image/args/env/resources, custom templates). Each revision has its own
DaemonSets (one per kernel), gated on the node label `sro.dev/<sr>.driver-revision`; moving that
label from the old revision to the new one is what replaces the driver, and moving it back is the
rollback of a node whose new driver never became ready.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sro.api.names import DRIVER
from sro.operator.observed import NodeInfo, PodInfo
from sro.operator.recipedistribution import recipe_hash
from sro.operator.rendering import Context, short_hash


def driver_revision(ctx: Context) -> str:
    """A label value naming the driver the spec asks for: the version, then a hash of the rest."""
    drv = ctx.spec.driver
    st = ctx.spec.state(DRIVER)
    digest = short_hash(
        drv.mode,
        drv.version,
        drv.image_template,
        drv.devices_config,
        ctx.state_image(DRIVER),
        ctx.pull_policy(DRIVER),
        st.args,
        st.env,
        sorted(st.resources.items(), key=str),
        sorted(ctx.overrides(DRIVER).items()),
        # a custom recipe's driver follows its recipe (a built-in's revision stays as it was)
        *((recipe_hash(ctx.recipe),) if ctx.spec.recipe_config_map else ()),
        length=6,
    )
    version = re.sub(r"[^A-Za-z0-9._-]+", "-", drv.version or "default")[:40].strip("-._") or "v"
    return f"{version}-{digest}"


def driver_ready(node: NodeInfo, pods: Sequence[PodInfo], rev_key: str) -> bool:
    """A driver pod of the node's revision is Ready on the node."""
    rev = node.labels.get(rev_key)
    return any(
        p.node == node.name and p.state == DRIVER and p.ready and not p.deleting and p.revision == rev
        for p in pods
    )
