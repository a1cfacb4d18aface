"""Which nodes' container runtimes read CDI specs, from what each Node reports (pure).

Why here and per node: the device plugin names CDI devices (`cdi-annotations`) by default only
where the runtime will apply them; elsewhere it keeps the hook's strategies, with which a pod needs
the `sro` runtime class. The kubelet reports its runtime in `status.nodeInfo.containerRuntimeVersion`
("containerd://1.7.24~ds1", "cri-o://1.28.1"): containerd reads CDI from 1.7 on (once its CRI plugin
has `enable_cdi`, which `sro local up` sets and 2.0 makes the default), CRI-O from 1.23 on (always
on). A runtime that names no version we know (docker, an unparsable one) is taken not to.

Why the plugin is told per node rather than one DaemonSet per runtime: one DaemonSet serves every
node, and a node's runtime changes in place (a containerd upgrade); the operator lists the CDI nodes
in the plugin's ConfigMap (`runtimes.yaml`), which the kubelet refreshes in every plugin pod, and
each plugin finds its own node there by name and reloads. Splitting the DaemonSet by runtime would
restart plugin pods on unrelated nodes whenever one node moved between groups (its template's
affinity would change) and would need a node label to select on. Nodes are listed by name, sorted,
so the ConfigMap changes only when a node joins, leaves or changes its runtime.

A mixed cluster works node by node: a containerd 1.6 node keeps the hook path (pods there need
`runtimeClassName: sro`), a 1.7 node gives devices to any pod that requests them. A 1.7 node whose
containerd has CDI switched off is listed too: its pods still get their device nodes (device-specs
stays in every answer) and, with the runtime class, everything through the hook.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sro.operator.observed import NodeInfo

# runtime -> the first (major, minor) that reads CDI specs
CDI_SINCE = {"containerd": (1, 7), "cri-o": (1, 23)}
_VERSION = re.compile(r"^([a-z0-9.-]+)://v?(\d+)\.(\d+)")


def reads_cdi(runtime_version: str) -> bool:
    """True when the runtime the kubelet reports ("containerd://1.7.24~ds1") reads CDI specs."""
    m = _VERSION.match(runtime_version.strip().lower())
    if m is None:
        return False
    since = CDI_SINCE.get(m[1])
    return since is not None and (int(m[2]), int(m[3])) >= since


def cdi_nodes(nodes: Iterable[NodeInfo]) -> list[str]:
    """The names of the nodes whose runtime reads CDI, sorted."""
    return sorted(n.name for n in nodes if reads_cdi(n.runtime))
