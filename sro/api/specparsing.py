"""Reading a SpecialResource's spec into its typed records (`sro.api.specialresource`).

The API server already refuses what the schema forbids (with the field named); `parse_spec` repeats
those checks (unit tests and hollow clusters feed it specs no API server saw) and adds the ones a
schema cannot express (a name too long for label keys, a driver image template with an unknown
variable), raising `SpecError` naming the field, which the operator shows as the `Degraded` condition.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from sro.api.names import DRIVER, LABEL_NAME_MAX, PREFIX, longest_label_name
from sro.api.selectors import parse_selector
from sro.api.specialresource import (
    DISABLED_BY_DEFAULT,
    IMAGE_TEMPLATE_VARS,
    PREEMPTION_POLICIES,
    PRIORITY_MAX,
    PRIORITY_MIN,
    PROBE_HANDLERS,
    PROBE_TIMINGS,
    STATE_FIELDS,
    VALIDATION_TIMEOUT_MAX,
    DrainSpec,
    DriverSpec,
    PartitioningSpec,
    PriorityClassSpec,
    QuotaSpec,
    SpecError,
    SpecialResourceSpec,
    StateSpec,
    UpgradePolicy,
    WaitForCompletionSpec,
)


def _str(doc: Mapping[str, Any], key: str, where: str, default: str = "") -> str:
    value = doc.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise SpecError(f"{where}.{key}: expected a string, got {value!r}")
    return value


def _bool(doc: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = doc.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"{where}.{key}: expected true or false, got {value!r}")
    return value


def _mapping(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key) or {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}.{key}: expected an object, got {value!r}")
    return value


def _strings(doc: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = doc.get(key) or []
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not all(isinstance(v, str) for v in value)
    ):
        raise SpecError(f"{where}.{key}: expected a list of strings, got {value!r}")
    return tuple(value)


def _probe(doc: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """A Kubernetes container probe: exactly one handler (httpGet, tcpSocket or exec) and timings."""
    probe = _mapping(doc, key, where)
    if not probe:
        return {}
    at = f"{where}.{key}"
    handlers = [h for h in PROBE_HANDLERS if h in probe]
    if len(handlers) != 1:
        raise SpecError(f"{at}: needs exactly one of {', '.join(PROBE_HANDLERS)}")
    unknown = sorted(set(probe) - {*PROBE_HANDLERS, *PROBE_TIMINGS})
    if unknown:
        raise SpecError(f"{at}: unknown field(s) {', '.join(unknown)}")
    handler = _mapping(probe, handlers[0], at)
    if handlers[0] in ("httpGet", "tcpSocket") and not isinstance(handler.get("port"), (int, str)):
        raise SpecError(f"{at}.{handlers[0]}.port: required (a number or a port name)")
    if handlers[0] == "exec":
        _strings(handler, "command", f"{at}.exec")
    for t in PROBE_TIMINGS:
        if t in probe:
            _int(probe, t, at, 0 if t == "initialDelaySeconds" else 1, 86_400)
    return dict(probe)


def _state_spec(doc: Mapping[str, Any], where: str, enabled: bool) -> StateSpec:
    env = []
    for i, item in enumerate(doc.get("env") or []):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise SpecError(f"{where}.env[{i}]: expected {{name: ..., value: ...}}, got {item!r}")
        env.append((item["name"], str(item.get("value", ""))))
    return StateSpec(
        enabled=_bool(doc, "enabled", where, enabled),
        image=_str(doc, "image", where),
        image_pull_policy=_str(doc, "imagePullPolicy", where),
        args=_strings(doc, "args", where),
        env=tuple(env),
        resources=dict(_mapping(doc, "resources", where)),
        readiness_probe=_probe(doc, "readinessProbe", where),
        liveness_probe=_probe(doc, "livenessProbe", where),
        timeout_seconds=_int(doc, "timeoutSeconds", where, 0, VALIDATION_TIMEOUT_MAX, 0),
    )


def check_image_template(template: str, where: str) -> None:
    """Refuse a template naming a variable the operator cannot fill (before anything is deployed)."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise SpecError(f"{where}: malformed template {template!r}: {e}") from e
    unknown = sorted({f for f in fields if f not in IMAGE_TEMPLATE_VARS})
    if unknown:
        raise SpecError(
            f"{where}: unknown variable(s) {', '.join('{' + u + '}' for u in unknown)} in {template!r}; "
            f"known: {', '.join('{' + v + '}' for v in IMAGE_TEMPLATE_VARS)}"
        )


