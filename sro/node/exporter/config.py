"""The exporter's configuration file (pure parsing; errors name the field).

Why only `health`: `sro_device_healthy` must say what the device plugin announces, so it takes the
same rules (`sro.devices.health`) with the same policy, in the same shape as the device plugin's
config file. The exporter reads the `health` section and ignores the rest, so the device plugin's
own ConfigMap can be mounted and passed as is (the monitoring manifests do that):

    health:
      enabled: true
      ignoredXids: [13, 31, 43, 45, 68, 109]
      recoverAfterSeconds: 60                # quiet period after a fault clears; null = never
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sro.devices.model import DEFAULT_IGNORED_XIDS

DEFAULT_RECOVER_AFTER = 60.0


class ConfigError(ValueError):
    """The configuration is malformed; the message names the file and field."""


@dataclass(frozen=True)
class HealthPolicy:
    enabled: bool = True
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    recover_after: float | None = DEFAULT_RECOVER_AFTER


def parse(doc: Any) -> HealthPolicy:
    if doc is None:
        return HealthPolicy()
    if not isinstance(doc, Mapping):
        raise ConfigError(f"top level: expected a mapping, got {type(doc).__name__}")
    health = doc.get("health") or {}
    if not isinstance(health, Mapping):
        raise ConfigError(f"health: expected a mapping, got {type(health).__name__}")
    unknown = sorted(set(health) - {"enabled", "ignoredXids", "recoverAfterSeconds"})
    if unknown:
        raise ConfigError(f"health: unknown field(s) {unknown}")
    enabled = health.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"health.enabled: expected true or false, got {enabled!r}")
    xids = health.get("ignoredXids", sorted(DEFAULT_IGNORED_XIDS))
    if not isinstance(xids, list) or any(
        isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in xids
    ):
        raise ConfigError(f"health.ignoredXids: expected a list of non-negative integers, got {xids!r}")
    recover = health.get("recoverAfterSeconds", DEFAULT_RECOVER_AFTER)
    if recover is not None and (
        isinstance(recover, bool) or not isinstance(recover, int | float) or recover < 0
    ):
        raise ConfigError(
            f"health.recoverAfterSeconds: expected seconds >= 0 or null (never), got {recover!r}"
        )
    return HealthPolicy(enabled, frozenset(xids), None if recover is None else float(recover))


def load(path: Path) -> HealthPolicy:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not YAML: {e}") from e
    try:
        return parse(doc)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
