"""Hollow nodes as data: the config file, each node's name, labels, taints, port and probe address,
the failure rules, and whether the machine can hold them (pure, no I/O).

Why apart from `hollow.py`: everything decided about a hollow node — which kernel and OS it
pretends to run, which NFD labels say so, which port its kubelet takes, which loopback address its
probes reach the rules server on, which of its states fail — is decided here from the file and a
count, so unit tests check it without starting anything.

A hollow node is kubemark's `--morph=kubelet`: a real kubelet with a fake container runtime. It
reports a fixed kernel (3.16.0) and OS (Debian 7) of its own, so kernel and OS variety comes from the
NFD labels it registers with (`feature.node.kubernetes.io/kernel-version.*`, `system-os_release.*`),
which is all the operator reads. Its containers run "successfully" whatever their command; what can
be steered is an `httpGet` probe: each hollow node resolves the host name `PROBE_HOST` (its own
/etc/hosts, in its own mount namespace) to a loopback address of its own, so the rules server
knows which node asks by the address the probe reached, and answers per node and state.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from sro.api.names import DEVICE_PLUGIN_VALIDATION, DRIVER_VALIDATION, NFD_PREFIX, STATE_NAMES
from sro.api.yamltext import yaml_error
from sro.local.pki import CertSpec

VALIDATION_STATES = (DRIVER_VALIDATION, DEVICE_PLUGIN_VALIDATION)  # run-to-completion pods
HOLLOW_LABEL = "sro.dev/hollow"  # =true on every hollow node, whatever the config says
PROBE_HOST = "sro-hollow-rules"  # what operand probes name; each hollow node resolves it to its own address
PROBE_NET = (127, 77)  # node i answers on 127.77.<i // 250>.<i % 250 + 1>
MAX_HOLLOW_NODES = 250 * 256
# Measured on this kind of machine (Kubernetes 1.20.2): an idle hollow node takes about 25 MiB of
# private memory and 0.3 % of a core; 150 per core leaves room for the control plane and pod churn.
MIB_PER_NODE = 25
NODES_PER_CORE = 150
MEMORY_RESERVE_MIB = 2048  # left to the control plane, containerd and the rest of the machine

DEFAULT_CONFIG = """\
# Hollow nodes: `sro local up --hollow-nodes N [--hollow-config THIS FILE]`.
# Node i is named <namePrefix>-<i> and pretends to run systems[i % len(systems)].
namePrefix: hollow
# Labels every hollow node registers with (kubernetes.io/ and k8s.io/ keys are refused).
# (Every hollow node also gets sro.dev/hollow=true, which `sro local down` finds them by.)
labels:
  # what discovery publishes on a node with 8 simulated GPUs (discovery cannot run on a hollow node)
  sro.dev/simulated-gpu.count: "8"
# Taints every hollow node registers with. NoExecute keeps off every pod that does not tolerate it
# by name (sro's operator tolerates every NoSchedule taint; discovery tolerates all and runs there,
# as a fake); a SpecialResource for hollow nodes lists it in spec.tolerations.
taints:
  - sro.dev/hollow=true:NoExecute
# Extended resources patched into the Node's status.capacity (the scheduler honours them).
capacity:
  sro.dev/simulated-gpu: "8"
# Kernel and OS, as NFD labels: kernel-version.{full,major,minor,revision},
# system-os_release.{ID,VERSION_ID,VERSION_ID.major,VERSION_ID.minor}.
systems:
  - {kernel: 6.1.0-18-amd64, osId: debian, osVersion: "12"}
  - {kernel: 5.10.0-28-amd64, osId: debian, osVersion: "11"}
  - {kernel: 5.15.0-91-generic, osId: ubuntu, osVersion: "22.04"}