def check_driver(spec: SpecialResourceSpec, simulated: bool) -> None:
    """A driver container for real hardware needs its image: sro names no registry of its own."""
    driver_container = spec.state(DRIVER).enabled and spec.driver.mode == "container" and not simulated
    if driver_container and not spec.driver.image_template:
        raise SpecError(
            "spec.driver.imageTemplate: required to run a driver container for this recipe, e.g. "
            "'<your registry>/driver:{version}-{os_id}{os_version}'; or set spec.driver.mode: host "
            "when the driver is installed on the nodes"
        )


def check_name(name: str) -> None:
    longest = longest_label_name(name)
    if len(longest) > LABEL_NAME_MAX:
        raise SpecError(
            f"metadata.name: {name!r} is too long for sro's node label keys ({PREFIX}{longest} has "
            f"{len(longest)} characters after the prefix, at most {LABEL_NAME_MAX}); use a name of at most "
            f"{LABEL_NAME_MAX - (len(longest) - len(name))} characters"
        )


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _int(
    doc: Mapping[str, Any], key: str, where: str, low: int, high: int, default: int | None = None
) -> int:
    value = doc.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise SpecError(f"{where}.{key}: expected a whole number from {low} to {high}, got {value!r}")
    return value


def parse_partitioning(doc: Mapping[str, Any]) -> PartitioningSpec:
    where = "spec.partitioning"
    priorities = []
    names = set()
    for i, item in enumerate(doc.get("priorities") or []):
        at = f"{where}.priorities[{i}]"
        if not isinstance(item, Mapping):
            raise SpecError(f"{at}: expected {{name, value}}")
        name = _str(item, "name", at)
        if not _DNS_SUBDOMAIN.match(name) or len(name) > 253 or name.startswith("system-"):
            raise SpecError(f"{at}.name: {name!r} must be a DNS name not starting with system- (reserved)")
        if name in names:
            raise SpecError(f"{at}.name: {name!r} is listed twice")
        names.add(name)
        policy = _str(item, "preemptionPolicy", at, "PreemptLowerPriority")
        if policy not in PREEMPTION_POLICIES:
            raise SpecError(
                f"{at}.preemptionPolicy: must be one of {', '.join(PREEMPTION_POLICIES)}, got {policy!r}"
            )
        priorities.append(
            PriorityClassSpec(
                name,
                _int(item, "value", at, PRIORITY_MIN, PRIORITY_MAX),
                policy,
                _str(item, "description", at),
            )
        )
    quotas = []
    seen = set()
    for i, item in enumerate(doc.get("quotas") or []):
        at = f"{where}.quotas[{i}]"
        if not isinstance(item, Mapping):
            raise SpecError(f"{at}: expected {{namespace, limit}}")
        ns = _str(item, "namespace", at)
        if not _DNS_LABEL.match(ns) or len(ns) > 63:
            raise SpecError(f"{at}.namespace: {ns!r} is not a namespace name")
        resource = _str(item, "resource", at)
        if (ns, resource) in seen:
            raise SpecError(f"{at}: namespace {ns!r} has a quota for this resource already")
        seen.add((ns, resource))
        limit = _int(item, "limit", at, 0, 1_000_000)
        most = None
        if item.get("maxPerContainer") is not None:
            most = _int(item, "maxPerContainer", at, 1, 1_000_000)
        quotas.append(QuotaSpec(ns, limit, most, resource))
    return PartitioningSpec(_bool(doc, "taint", where, False), tuple(priorities), tuple(quotas))


def _count_or_percent(doc: Mapping[str, Any], key: str, where: str, default: int | str) -> int | str:
    value = doc.get(key, default)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"(\d+)%", value)
        if m and 1 <= int(m.group(1)) <= 100:
            return value
        if value.isdigit() and int(value) >= 1:
            return int(value)
    raise SpecError(
        f"{where}.{key}: expected a count of at least 1 or a percentage from 1% to 100%, got {value!r} "
        "(0 would never let a node upgrade)"
    )


