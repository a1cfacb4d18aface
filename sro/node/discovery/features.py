"""The raw feature model every source returns, and the tiny protocol a source implements.

Mirrors NFD's model (flags, attributes, instances per feature name) so that the same facts NFD's
NodeFeature objects carry are available for rules and for `sro discover --output json`; labels are
derived from features by a separate pure step, never read from the node directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sro.api.names import NFD_PREFIX
from sro.host.reading import HostReader, Problem

if TYPE_CHECKING:
    from sro.node.discovery.config import Config

Attrs = Mapping[str, str]


@dataclass(frozen=True)
class Features:
    """One source's raw features: flag sets, attribute maps and instance lists, by feature name."""

    flags: Mapping[str, frozenset[str]] = field(default_factory=dict)
    attributes: Mapping[str, Attrs] = field(default_factory=dict)
    instances: Mapping[str, tuple[Attrs, ...]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "flags": {k: sorted(v) for k, v in sorted(self.flags.items())},
            "attributes": {k: dict(sorted(v.items())) for k, v in sorted(self.attributes.items())},
            "instances": {k: [dict(sorted(i.items())) for i in v] for k, v in sorted(self.instances.items())},
        }


@dataclass(frozen=True)
class SourceResult:
    """What one source found in one pass; any problem marks the source degraded for that pass."""

    source: str
    features: Features
    problems: tuple[Problem, ...] = ()  # failed reads: the source's old labels are kept
    warnings: tuple[Problem, ...] = ()  # bad content read fine: reported only

    @property
    def degraded(self) -> bool:
        return bool(self.problems)


class FeatureSource(Protocol):
    """A feature source: `discover` reads (through the reader only), `labels` is pure."""

    @property
    def name(self) -> str: ...

    def discover(self, reader: HostReader, config: Config) -> Features: ...

    def labels(self, features: Features, config: Config) -> dict[str, str]: ...


def nfd_key(source: str, name: str) -> str:
    """NFD's label key for a source's feature: `feature.node.kubernetes.io/<source>-<name>`."""
    return f"{NFD_PREFIX}{source}-{name}"


def is_hex(value: str, digits: int | None = None) -> bool:
    ok = bool(value) and not value.strip("0123456789abcdef")  # strip leaves any other character
    return ok and (digits is None or len(value) == digits)