# Failure rules: the named state's probes fail on the named nodes (a name or a shell pattern).
# A probe of a SpecialResource state reaches http://sro-hollow-rules:<port>/healthy/<state> (200, or
# 503 when a rule matches) or, for validation pods, /running/<state> (503 once the validation is
# done: the liveness probe ends the container, Succeeded; 200 forever when a rule matches, so the
# pod runs into its deadline, Failed).
failures: []
#  - {node: hollow-2, state: driver}
#  - {node: "hollow-1?", state: driver-validation}
"""


class HollowConfigError(ValueError):
    """The hollow node config (or the count asked for) cannot work; the message names the field."""


@dataclass(frozen=True)
class System:
    kernel: str
    os_id: str
    os_version: str

    def labels(self) -> dict[str, str]:
        """The NFD labels node-feature-discovery publishes for this kernel and OS."""
        out = {f"{NFD_PREFIX}kernel-version.full": self.kernel}
        m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", self.kernel)
        if m:
            out[f"{NFD_PREFIX}kernel-version.major"] = m.group(1)
            out[f"{NFD_PREFIX}kernel-version.minor"] = m.group(2)
            out[f"{NFD_PREFIX}kernel-version.revision"] = m.group(3) or "0"
        out[f"{NFD_PREFIX}system-os_release.ID"] = self.os_id
        out[f"{NFD_PREFIX}system-os_release.VERSION_ID"] = self.os_version
        major, _, minor = self.os_version.partition(".")
        if major.isdigit():
            out[f"{NFD_PREFIX}system-os_release.VERSION_ID.major"] = major
        if minor.isdigit():
            out[f"{NFD_PREFIX}system-os_release.VERSION_ID.minor"] = minor
        return out


@dataclass(frozen=True)
class FailureRule:
    node: str  # a node name or a shell pattern (fnmatch)
    state: str

    def matches(self, node: str, state: str) -> bool:
        return state == self.state and fnmatch.fnmatchcase(node, self.node)


@dataclass(frozen=True)
class HollowConfig:
    name_prefix: str = "hollow"
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()
    capacity: Mapping[str, str] = field(default_factory=dict)
    systems: tuple[System, ...] = ()
    failures: tuple[FailureRule, ...] = ()

    def node_name(self, i: int) -> str:
        return f"{self.name_prefix}-{i}"

    def system(self, i: int) -> System:
        return self.systems[i % len(self.systems)]

    def node_labels(self, i: int) -> dict[str, str]:
        return {**self.labels, **self.system(i).labels(), HOLLOW_LABEL: "true"}

    def fails(self, node: str, state: str) -> bool:
        return any(r.matches(node, state) for r in self.failures)


# ---- parsing -----------------------------------------------------------------------------------
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_TAINT = re.compile(r"^([^=:\s]+)(?:=([^:\s]*))?:(NoSchedule|PreferNoSchedule|NoExecute)$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+$")
KNOWN_KEYS = ("namePrefix", "labels", "taints", "capacity", "systems", "failures")


def _check_label(key: str, value: str, where: str) -> None:
    if not _LABEL_KEY.match(key) or len(key.rpartition("/")[2]) > 63:
        raise HollowConfigError(f"{where}: {key!r} is not a label key")
    if not kubelet_may_set(key):
        raise HollowConfigError(
            f"{where}: {key!r}: a kubelet may not register labels under {key.rpartition('/')[0]} "
            "(only kubelet.kubernetes.io, node.kubernetes.io and their subdomains, e.g. "
            "feature.node.kubernetes.io, of the Kubernetes namespaces)"
        )
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise HollowConfigError(f"{where}: {value!r} (for {key}) is not a label value")


def _in(domain: str, namespace: str) -> bool:
    return domain == namespace or domain.endswith("." + namespace)


def kubelet_may_set(key: str) -> bool:
    """The kubelet's own rule for --node-labels (and NodeRestriction's): keys under kubernetes.io or
    k8s.io (or a subdomain) only in the kubelet.kubernetes.io and node.kubernetes.io namespaces."""
    domain = key.rpartition("/")[0]
    if not (_in(domain, "kubernetes.io") or _in(domain, "k8s.io")):
        return True
    return _in(domain, "kubelet.kubernetes.io") or _in(domain, "node.kubernetes.io")


def _mapping(doc: Mapping[str, Any], key: str) -> dict[str, str]:
    value = doc.get(key) or {}
    if not isinstance(value, Mapping):
        raise HollowConfigError(f"{key}: expected a mapping, got {value!r}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or isinstance(v, (Mapping, list)) or v is None:
            raise HollowConfigError(f"{key}.{k}: expected a string value, got {v!r}")
        out[k] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def _system(item: Any, where: str) -> System:
    if not isinstance(item, Mapping):
        raise HollowConfigError(f"{where}: expected {{kernel, osId, osVersion}}, got {item!r}")
    values = []
    for key in ("kernel", "osId", "osVersion"):
        value = item.get(key)
        if value is None or isinstance(value, (Mapping, list, bool)):
            raise HollowConfigError(f"{where}.{key}: required (a string)")
        values.append(str(value))
    unknown = sorted(set(item) - {"kernel", "osId", "osVersion"})
    if unknown:
        raise HollowConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
    system = System(*values)
    for k, v in system.labels().items():
        _check_label(k, v, where)
    return system


def _failure(item: Any, where: str) -> FailureRule:
    if not isinstance(item, Mapping):
        raise HollowConfigError(f"{where}: expected {{node, state}}, got {item!r}")
    node = item.get("node")
    if not isinstance(node, str) or not node.strip():
        raise HollowConfigError(f"{where}.node: a failure rule must name a node (a name or a shell pattern)")
    state = item.get("state")
    if state not in STATE_NAMES:
        raise HollowConfigError(f"{where}.state: {state!r} is not a state; one of {', '.join(STATE_NAMES)}")
    unknown = sorted(set(item) - {"node", "state"})
    if unknown:
        raise HollowConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
    return FailureRule(node.strip(), str(state))


def parse_config(text: str) -> HollowConfig:
    """The config file's text as a HollowConfig; HollowConfigError names the first field to fix."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise HollowConfigError(f"not valid YAML: {yaml_error(e)}") from e
    doc = doc or {}
    if not isinstance(doc, Mapping):
        raise HollowConfigError("expected a mapping at the top")
    unknown = sorted(set(doc) - set(KNOWN_KEYS))
    if unknown:
        raise HollowConfigError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(KNOWN_KEYS)}")
    prefix = str(doc.get("namePrefix", "hollow"))
    if not _NAME.match(prefix) or len(prefix) > 40:
        raise HollowConfigError(f"namePrefix: {prefix!r} must be a DNS label of at most 40 characters")
    labels = _mapping(doc, "labels")
    for k, v in labels.items():
        _check_label(k, v, f"labels.{k}")
    taints = doc.get("taints") or []
    if not isinstance(taints, list):
        raise HollowConfigError(f"taints: expected a list of key[=value]:Effect, got {taints!r}")
    for i, t in enumerate(taints):
        if not isinstance(t, str) or not _TAINT.match(t):
            raise HollowConfigError(
                f"taints[{i}]: {t!r} is not key[=value]:NoSchedule|PreferNoSchedule|NoExecute"
            )
    capacity = _mapping(doc, "capacity")
    for k, v in capacity.items():
        if "/" not in k or not _LABEL_KEY.match(k):
            raise HollowConfigError(
                f"capacity.{k}: an extended resource needs a domain (vendor.example/name)"
            )
        if not _QUANTITY.match(v):
            raise HollowConfigError(f"capacity.{k}: expected a whole number, got {v!r}")
    systems_doc = doc.get("systems")
    if systems_doc is None:
        systems_doc = yaml.safe_load(DEFAULT_CONFIG)["systems"]
    if not isinstance(systems_doc, list) or not systems_doc:
        raise HollowConfigError("systems: expected a non-empty list of {kernel, osId, osVersion}")
    systems = tuple(_system(s, f"systems[{i}]") for i, s in enumerate(systems_doc))
    failures_doc = doc.get("failures") or []
    if not isinstance(failures_doc, list):
        raise HollowConfigError("failures: expected a list of {node, state}")
    failures = tuple(_failure(f, f"failures[{i}]") for i, f in enumerate(failures_doc))
    return HollowConfig(prefix, labels, tuple(taints), capacity, systems, failures)