def parse_upgrade_policy(doc: Mapping[str, Any]) -> UpgradePolicy:
    where = "spec.driver.upgradePolicy"
    drain = _mapping(doc, "drain", where)
    at = f"{where}.drain"
    selector = _str(drain, "podSelector", at)
    parse_selector(selector, f"{at}.podSelector")
    wait = _mapping(doc, "waitForCompletion", where)
    wat = f"{where}.waitForCompletion"
    wait_selector = _str(wait, "podSelector", wat)
    parse_selector(wait_selector, f"{wat}.podSelector")
    return UpgradePolicy(
        auto_upgrade=_bool(doc, "autoUpgrade", where, True),
        max_parallel_upgrades=_int(doc, "maxParallelUpgrades", where, 0, 10_000, 1),
        max_unavailable=_count_or_percent(doc, "maxUnavailable", where, "25%"),
        paused=_bool(doc, "paused", where, False),
        timeout_seconds=_int(doc, "timeoutSeconds", where, 1, 86_400, 600),
        drain=DrainSpec(
            enable=_bool(drain, "enable", at, False),
            pod_selector=selector,
            timeout_seconds=_int(drain, "timeoutSeconds", at, 1, 86_400, 300),
            delete_empty_dir=_bool(drain, "deleteEmptyDir", at, False),
            force=_bool(drain, "force", at, False),
        ),
        wait_for_completion=WaitForCompletionSpec(
            pod_selector=wait_selector,
            timeout_seconds=_int(wait, "timeoutSeconds", wat, 0, 86_400, 0),
        ),
    )


def parse_spec(name: str, spec: Mapping[str, Any]) -> SpecialResourceSpec:
    """The typed spec of SpecialResource `name`; raises SpecError naming the first field to fix."""
    check_name(name)
    if not isinstance(spec, Mapping):
        raise SpecError("spec: expected an object")
    recipe = _str(spec, "recipe", "spec")
    if not recipe:
        raise SpecError("spec.recipe: required (a built-in recipe such as simulated-gpu or nvidia-gpu)")
    states = {}
    for state, fld in STATE_FIELDS.items():
        states[state] = _state_spec(
            _mapping(spec, fld, "spec"), f"spec.{fld}", enabled=state not in DISABLED_BY_DEFAULT
        )
    drv = _mapping(spec, "driver", "spec")
    mode = _str(drv, "mode", "spec.driver", "container")
    if mode not in ("container", "host"):
        raise SpecError(f"spec.driver.mode: must be container or host, got {mode!r}")
    template = _str(drv, "imageTemplate", "spec.driver")
    if template:
        check_image_template(template, "spec.driver.imageTemplate")
    selector = _mapping(spec, "nodeSelector", "spec")
    tolerations = spec.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        raise SpecError("spec.tolerations: expected a list of tolerations")
    dp = _mapping(spec, "devicePlugin", "spec")
    dpv = _mapping(spec, "devicePluginValidation", "spec")
    return SpecialResourceSpec(
        recipe=recipe,
        recipe_config_map=_str(spec, "recipeConfigMap", "spec"),
        node_selector={str(k): str(v) for k, v in selector.items()},
        startup_taint=_bool(spec, "startupTaint", "spec", False),
        tolerations=tuple(dict(t) for t in tolerations),
        priority_class_name=_str(spec, "priorityClassName", "spec"),
        custom_manifests=_str(spec, "customManifests", "spec"),
        states=states,
        driver=DriverSpec(
            mode=mode,
            version=_str(drv, "version", "spec.driver"),
            image_template=template,
            devices_config=_str(drv, "devicesConfig", "spec.driver"),
            upgrade_policy=parse_upgrade_policy(_mapping(drv, "upgradePolicy", "spec.driver")),
        ),
        device_plugin_config=_str(dp, "config", "spec.devicePlugin"),
        cuda_sample=_str(dpv, "cudaSample", "spec.devicePluginValidation"),
        partitioning=parse_partitioning(_mapping(spec, "partitioning", "spec")),
    )
