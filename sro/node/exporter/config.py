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
from pathlib import Path
from typing import Any

from sro.api.yamltext import load_yaml_file
from sro.devices.health import HealthPolicy, parse_policy


class ConfigError(ValueError):
    """The configuration is malformed; the message names the file and field."""


def parse(doc: Any) -> HealthPolicy:
    if doc is None:
        return HealthPolicy()
    if not isinstance(doc, Mapping):
        raise ConfigError(f"top level: expected a mapping, got {type(doc).__name__}")
    health = doc.get("health") or {}
    if not isinstance(health, Mapping):
        raise ConfigError(f"health: expected a mapping, got {type(health).__name__}")
    try:
        return parse_policy(health)
    except ValueError as e:
        raise ConfigError(str(e)) from e


def load(path: Path) -> HealthPolicy:
    return load_yaml_file(path, parse, ConfigError)
