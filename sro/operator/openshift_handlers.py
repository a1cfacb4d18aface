"""kopf glue for OpenShift: keep the SCCs and their grants in place, mirror the ClusterOperator status.

Why a loop of its own: neither job belongs to one SpecialResource. On a cluster that serves
`config.openshift.io` the loop applies what `sro install --platform openshift` would have created for
the operands (`sro.install.scc.grant_objects`: an OLM bundle or a plain `deploy/` carries no SCCs),
then folds every SpecialResource's conditions into the ClusterOperator `sro`
(`sro.openshift.clusteroperator`), written only when it changes. A SpecialResource event wakes it
(its status changed), so the ClusterOperator follows within a second (passes start `DEBOUNCE` apart
at the least, `sro.operator.wakeloop`); it looks again every `RESYNC`
seconds anyway, and then re-applies the grants (someone may have deleted one). Where the cluster is
not OpenShift it does nothing but look again every `RESYNC` seconds. A refusal (the operator lacks
the rights of deploy/openshift/) is logged once with what to do; the rest goes on.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import kopf

from sro import __version__
from sro.api.names import GROUP, PLURAL, VERSION
from sro.api.openshift import CLUSTER_OPERATOR_NAME
from sro.install import scc
from sro.kube.openshift import OpenShiftIO
from sro.openshift.clusteroperator import summary
from sro.operator.wakeloop import WakeLoop, run_alongside

log = logging.getLogger("sro.operator.openshift")
DEBOUNCE = 1.0
RESYNC = 60.0
RETRY = 5.0


def _comparable(status: dict[str, Any] | None) -> Any:
    return {k: v for k, v in (status or {}).items() if k in ("conditions", "versions", "relatedObjects")}


class OpenShiftLoop:
    def __init__(self, io: OpenShiftIO, namespace: str) -> None:
        self.io = io
        self.namespace = namespace
        self.passes = WakeLoop(self.run_pass, what="OpenShift pass", log=log, retry=RETRY, spacing=DEBOUNCE)
        self.openshift: bool | None = None  # None: not looked yet
        self._grants_at = 0.0
        self._said: set[str] = set()

    def poke(self) -> None:
        self.passes.poke()

    def _say(self, problems: list[str], hint: str) -> None:
        for p in problems:
            if p not in self._said:
                log.warning("%s (%s)", p, hint)
        self._said = set(problems)

    async def run_pass(self) -> float:
        openshift = await self.io.is_openshift()
        if openshift != self.openshift:
            if openshift:
                log.info(
                    "OpenShift (config.openshift.io is served): keeping the SCCs and the ClusterOperator"
                )
            elif self.openshift is not None:
                log.info("config.openshift.io is no longer served: nothing to do for OpenShift")
            self.openshift = openshift
            self._grants_at = 0.0
        if not openshift:
            return RESYNC
        problems: list[str] = []
        if time.monotonic() - self._grants_at >= RESYNC:
            problems += await self.io.apply_all(scc.grant_objects(self.namespace))
            self._grants_at = time.monotonic() if not problems else 0.0
        srs = await self.io.special_resources()
        current = await self.io.cluster_operator(CLUSTER_OPERATOR_NAME)
        previous = (current or {}).get("status") or {}
        status = summary(
            srs,
            __version__,
            self.namespace,
            sccs=[o.scc for o in scc.OPERANDS],
            previous=previous.get("conditions") or [],
        )
        if current is None or _comparable(previous) != _comparable(status):
            problem = await self.io.write_status(scc.cluster_operator(), status)
            if problem:
                problems.append(problem)
            else:
                log.info(
                    "ClusterOperator %s: %s",
                    CLUSTER_OPERATOR_NAME,
                    ", ".join(f"{c['type']}={c['status']} ({c['reason']})" for c in status["conditions"]),
                )
        self._say(problems, "apply deploy/openshift/ or run `sro install --platform openshift`")
        return RETRY if problems else RESYNC


def register(registry: kopf.OperatorRegistry, client: Any, namespace: str) -> kopf.OperatorRegistry:
    """Add the OpenShift loop's handlers to the operator's registry (and return it)."""
    loop = OpenShiftLoop(OpenShiftIO(client), namespace)
    run_alongside(registry, loop.passes, "openshift")

    # async on purpose: kopf runs sync handlers in a thread pool, and an asyncio.Event set from
    # another thread does not wake the loop waiting on it
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def special_resource_event_for_openshift(**_: Any) -> None:
        if loop.openshift:
            loop.poke()

    return registry
