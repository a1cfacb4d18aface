"""The feature sources, in order, and one discovery pass over them.

ONE explicit tuple lists every source; the order is the order of discovery and, where two sources
produce the same label (a local feature file overriding a built-in one), the later wins.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from sro.host.reading import HostReader, PassCache, Recording
from sro.host.root import HostRoot
from sro.node.discovery import (
    accelerators,
    cpu,
    custom,
    kernel,
    local,
    memory,
    network,
    pci,
    storage,
    system,
    usb,
)
from sro.node.discovery.config import Config
from sro.node.discovery.features import Features, FeatureSource, SourceResult

log = logging.getLogger(__name__)

SOURCES: tuple[FeatureSource, ...] = (
    cpu.SOURCE,
    kernel.SOURCE,
    memory.SOURCE,
    network.SOURCE,
    pci.SOURCE,
    storage.SOURCE,
    system.SOURCE,
    usb.SOURCE,
    accelerators.SOURCE,
    custom.SOURCE,  # NFD's priority: custom rules after the built-in sources, local feature files last
    local.SOURCE,
)
SOURCE_NAMES: tuple[str, ...] = tuple(s.name for s in SOURCES)


def scan(
    host: HostRoot,
    config: Config,
    sources: Sequence[FeatureSource] = SOURCES,
    recording: Recording | None = None,
    visited: set[Path | str] | None = None,
) -> tuple[SourceResult, ...]:
    """Run every enabled source; a source that fails outright yields no features and a problem.

    The sources' readers share one PassCache: a file two sources read is read once per pass.
    `visited`, if given, collects every path the pass looked at (HostReader.visited)."""
    results = []
    cache = PassCache()
    for source in sources:
        if not (config.feature_enabled(source.name) or config.label_enabled(source.name)):
            continue
        reader = HostReader(host, recording=recording, cache=cache, visited=visited)
        try:
            features = source.discover(reader, config)
        except Exception as e:  # a bug or a very odd host must cost one source, never the pass
            log.exception("feature source %s failed", source.name)
            reader.problem(f"source {source.name}", f"failed: {type(e).__name__}: {e}")
            features = Features()
        results.append(SourceResult(source.name, features, tuple(reader.problems), tuple(reader.warnings)))
    return tuple(results)
