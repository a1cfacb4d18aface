"""The container's device cgroup: opened by the hook on cgroup v1, only checked (and warned about) on v2.

Why its own module: the two cgroup versions need opposite handling, and getting it wrong is silent.
  * v1: the devices controller is a directory with a `devices.allow` file; a prestart (or
    createContainer) hook can append `c MAJ:MIN rwm` there, and the nodes it made open.
  * v2: there is no such file. runc attaches an eBPF program built from the OCI spec's
    `linux.resources.devices` before any hook runs, and a hook cannot change it (NVIDIA's
    libnvidia-container attaches a second program of its own; sro does not). A node the hook makes
    that those rules do not allow exists in the container but every open() of it fails with EPERM.
    So on v2 the hook checks the spec's rules (pure: `spec_allows`) and, for the nodes they do not
    allow, writes one warning line saying what gives them: the kubelet's DeviceSpecs (the device
    plugin's `device-specs` strategy), CDI through the runtime, or the `sro` runtime class, whose runc
    wrapper writes the allow rules into the spec before runc reads it.
A v2-only host shows in /proc/<pid>/cgroup as the single `0::/...` line; a v1 or hybrid one has
numbered controller lines. Every path under /proc is a parameter so tests run on fake proc trees.
"""

from __future__ import annotations

import posix

from sro.node.runtime.inject import InjectError
from sro.node.runtime.leanpath import join

TYPE_CHECKING = False  # no typing at run time: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    from sro.node.runtime.inventory import DeviceNode, InjectionPlan

REMEDY = (
    "give them through the kubelet (the device plugin's device-specs strategy), CDI through the "
    "runtime, or the sro runtime class (its runc wrapper adds the rules to the spec)"
)


def read_cgroup_lines(pid: int | str, proc: str = "/proc") -> list[str]:
    with open(f"{proc}/{pid}/cgroup") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def v2_only(pid: int | str, proc: str = "/proc") -> bool:
    """Is the process on a cgroup v2-only (unified) host: only `0::/...` in /proc/<pid>/cgroup?"""
    lines = read_cgroup_lines(pid, proc)
    return bool(lines) and all(line.startswith("0::") for line in lines)


def devices_cgroup_dir(pid: int | str, proc: str = "/proc") -> str | None:
    """The devices-controller directory of a process (v1), or None on a cgroup v2-only host."""
    rel = None
    for line in read_cgroup_lines(pid, proc):
        _, controllers, path = line.split(":", 2)
        if "devices" in controllers.split(","):
            rel = path
    if rel is None or rel == "/":
        return None  # cgroup v2 only, or a cgroup namespace hides the path: never touch the root
    if ".." in rel.split("/"):
        raise InjectError(f"{proc}/{pid}/cgroup: refusing a devices cgroup path with '..': {rel!r}")
    with open(f"{proc}/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if rfields and rfields[0] == "cgroup" and "devices" in rfields[-1].split(","):
                root, mountpoint = fields[3], fields[4]
                if rel == root or rel.startswith(root.rstrip("/") + "/"):
                    return mountpoint + "/" + rel[len(root) :].lstrip("/")
    raise InjectError(f"the devices cgroup {rel} of pid {pid} is not mounted in this namespace")


def allow_devices(cgroup_dir: str, rules: tuple[str, ...]) -> None:
    """Append allow rules ("c 240:0 rwm") to a v1 devices cgroup."""
    path = join(cgroup_dir, "devices.allow")
    for rule in rules:
        try:
            fd = posix.open(path, posix.O_WRONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC)
        except OSError as e:
            raise InjectError(f"{path}: {e.strerror}") from None
        try:
            posix.write(fd, rule.encode())
        except OSError as e:
            raise InjectError(f"{path}: writing {rule!r}: {e.strerror}") from None
        finally:
            posix.close(fd)


def _matches(rule: Mapping[str, Any], kind: str, major: int, minor: int) -> bool:
    rtype = rule.get("type") or "a"
    if rtype not in ("a", kind):
        return False
    for want, have in ((rule.get("major"), major), (rule.get("minor"), minor)):
        if want is not None and want != -1 and want != have:  # absent or -1: any number
            return False
    return True


def spec_allows(rules: Sequence[Mapping[str, Any]], major: int, minor: int, kind: str = "c") -> bool:
    """Do OCI `linux.resources.devices` rules let a process read and write device `kind MAJ:MIN`?

    As runc applies them: default deny, the rules in order, the last one matching a device and an
    access letter decides that letter (an absent `access` means rwm). Opening needs r and w here.
    """
    granted = {"r": False, "w": False}
    for rule in rules:
        if not isinstance(rule, dict) or not _matches(rule, kind, major, minor):
            continue
        access = rule.get("access") or "rwm"
        for letter in granted:
            if letter in access:
                granted[letter] = rule.get("allow") is True
    return all(granted.values())


def spec_rules(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The spec's `linux.resources.devices` (malformed parts read as no rules)."""
    linux = config.get("linux")
    resources = linux.get("resources") if isinstance(linux, dict) else None
    rules = resources.get("devices") if isinstance(resources, dict) else None
    return [r for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []


def not_allowed(nodes: Iterable[DeviceNode], config: Mapping[str, Any]) -> tuple[DeviceNode, ...]:
    """The nodes that the spec's device rules do not let the container open."""
    rules = spec_rules(config)
    return tuple(n for n in nodes if not spec_allows(rules, n.major, n.minor))


def v2_warning(nodes: Sequence[DeviceNode]) -> str:
    """The one line the hook writes when it made nodes that a v2 device cgroup keeps closed."""
    names = ", ".join(f"{n.path} (c {n.major}:{n.minor})" for n in nodes)
    return (
        f"warning: cgroup v2 host: the container's device rules (linux.resources.devices) do not allow "
        f"{names}; a hook cannot add them, so opening them fails with EPERM: {REMEDY}"
    )


def open_for(
    pid: int | str, plan: InjectionPlan, config: Mapping[str, Any], proc: str = "/proc"
) -> str | None:
    """Open the plan's nodes in the container's device cgroup where a hook can (v1), else say why
    not: the warning line on a v2-only host for nodes the spec does not allow, None otherwise."""
    cgroup = devices_cgroup_dir(pid, proc)
    if cgroup is not None:
        allow_devices(cgroup, plan.cgroup_rules)
        return None
    if not v2_only(pid, proc):
        return None  # v1 with a cgroup namespace hiding the path: nothing a hook can see
    closed = not_allowed(plan.device_nodes, config)
    return v2_warning(closed) if closed else None
