"""Would OpenShift's SCC admission let a pod run under an SCC — and does the SCC grant more than its pods use?

Why here and not on a cluster: SCCs are enforced only by OpenShift's API server; the local cluster
serves the CRD but admits every pod. So the rules OpenShift applies (its documented strategies: host
namespaces and ports, privileged, capabilities, privilege escalation, read-only root filesystem,
the user, SELinux, seccomp and volume types) are applied here to the rendered pod specs.

Stricter than admission in one respect, on purpose: where admission would *change* a pod to fit
(force `readOnlyRootFilesystem`, pick a user, default `allowPrivilegeEscalation`), that is reported
too, because a pod changed at admission is not the pod the tests ran. `excess` is the other half of
"least privilege": what an SCC allows that none of its pods uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SECCOMP = {"RuntimeDefault": "runtime/default", "Unconfined": "unconfined"}


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def volume_type(volume: Mapping[str, Any]) -> str:
    kinds = [k for k in volume if k != "name"]
    return kinds[0] if kinds else "emptyDir"


def seccomp_profile(pod: Mapping[str, Any], container: Mapping[str, Any]) -> str | None:
    """The container's profile in SCC terms (`runtime/default`, `localhost/<file>`), None if unset."""
    for sc in ((container.get("securityContext") or {}), (pod.get("securityContext") or {})):
        prof = sc.get("seccompProfile")
        if prof:
            if prof.get("type") == "Localhost":
                return f"localhost/{prof.get('localhostProfile', '')}"
            return SECCOMP.get(str(prof.get("type")), str(prof.get("type")))
    return None


def _run_as(pod: Mapping[str, Any], container: Mapping[str, Any], key: str) -> Any:
    c = container.get("securityContext") or {}
    return c[key] if key in c else (pod.get("securityContext") or {}).get(key)


def _in_ranges(value: int, ranges: Sequence[Mapping[str, Any]]) -> bool:
    return any(int(r.get("min", 0)) <= value <= int(r.get("max", 0)) for r in ranges)


def check(scc: Mapping[str, Any], pod: Mapping[str, Any]) -> list[str]:
    """Why the SCC would refuse (or have to change) `pod` (a pod spec); [] when it runs as it is."""
    name = scc["metadata"]["name"]
    out: list[str] = []
    for key, field in (
        ("hostNetwork", "allowHostNetwork"),
        ("hostPID", "allowHostPID"),
        ("hostIPC", "allowHostIPC"),
    ):
        if pod.get(key) and not scc.get(field):
            out.append(f"{key}: {name} has {field}: false")
    allowed_volumes = set(scc.get("volumes") or [])
    for v in pod.get("volumes") or []:
        kind = volume_type(v)
        if "*" not in allowed_volumes and kind not in allowed_volumes:
            out.append(
                f"volume {v.get('name')}: type {kind} not in {name}'s volumes {sorted(allowed_volumes)}"
            )
        if kind == "hostPath" and not scc.get("allowHostDirVolumePlugin"):
            out.append(f"volume {v.get('name')}: hostPath, and {name} has allowHostDirVolumePlugin: false")
    allowed_caps = set(scc.get("allowedCapabilities") or []) | set(scc.get("defaultAddCapabilities") or [])
    required_drop = set(scc.get("requiredDropCapabilities") or [])
    seccomp = list(scc.get("seccompProfiles") or [])
    run_as = scc.get("runAsUser") or {}
    for c in _containers(pod):
        where = f"container {c.get('name')}"
        sc = c.get("securityContext") or {}
        if any(p.get("hostPort") for p in c.get("ports") or []) and not scc.get("allowHostPorts"):
            out.append(f"{where}: a hostPort, and {name} has allowHostPorts: false")
        if sc.get("privileged") and not scc.get("allowPrivilegedContainer"):
            out.append(f"{where}: privileged, and {name} has allowPrivilegedContainer: false")
        for cap in (sc.get("capabilities") or {}).get("add") or []:
            if cap in required_drop or ("*" not in allowed_caps and cap not in allowed_caps):
                out.append(f"{where}: adds {cap}, not in {name}'s allowedCapabilities {sorted(allowed_caps)}")
        dropped = set((sc.get("capabilities") or {}).get("drop") or [])
        if (
            required_drop
            and "ALL" not in dropped
            and not required_drop <= dropped
            and not sc.get("privileged")
        ):
            out.append(
                f"{where}: admission would drop {sorted(required_drop - dropped)}; drop them in the pod"
            )
        escalation = sc.get("allowPrivilegeEscalation")
        if not scc.get("allowPrivilegeEscalation", True):
            if escalation or sc.get("privileged"):
                out.append(f"{where}: privilege escalation, and {name} has allowPrivilegeEscalation: false")
            elif escalation is None:
                out.append(f"{where}: admission would set allowPrivilegeEscalation: false; set it in the pod")
        if scc.get("readOnlyRootFilesystem"):
            if sc.get("readOnlyRootFilesystem") is False:
                out.append(
                    f"{where}: a writable root filesystem, and {name} has readOnlyRootFilesystem: true"
                )
            elif not sc.get("readOnlyRootFilesystem"):
                out.append(f"{where}: admission would make the root filesystem read-only; say so in the pod")
        uid, non_root = _run_as(pod, c, "runAsUser"), _run_as(pod, c, "runAsNonRoot")
        strategy = run_as.get("type", "RunAsAny")
        if strategy == "MustRunAs" and uid != run_as.get("uid"):
            out.append(f"{where}: runs as {uid}, and {name} requires uid {run_as.get('uid')}")
        elif strategy == "MustRunAsNonRoot" and (uid == 0 or (uid is None and not non_root)):
            out.append(
                f"{where}: may run as root (runAsUser {uid}, runAsNonRoot {non_root}); {name} requires non-root"
            )
        elif strategy == "MustRunAsRange":
            lo, hi = run_as.get("uidRangeMin"), run_as.get("uidRangeMax")
            if uid is not None and (lo is None or hi is None or not lo <= uid <= hi):
                out.append(f"{where}: runs as {uid}, outside {name}'s range (the namespace's unless set)")
        se = scc.get("seLinuxContext") or {}
        options = _run_as(pod, c, "seLinuxOptions")
        if (
            se.get("type") == "MustRunAs"
            and options
            and se.get("seLinuxOptions")
            and options != se["seLinuxOptions"]
        ):
            out.append(f"{where}: seLinuxOptions {options} differ from {name}'s {se['seLinuxOptions']}")
        profile = seccomp_profile(pod, c)
        if profile is not None and seccomp and "*" not in seccomp and profile not in seccomp:
            out.append(f"{where}: seccomp {profile} not in {name}'s seccompProfiles {seccomp}")
        if profile is not None and not seccomp and profile != "unconfined":
            out.append(f"{where}: seccomp {profile}, and {name} allows no seccomp profile")
    psc = pod.get("securityContext") or {}
    for key, field in (("fsGroup", "fsGroup"), ("supplementalGroups", "supplementalGroups")):
        strategy = scc.get(field) or {}
        values = psc.get(key)
        values = [values] if isinstance(values, int) else list(values or [])
        if strategy.get("type") == "MustRunAs":
            for value in values:
                if not _in_ranges(int(value), strategy.get("ranges") or []):
                    out.append(f"{key} {value}: outside {name}'s {field} ranges")
    return out


