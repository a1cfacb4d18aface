"""GetPreferredAllocation (pure): NVLink first, then one NUMA node, then an unfragmented rest.

Why: the kubelet picks devices arbitrarily unless the plugin suggests a set; for multi-GPU jobs the
difference between NVLink peers and PCIe hops is large. Whole devices (and MIG devices) are chosen
by comparing candidate sets on, in order: NVLink links inside the set (MIG devices of one GPU count
as linked); fewest NUMA nodes; NVLink links left among the devices that stay free; same-NUMA pairs
left among them (so a half-used island is finished before a whole one is broken); lowest indices.
Small cases are searched exhaustively (8 GPUs: at most 70 sets), larger ones greedily from
every possible first device. Time-sliced
replicas follow NVIDIA's `distributed` policy: the replicas of the least-used devices first.

This is a hint: it never fails on odd input (the kubelet would fail the pod); unknown ids are
skipped and a short answer is returned when there are not enough devices.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from sro.node.deviceplugin.announcing import Announced, ResourcePlan

EXHAUSTIVE_LIMIT = 5000


def _weights(units: Sequence[Announced]) -> tuple[list[list[int]], list[list[int]]]:
    n = len(units)
    nv = [[0] * n for _ in range(n)]
    nu = [[0] * n for _ in range(n)]
    for i in range(n):
        a = units[i].unit
        links = dict(a.nvlinks)
        for j in range(i + 1, n):
            b = units[j].unit
            w = links.get(b.uuid, 0) or dict(b.nvlinks).get(a.uuid, 0)
            if a.mig_profile and a.parent == b.parent:
                w = max(w, 1)
            nv[i][j] = nv[j][i] = w
            same = a.numa_node is not None and a.numa_node == b.numa_node
            nu[i][j] = nu[j][i] = int(same)
    return nv, nu


def _best_set(units: Sequence[Announced], must: list[int], k: int) -> list[int]:
    n = len(units)
    nv, nu = _weights(units)
    nv_sum = [sum(row) for row in nv]
    nu_sum = [sum(row) for row in nu]
    nv_total = sum(nv_sum) // 2
    nu_total = sum(nu_sum) // 2

    def score(chosen: Sequence[int]) -> tuple[int, int, int, int, int]:
        nv_in = sum(nv[a][b] for a, b in itertools.combinations(chosen, 2))
        nu_in = sum(nu[a][b] for a, b in itertools.combinations(chosen, 2))
        nv_left = nv_total - sum(nv_sum[c] for c in chosen) + nv_in
        nu_left = nu_total - sum(nu_sum[c] for c in chosen) + nu_in
        numa = len({units[c].unit.numa_node for c in chosen})
        return (nv_in, -numa, nv_left, nu_left, -sum(chosen))

    rest = [i for i in range(n) if i not in must]
    if math.comb(len(rest), k) <= EXHAUSTIVE_LIMIT:
        best = max(itertools.combinations(rest, k), key=lambda c: score(must + list(c)))
        return must + list(best)

    def grow(seed: list[int]) -> list[int]:
        chosen = list(seed)
        while len(chosen) < len(must) + k:
            chosen.append(max((i for i in rest if i not in chosen), key=lambda i: score([*chosen, i])))
        return chosen

    # greedy growth from every possible first device; keep the best finished set
    seeds = [must] if must else [[i] for i in rest]
    return max((grow(s) for s in seeds), key=score)


def _distributed(
    available: Sequence[Announced], must: list[Announced], size: int, plan: ResourcePlan
) -> list[Announced]:
    free: dict[str, list[Announced]] = {}
    for a in available:
        free.setdefault(a.unit.uuid, []).append(a)
    total: dict[str, int] = {}
    for a in plan.devices:
        total[a.unit.uuid] = total.get(a.unit.uuid, 0) + 1
    chosen = list(must)
    used_now: set[str] = {a.unit.uuid for a in must}
    while len(chosen) < size:
        candidates = [(u, reps) for u, reps in free.items() if any(r not in chosen for r in reps)]
        if not candidates:
            break

        def key(item: tuple[str, list[Announced]]) -> tuple[int, int, str]:
            u, reps = item
            allocated = total[u] - len(reps) + sum(1 for c in chosen if c.unit.uuid == u)
            return (int(u in used_now), allocated, reps[0].unit.index)

        u, reps = min(candidates, key=key)
        pick = next(r for r in reps if r not in chosen)
        chosen.append(pick)
        used_now.add(u)
    return chosen


def _index_key(index: str) -> tuple[int, ...]:
    return tuple(int(p) for p in index.split(":") if p.isdigit())


def preferred(
    available_ids: Sequence[str], must_ids: Sequence[str], size: int, plan: ResourcePlan
) -> list[str]:
    table = plan.by_id()
    available = [table[i] for i in dict.fromkeys(available_ids) if i in table]
    must = [table[i] for i in dict.fromkeys(must_ids) if i in table]
    rest = sorted(
        (a for a in available if a not in must), key=lambda a: (_index_key(a.unit.index), a.replica)
    )
    available = must + rest
    if size <= len(must):
        return [a.id for a in must[: max(size, 0)]]
    size = min(size, len(available))
    if plan.replicas > 1:
        return [a.id for a in _distributed(available, must, size, plan)]
    idx = _best_set(available, list(range(len(must))), size - len(must))
    return [available[i].id for i in idx]
