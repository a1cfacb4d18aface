"""Preferred allocation: NVLink first, then NUMA, then an unfragmented rest; replicas distributed."""

from __future__ import annotations

from sro.api.recipes import SIMULATED_GPU
from sro.devices import simconfig
from sro.node.deviceplugin.announcing import ResourcePlan, plan
from sro.node.deviceplugin.config import parse_config
from sro.node.deviceplugin.preferred import preferred


def _plan(doc: dict[str, object], cfg: object = None) -> tuple[ResourcePlan, list[str]]:
    inv = simconfig.parse(doc)
    (p,) = plan(inv, parse_config(cfg, SIMULATED_GPU))
    return p, [d.uuid for d in inv.devices]


ISLANDS = {"count": 8, "numaNodes": [0, 0, 0, 0, 1, 1, 1, 1], "nvlinkIslands": [[0, 1, 2, 3], [4, 5, 6, 7]]}


def idx(ids: list[str], uuids: list[str]) -> list[int]:
    return sorted(uuids.index(i) for i in ids)


def test_nvlink_island_first() -> None:
    p, u = _plan(ISLANDS)
    assert idx(preferred(u, [], 4, p), u) == [0, 1, 2, 3]
    # 0 and 1 are taken: two more stay in island A rather than breaking island B
    assert idx(preferred(u[2:], [], 2, p), u) == [2, 3]
    # one device: finish the half-used island
    assert idx(preferred(u[1:], [], 1, p), u) == [1]


def test_nvlink_beats_numa() -> None:
    # 0-1 share NUMA 0 but no link; 1-2 are linked across NUMA nodes
    p, u = _plan({"count": 3, "numaNodes": [0, 0, 1], "nvlinks": [{"between": [1, 2], "links": 2}]})
    assert idx(preferred(u, [], 2, p), u) == [1, 2]


def test_numa_without_nvlink_and_best_fit() -> None:
    p, u = _plan({"count": 8, "numaNodes": [0, 0, 0, 0, 1, 1, 1, 1]})
    assert idx(preferred(u, [], 4, p), u) == [0, 1, 2, 3]
    assert idx(preferred([u[i] for i in (1, 2, 3, 4, 5, 6, 7)], [], 2, p), u) == [1, 2]
    assert idx(preferred([u[i] for i in (3, 4, 5, 6, 7)], [], 1, p), u) == [3]


def test_must_include_and_short_and_unknown() -> None:
    p, u = _plan(ISLANDS)
    got = preferred(u, [u[5]], 2, p)
    assert got[0] == u[5] and idx(got, u)[0] >= 4
    assert idx(preferred([u[0], u[4], "GPU-unknown"], [], 3, p), u) == [0, 4]
    assert preferred(u, [u[2], u[3]], 1, p) == [u[2]]


def test_large_node_uses_greedy_search() -> None:
    doc = {"count": 24, "nvlinkIslands": [list(range(0, 8)), list(range(8, 16)), list(range(16, 24))]}
    p, u = _plan(doc)
    assert idx(preferred(u[3:], [], 8, p), u) == list(range(8, 16))


def test_replicas_are_distributed() -> None:
    cfg = {"sharing": {"timeSlicing": {"resources": [{"name": "sro.dev/simulated-gpu", "replicas": 4}]}}}
    p, u = _plan({"count": 3}, cfg)
    all_ids = [a.id for a in p.devices]
    got = preferred(all_ids, [], 3, p)
    assert sorted(i.split("::")[0] for i in got) == sorted(u)
    # GPU 0 has 3 replicas in use: prefer the others
    avail = [i for i in all_ids if i not in (f"{u[0]}::1", f"{u[0]}::2", f"{u[0]}::3")]
    got = preferred(avail, [], 2, p)
    assert {i.split("::")[0] for i in got} == {u[1], u[2]}