def default_config() -> HollowConfig:
    return parse_config(DEFAULT_CONFIG)


# ---- what each node gets -----------------------------------------------------------------------
def probe_address(i: int) -> str:
    """The loopback address node i's probes reach the rules server on."""
    if not 0 <= i < MAX_HOLLOW_NODES:
        raise HollowConfigError(f"hollow node index {i} out of range (at most {MAX_HOLLOW_NODES} nodes)")
    return f"{PROBE_NET[0]}.{PROBE_NET[1]}.{i // 250}.{i % 250 + 1}"


def node_index(address: str) -> int | None:
    """The node index of a probe address (the inverse of `probe_address`), None for any other."""
    parts = address.split(".")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        return None
    a, b, c, d = (int(p) for p in parts)
    if (a, b) != PROBE_NET or not 1 <= d <= 250:
        return None
    return c * 250 + d - 1


def cert_spec(node: str) -> CertSpec:
    """A hollow kubelet's client certificate: a node's identity, as NodeRestriction expects it
    (`system:node:<name>` in `system:nodes`); its files are pki/hollow/<node>.{crt,key}."""
    return CertSpec(f"hollow/{node}", f"system:node:{node}", groups=("system:nodes",))


def allocate_ports(count: int, base: int, in_use: Iterable[int], limit: int = 32767) -> list[int]:
    """`count` TCP ports from `base` up, skipping those in use (the ephemeral range starts above `limit`)."""
    taken = set(in_use)
    out: list[int] = []
    port = base
    while len(out) < count:
        if port > limit:
            raise HollowConfigError(f"no {count} free ports between {base} and {limit}")
        if port not in taken:
            out.append(port)
        port += 1
    return out


