"""Reading a SpecialResource's spec into its typed records (`sro.api.specialresource`).

Every field is read through the table the CRD's schema is rendered from (`sro.api.specfields`): the
spec is first checked against it as the API server would (unit tests and hollow clusters feed specs
no API server saw), then the checks a schema cannot express are added (a name too long for label
keys, a driver image template with an unknown variable, duplicate names, a probe with two handlers,
a pod selector), each raising `SpecError` naming the field, which the operator shows as the
`Degraded` condition.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from sro.api.names import DRIVER, LABEL_NAME_MAX, PREFIX, longest_label_name
from sro.api.openapi import Field, FieldError, check
from sro.api.recipes import SIMULATED_PERSONALITIES, Recipe, RecipeError, on_simulated_driver
from sro.api.selectors import parse_selector
from sro.api.specfields import (
    COUNT_OR_PERCENT,
    DNS_LABEL,
    IMAGE_MAX,
    PARTITIONING,
    REMEDIATION,
    SPEC,
    UPGRADE_POLICY,
    WINDOW_MAX,
)
from sro.api.specialresource import (
    FAULT_CLASS_FIELDS,
    IMAGE_TEMPLATE_VARS,
    STATE_FIELDS,
    DrainSpec,
    DriverSpec,
    PartitioningSpec,
    PriorityClassSpec,
    QuotaSpec,
    RemediationSpec,
    SpecError,
    SpecialResourceSpec,
    StateSpec,
    UpgradePolicy,
    WaitForCompletionSpec,
)

PROBE_HANDLERS: Final = ("httpGet", "tcpSocket", "exec")
LABEL_VALUE_MAX: Final = 63  # a node label's value: what {kernel}, {os_id}, ... can be at most
_DNS_LABEL = re.compile(DNS_LABEL)
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _get(doc: Mapping[str, Any], f: Field) -> Any:
    """The field's value in an already checked `doc`, or what an absent field reads as."""
    value = doc.get(f.name)
    return f.empty() if value is None else value


