"""The plugin's state between the gRPC methods: health board and one core per resource.

Why: the gRPC servicer must stay a translation layer, and the health monitor, the ListAndWatch
streams and Allocate run on different threads. `HealthBoard` owns the tracker behind one lock and
a condition that wakes every stream when the set of unhealthy devices changes (a version counter
means no stream misses a change). `ResourceCore` answers each call with the pure functions
(`allocation`, `preferred`) against the current health; it never hands out an unhealthy or unknown
device because `allocation.validate` runs against the board at call time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sro.api.recipes import Recipe
from sro.devices.health import ALL, HealthTracker
from sro.devices.model import HealthEvent
from sro.node.deviceplugin import allocation, preferred
from sro.node.deviceplugin.allocation import ContainerAllocation, MountSpec
from sro.node.deviceplugin.announcing import ResourcePlan, Unit
from sro.node.deviceplugin.config import PluginConfig

ANSWERS_KEPT = 4096  # distinct device sets whose allocation is remembered (bounded: cleared when full)


class HealthBoard:
    def __init__(self, tracker: HealthTracker, clock: Callable[[], float] = time.monotonic) -> None:
        self._tracker = tracker
        self._clock = clock
        self._cond = threading.Condition()
        self._version = 0
        self._unhealthy: frozenset[str] = frozenset()
        self.reasons: dict[str, str] = {}
        self.faults: dict[str, tuple[tuple[int, ...], str]] = {}  # key -> (Xids, reason)

    @property
    def version(self) -> int:
        return self._version

    def _refresh(self) -> bool:
        now = self._clock()
        reasons = self._tracker.unhealthy(now)
        now_bad = frozenset(reasons)
        self.reasons = {str(k): v for k, v in reasons.items()}
        self.faults = {str(k): v for k, v in self._tracker.faults(now).items()}
        if now_bad == self._unhealthy:
            return False
        self._unhealthy = now_bad
        self._version += 1
        self._cond.notify_all()
        return True

    def apply(self, ev: HealthEvent) -> bool:
        with self._cond:
            self._tracker.apply(ev)
            return self._refresh()

    def tick(self) -> float | None:
        """Re-evaluate recoveries; returns when the next one is due (monotonic), if any."""
        with self._cond:
            self._refresh()
            return self._tracker.next_change(self._clock())

    def healthy(self, unit: Unit) -> bool:
        bad = self._unhealthy
        return ALL not in bad and unit.uuid not in bad and unit.parent not in bad

    def wait_change(self, seen_version: int, timeout: float) -> int:
        with self._cond:
            if self._version == seen_version:
                self._cond.wait(timeout)
            return self._version

    def wake_all(self) -> None:
        with self._cond:
            self._cond.notify_all()


@dataclass(frozen=True)
class DeviceState:
    id: str
    healthy: bool
    numa_node: int | None


class ResourceCore:
    """Everything one resource's gRPC methods need."""

    def __init__(
        self,
        plan: ResourcePlan,
        recipe: Recipe,
        config: PluginConfig,
        board: HealthBoard,
        driver_files: Sequence[MountSpec] = (),
    ) -> None:
        self.plan = plan
        self.recipe = recipe
        self.config = config
        self.board = board
        self.driver_files = tuple(driver_files)
        self._answers: dict[tuple[str, ...], ContainerAllocation] = {}  # see allocate

    @property
    def resource(self) -> str:
        return self.plan.resource

    def devices(self) -> list[DeviceState]:
        return [DeviceState(a.id, self.board.healthy(a.unit), a.unit.numa_node) for a in self.plan.devices]

    def allocate(self, requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        """One allocation per container request; AllocationError if any request is refused.

        Every request is validated against the board at call time; what a valid request gets is a
        pure function of its ids and this core's fixed plan, recipe, config and driver files, so
        it is built once per distinct id list and the same (frozen) answer returned after that:
        the kubelet asks for the same few device sets again and again.
        """
        out = []
        for ids in requests:
            announced = allocation.validate(ids, self.plan, self.board.healthy, self.config)
            key = tuple(ids)
            answer = self._answers.get(key)
            if answer is None:
                answer = allocation.container_allocation(
                    announced, self.plan, self.recipe, self.config, self.driver_files
                )
                if len(self._answers) >= ANSWERS_KEPT:
                    self._answers.clear()
                self._answers[key] = answer
            out.append(answer)
        return out

    def preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        # offer only healthy devices even if the kubelet's view is a moment behind
        healthy = {a.id for a in self.plan.devices if self.board.healthy(a.unit)}
        return preferred.preferred([i for i in available if i in healthy], must, size, self.plan)