def writable_host_paths(pod: Mapping[str, Any]) -> list[str]:
    """The host paths a pod mounts read-write (in any container)."""
    host = {v["name"]: v["hostPath"]["path"] for v in pod.get("volumes") or [] if "hostPath" in v}
    out = set()
    for c in _containers(pod):
        for m in c.get("volumeMounts") or []:
            if m.get("name") in host and not m.get("readOnly"):
                out.add(host[m["name"]])
    return sorted(out)


def excess(scc: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """What `scc` allows that none of `pods` uses: host access, privilege, capabilities, volume types."""
    pods = list(pods)
    containers = [c for p in pods for c in _containers(p)]
    scs = [c.get("securityContext") or {} for c in containers]
    used_volumes = {volume_type(v) for p in pods for v in p.get("volumes") or []}
    out: list[str] = []
    for key, field in (
        ("hostNetwork", "allowHostNetwork"),
        ("hostPID", "allowHostPID"),
        ("hostIPC", "allowHostIPC"),
    ):
        if scc.get(field) and not any(p.get(key) for p in pods):
            out.append(f"{field}: no pod uses it")
    if scc.get("allowHostPorts") and not any(
        p.get("hostPort") for c in containers for p in c.get("ports") or []
    ):
        out.append("allowHostPorts: no pod uses it")
    if scc.get("allowPrivilegedContainer") and not any(sc.get("privileged") for sc in scs):
        out.append("allowPrivilegedContainer: no container is privileged")
    if scc.get("allowHostDirVolumePlugin") and "hostPath" not in used_volumes:
        out.append("allowHostDirVolumePlugin: no pod has a hostPath volume")
    if scc.get("allowPrivilegeEscalation", True) and not any(
        sc.get("privileged") or sc.get("allowPrivilegeEscalation") for sc in scs
    ):
        out.append("allowPrivilegeEscalation: no container needs it")
    added = {cap for sc in scs for cap in (sc.get("capabilities") or {}).get("add") or []}
    privileged = any(sc.get("privileged") for sc in scs)
    for cap in scc.get("allowedCapabilities") or []:
        if cap != "*" and cap not in added:
            out.append(f"allowedCapabilities {cap}: no container adds it")
        if cap == "*" and not privileged:
            out.append("allowedCapabilities *: no container is privileged")
    token = any(p.get("automountServiceAccountToken", True) is not False for p in pods)
    for kind in scc.get("volumes") or []:
        if kind == "*" and not privileged:
            out.append("volumes *: only a privileged driver may mount anything")
        elif kind in ("projected", "secret") and kind not in used_volumes and token:
            continue  # the service-account token's volume (secret before 1.21, projected after)
        elif kind != "*" and kind not in used_volumes:
            out.append(f"volumes {kind}: no pod mounts one")
    if not scc.get("readOnlyRootFilesystem") and all(sc.get("readOnlyRootFilesystem") for sc in scs):
        out.append("readOnlyRootFilesystem: false, yet every container's root filesystem is read-only")
    return out