def check_image_template(template: str, where: str, version: str = "") -> None:
    """Refuse a template the operator cannot fill safely (before anything is deployed): only the
    documented variables, bare — `{version}`, never `{version!r}`, `{version:>100000000}`,
    `{version:{foo}}` or `{version.x}` — and an image of at most IMAGE_MAX characters whatever the
    node's labels (each at most 63) and the driver version."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise SpecError(f"{where}: malformed template {template!r}: {e}") from e
    fields = [f for _, f, _, _ in parsed if f is not None]
    unknown = sorted({f for f in fields if f not in IMAGE_TEMPLATE_VARS})
    if unknown:
        raise SpecError(
            f"{where}: unknown variable(s) {', '.join('{' + u + '}' for u in unknown)} in {template!r}; "
            f"known: {', '.join('{' + v + '}' for v in IMAGE_TEMPLATE_VARS)}"
        )
    for _, f, spec, conversion in parsed:
        if f is not None and (spec or conversion):
            raise SpecError(
                f"{where}: {{{f}}} takes no format spec or conversion in {template!r}; "
                f"write the variable bare: {{{f}}}"
            )
    longest = sum(len(text) for text, _, _, _ in parsed)
    longest += sum(len(version) if f == "version" else LABEL_VALUE_MAX for f in fields)
    if longest > IMAGE_MAX:
        raise SpecError(
            f"{where}: the image it makes can be {longest} characters long, more than {IMAGE_MAX} "
            "(node label values count up to 63 each)"
        )


def check_driver(spec: SpecialResourceSpec, simulated: bool) -> None:
    """A driver container for real hardware needs its image: sro names no registry of its own. A
    simulated driver stands in only for a recipe it has a personality for (a built-in one)."""
    if spec.driver.mode == "simulated" and (
        spec.recipe_config_map or spec.recipe not in SIMULATED_PERSONALITIES
    ):
        raise SpecError(
            f"spec.driver.mode: simulated runs sro's simulated driver, which can stand in only for the "
            f"built-in recipes ({', '.join(sorted(SIMULATED_PERSONALITIES))}), not for the custom recipe "
            f"{spec.recipe!r}; set spec.driver.mode to container (with spec.driver.imageTemplate) or host, "
            "or use spec.recipe: simulated-gpu"
        )
    driver_container = spec.state(DRIVER).enabled and spec.driver.mode == "container" and not simulated
    if driver_container and not spec.driver.image_template:
        raise SpecError(
            "spec.driver.imageTemplate: required to run a driver container for this recipe, e.g. "
            "'<your registry>/driver:{version}-{os_id}{os_version}'; or set spec.driver.mode: host "
            "when the driver is installed on the nodes"
        )


def with_driver_mode(spec: SpecialResourceSpec, recipe: Recipe) -> tuple[SpecialResourceSpec, Recipe]:
    """The spec and recipe the operator deploys (after `check_driver`). `mode: simulated` puts a real
    recipe on sro's simulated driver (its driver root, `recipes.on_simulated_driver`); simulated-gpu's
    driver is simulated in every mode, so there `simulated` is `container`: the same objects and the
    same driver revision, nothing restarts when a spec switches between the two."""
    if spec.driver.mode != "simulated":
        return spec, recipe
    if recipe.simulated:
        return replace(spec, driver=replace(spec.driver, mode="container")), recipe
    try:
        return spec, on_simulated_driver(recipe)
    except RecipeError as e:
        raise SpecError(f"spec.driver.mode: {e}") from None


def check_name(name: str) -> None:
    longest = longest_label_name(name)
    if len(longest) > LABEL_NAME_MAX:
        raise SpecError(
            f"metadata.name: {name!r} is too long for sro's node label keys ({PREFIX}{longest} has "
            f"{len(longest)} characters after the prefix, at most {LABEL_NAME_MAX}); use a name of at most "
            f"{LABEL_NAME_MAX - (len(longest) - len(name))} characters"
        )


def _probe(doc: Mapping[str, Any], f: Field, where: str) -> dict[str, Any]:
    """A Kubernetes container probe: exactly one handler (httpGet, tcpSocket or exec) and timings."""
    probe = _get(doc, f)
    if not probe:
        return {}
    at = f"{where}.{f.name}"
    handlers = [h for h in PROBE_HANDLERS if probe.get(h) is not None]
    if len(handlers) != 1:
        raise SpecError(f"{at}: needs exactly one of {', '.join(PROBE_HANDLERS)}")
    unknown = sorted(set(probe) - {c.name for c in f.fields})
    if unknown:
        raise SpecError(f"{at}: unknown field(s) {', '.join(unknown)}")
    return dict(probe)


def _state_spec(doc: Mapping[str, Any], f: Field, where: str) -> StateSpec:
    names = {c.name for c in f.fields}
    return StateSpec(
        enabled=_get(doc, f["enabled"]),
        image=_get(doc, f["image"]),
        image_pull_policy=_get(doc, f["imagePullPolicy"]),
        args=tuple(_get(doc, f["args"])),
        env=tuple((item["name"], item.get("value") or "") for item in _get(doc, f["env"])),
        resources=dict(_get(doc, f["resources"])),
        readiness_probe=_probe(doc, f["readinessProbe"], where),
        liveness_probe=_probe(doc, f["livenessProbe"], where),
        timeout_seconds=_get(doc, f["timeoutSeconds"]) if "timeoutSeconds" in names else 0,
    )


def _partitioning(doc: Mapping[str, Any]) -> PartitioningSpec:
    """`spec.partitioning` (checked against its fields): PriorityClasses and quotas, named once each."""
    where = "spec.partitioning"
    priority, quota = PARTITIONING["priorities"], PARTITIONING["quotas"]
    priorities = []
    names = set()
    for i, item in enumerate(_get(doc, priority)):
        at = f"{where}.priorities[{i}]"
        name = _get(item, priority["name"])
        if not _DNS_SUBDOMAIN.match(name) or name.startswith("system-"):
            raise SpecError(f"{at}.name: {name!r} must be a DNS name not starting with system- (reserved)")
        if name in names:
            raise SpecError(f"{at}.name: {name!r} is listed twice")
        names.add(name)
        priorities.append(
            PriorityClassSpec(
                name,
                _get(item, priority["value"]),
                _get(item, priority["preemptionPolicy"]),
                _get(item, priority["description"]),
            )
        )
    quotas = []
    seen = set()
    for i, item in enumerate(_get(doc, quota)):
        at = f"{where}.quotas[{i}]"
        ns = _get(item, quota["namespace"])
        if not _DNS_LABEL.match(ns):
            raise SpecError(f"{at}.namespace: {ns!r} is not a namespace name")
        resource = _get(item, quota["resource"])
        if (ns, resource) in seen:
            raise SpecError(f"{at}: namespace {ns!r} has a quota for this resource already")
        seen.add((ns, resource))
        quotas.append(
            QuotaSpec(ns, _get(item, quota["limit"]), _get(item, quota["maxPerContainer"]), resource)
        )
    return PartitioningSpec(_get(doc, PARTITIONING["taint"]), tuple(priorities), tuple(quotas))


def _count_or_percent(doc: Mapping[str, Any], f: Field, where: str) -> int | str:
    """A count of at least 1 (a number, or digits in a string) or a percentage from 1% to 100%."""
    value = _get(doc, f)
    if isinstance(value, int) and value >= 1:
        return value
    if isinstance(value, str) and re.search(COUNT_OR_PERCENT, value):
        return int(value) if value.isdigit() else value
    raise SpecError(
        f"{where}.{f.name}: expected a count of at least 1 or a percentage from 1% to 100%, got {value!r} "
        "(0 would never let a node through)"
    )


def _upgrade_policy(doc: Mapping[str, Any]) -> UpgradePolicy:
    """`spec.driver.upgradePolicy` (checked against its fields), with its pod selectors parsed."""
    where = "spec.driver.upgradePolicy"
    pol = UPGRADE_POLICY
    drain_f, wait_f = pol["drain"], pol["waitForCompletion"]
    drain, wait = _get(doc, drain_f), _get(doc, wait_f)
    selector = _get(drain, drain_f["podSelector"])
    parse_selector(selector, f"{where}.drain.podSelector")
    wait_selector = _get(wait, wait_f["podSelector"])
    parse_selector(wait_selector, f"{where}.waitForCompletion.podSelector")
    return UpgradePolicy(
        auto_upgrade=_get(doc, pol["autoUpgrade"]),
        max_parallel_upgrades=_get(doc, pol["maxParallelUpgrades"]),
        max_unavailable=_count_or_percent(doc, pol["maxUnavailable"], where),
        paused=_get(doc, pol["paused"]),
        timeout_seconds=_get(doc, pol["timeoutSeconds"]),
        drain=DrainSpec(
            enable=_get(drain, drain_f["enable"]),
            pod_selector=selector,
            timeout_seconds=_get(drain, drain_f["timeoutSeconds"]),
            delete_empty_dir=_get(drain, drain_f["deleteEmptyDir"]),
            force=_get(drain, drain_f["force"]),
        ),
        wait_for_completion=WaitForCompletionSpec(
            pod_selector=wait_selector, timeout_seconds=_get(wait, wait_f["timeoutSeconds"])
        ),
    )


_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600}


def _remediation(doc: Mapping[str, Any]) -> RemediationSpec:
    """`spec.remediation` (checked against its fields). The API server prunes a field its schema
    lacks, so an unknown fault class is refused here, naming it, for the objects no API server saw."""
    where = "spec.remediation"
    rem = REMEDIATION
    actions_f = rem["actions"]
    actions = _get(doc, actions_f)
    unknown = sorted(set(actions) - set(FAULT_CLASS_FIELDS.values()))
    if unknown:
        raise SpecError(
            f"{where}.actions: unknown fault class(es) {', '.join(unknown)}; "
            f"known: {', '.join(FAULT_CLASS_FIELDS.values())}"
        )
    window = _get(doc, rem["window"])
    seconds = int(window[:-1]) * _UNIT_SECONDS[window[-1]]
    if seconds > WINDOW_MAX:
        raise SpecError(f"{where}.window: {window!r} is longer than {WINDOW_MAX // 3600}h")
    return RemediationSpec(
        actions={cls: _get(actions, actions_f[fld]) for cls, fld in FAULT_CLASS_FIELDS.items()},
        max_concurrent_nodes=_get(doc, rem["maxConcurrentNodes"]),
        max_unavailable=_count_or_percent(doc, rem["maxUnavailable"], where),
        max_attempts=_get(doc, rem["maxAttempts"]),
        window_seconds=seconds,
        dry_run=_get(doc, rem["dryRun"]),
        paused=_get(doc, rem["paused"]),
    )


def parse_spec(name: str, spec: Mapping[str, Any]) -> SpecialResourceSpec:
    """The typed spec of SpecialResource `name`; raises SpecError naming the first field to fix."""
    check_name(name)
    if not isinstance(spec, Mapping):
        raise SpecError("spec: expected an object")
    if spec.get("recipe") in (None, ""):
        raise SpecError("spec.recipe: required (a built-in recipe such as simulated-gpu or nvidia-gpu)")
    try:
        check(spec, SPEC, "spec")
    except FieldError as e:
        raise SpecError(str(e)) from None
    states = {
        state: _state_spec(_get(spec, SPEC[fld]), SPEC[fld], f"spec.{fld}")
        for state, fld in STATE_FIELDS.items()
    }
    drv_f, dp_f, dpv_f = SPEC["driver"], SPEC["devicePlugin"], SPEC["devicePluginValidation"]
    drv = _get(spec, drv_f)
    template = _get(drv, drv_f["imageTemplate"])
    if template:
        check_image_template(template, "spec.driver.imageTemplate", _get(drv, drv_f["version"]))
    return SpecialResourceSpec(
        recipe=spec["recipe"],
        recipe_config_map=_get(spec, SPEC["recipeConfigMap"]),
        node_selector=dict(_get(spec, SPEC["nodeSelector"])),
        startup_taint=_get(spec, SPEC["startupTaint"]),
        tolerations=tuple(dict(t) for t in _get(spec, SPEC["tolerations"])),
        priority_class_name=_get(spec, SPEC["priorityClassName"]),
        custom_manifests=_get(spec, SPEC["customManifests"]),
        states=states,
        driver=DriverSpec(
            mode=_get(drv, drv_f["mode"]),
            version=_get(drv, drv_f["version"]),
            image_template=template,
            devices_config=_get(drv, drv_f["devicesConfig"]),
            upgrade_policy=_upgrade_policy(_get(drv, drv_f["upgradePolicy"])),
        ),
        device_plugin_config=_get(_get(spec, dp_f), dp_f["config"]),
        cuda_sample=_get(_get(spec, dpv_f), dpv_f["cudaSample"]),
        partitioning=_partitioning(_get(spec, PARTITIONING)),
        remediation=_remediation(_get(spec, REMEDIATION)),
    )