def hosts_file(base: str, address: str) -> str:
    """A node's /etc/hosts: the machine's own, plus the probe host name at the node's address."""
    lines = [line for line in base.splitlines() if PROBE_HOST not in line.split("#", 1)[0].split()]
    return "\n".join([*lines, f"{address}\t{PROBE_HOST}", ""])


def check_capacity(total: int, running: int, cpus: int, mem_available_mib: int) -> None:
    """Refuse up front a count of hollow nodes the machine cannot hold, with the estimate."""
    new = max(0, total - running)
    need_mib = new * MIB_PER_NODE
    by_cpu = cpus * NODES_PER_CORE
    by_mem = running + max(0, mem_available_mib - MEMORY_RESERVE_MIB) // MIB_PER_NODE
    most = min(by_cpu, by_mem, MAX_HOLLOW_NODES)
    if total > most:
        raise HollowConfigError(
            f"{total} hollow nodes will not fit: each takes about {MIB_PER_NODE} MiB and 0.3 % of a core "
            f"when idle ({need_mib} MiB more for {new} new ones, {mem_available_mib} MiB available, "
            f"{MEMORY_RESERVE_MIB} MiB kept for the rest), and about {NODES_PER_CORE} fit per core "
            f"({cpus} cores): at most {most} here. For more, simulate them: "
            "python -m benchmarks scale (a KWOK-style node simulator)"
        )


def quantity_patch(capacity: Mapping[str, str]) -> list[dict[str, Any]]:
    """The JSON patch adding the extended resources to a Node's status.capacity."""
    return [
        {"op": "add", "path": f"/status/capacity/{k.replace('~', '~0').replace('/', '~1')}", "value": v}
        for k, v in sorted(capacity.items())
    ]


# ---- the rules server's answers ------------------------------------------------------------------
PROBE_KINDS = ("healthy", "running")


def answer(config: HollowConfig, node: str | None, path: str) -> tuple[int, str]:
    """(HTTP status, body) for a probe of `path` from hollow node `node` (None: not a hollow node).

    /healthy/<state>: 200, or 503 when a failure rule names the state on this node (DaemonSet
    states: readiness, and liveness, which makes a failing pod crash-loop as a broken driver does).
    /running/<state>: the liveness probe of a run-to-completion (validation) pod: 503 ends the
    container, which the fake runtime reports as exit code 0 (Succeeded); with a failure rule 200,
    so the pod runs into its activeDeadlineSeconds (Failed).
    """
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if node is None:
        return 403, "not a hollow node's probe address\n"
    if len(parts) != 2 or parts[0] not in PROBE_KINDS or parts[1] not in STATE_NAMES:
        kinds = "|".join(PROBE_KINDS)
        return 404, f"expected /{{{kinds}}}/<state>, state one of {', '.join(STATE_NAMES)}\n"
    kind, state = parts
    failing = config.fails(node, state)
    if kind == "healthy":
        return (503, f"{node}: {state} fails (failure rule)\n") if failing else (200, f"{node}: {state} ok\n")
    if failing:
        return 200, f"{node}: {state} keeps running (failure rule: it runs into its deadline)\n"
    return 503, f"{node}: {state} done\n"


def probe(state: str, port: int, period: int = 2) -> dict[str, dict[str, Any]]:
    """The readiness and liveness probes a SpecialResource sets on `state` to be steered by the
    rules server (for the spec's `<state>.readinessProbe` / `.livenessProbe`)."""
    kind = "running" if state in VALIDATION_STATES else "healthy"
    get = {"host": PROBE_HOST, "port": port, "path": f"/{kind}/{state}"}
    live = {"httpGet": get, "periodSeconds": period, "failureThreshold": 1}
    if kind == "running":
        return {"livenessProbe": live}
    return {"readinessProbe": {"httpGet": get, "periodSeconds": period}, "livenessProbe": live}
