"""CDI (Container Device Interface) specs for a recipe's devices, generated purely from an inventory.

Why pure: a CDI spec is a contract read by containerd >= 1.7, CRI-O and podman; it must be the same
bytes for the same driver, so it is generated from a `DriverInventory` alone and compared against
golden files. Discovery (reading the host) happens before, in `driverfiles`.

Shape (cdiVersion 0.6.0, as `nvidia-ctk cdi generate` writes it): one device per node number ("0",
"1", ...; its edits hold its primary node and its companion nodes) plus "all", and the extra names `cdidevices` finds (GPU UUIDs, MIG devices); the common
`containerEdits` carry the control nodes, read-only bind mounts of every library/binary/directory/
firmware file found, `<VISIBLE_DEVICES>=void` (so that our legacy hook, if also installed, does not
inject a second time; not in the live spec) and, when asked, a createContainer hook that rebuilds
the linker cache — with an explicit env, like every hook entry we write.

Two uses: the copy in the runtime root (`cdi/<vendor>-<class>.json`, for podman and CRI-O pointed at
it) keeps the ldcache hook; the live spec containerd >= 1.7 reads from /var/run/cdi has none, so
that a container named by the device plugin starts with no sro code run at all: the libraries land
where the driver keeps them in the container's library folders, each also under the names its
links have on the host (its soname), which is what ldconfig would have made; `--cdi-ldcache-hook`
adds the hook for images whose loader does not search there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sro.api.recipes import Recipe
from sro.node.runtime.activation import ALL, VOID, Request
from sro.node.runtime.cdidevices import ExtraDevice
from sro.node.runtime.inventory import DeviceNode, DriverInventory, FileMount, InjectionPlan, plan
from sro.node.runtime.specedits import HookCommand

CDI_VERSION = "0.6.0"
VERSIONS = ("0.5.0", "0.6.0")


class CDIError(ValueError):
    """No spec can be generated; the message says what is missing."""


def _node(d: DeviceNode) -> dict[str, Any]:
    node: dict[str, Any] = {"path": d.path}
    if d.host_path != d.path:
        node["hostPath"] = d.host_path
    node.update({"type": "c", "major": d.major, "minor": d.minor, "fileMode": d.file_mode})
    return node


def _common_edits(
    recipe: Recipe, common: InjectionPlan, ldcache: HookCommand | None, void: bool
) -> dict[str, Any]:
    edits: dict[str, Any] = {"env": [f"{recipe.visible_devices_env}={VOID}"]} if void else {}
    if common.device_nodes:
        edits["deviceNodes"] = [_node(d) for d in common.device_nodes]
    if common.mounts:
        edits["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["ro", "nosuid", "nodev", "rbind" if m.kind == "dir" else "bind"],
            }
            for m in common.mounts
        ]
    if ldcache is not None and common.ld_folders:
        folders = [a for f in common.ld_folders for a in ("--folder", f)]
        entry = ldcache.entry("update-ldcache", folders)
        edits["hooks"] = [{"hookName": "createContainer", **{k: entry[k] for k in ("path", "args", "env")}}]
    return edits


def generate(
    recipe: Recipe,
    inv: DriverInventory,
    ldcache: HookCommand | None,
    version: str = CDI_VERSION,
    extra: tuple[ExtraDevice, ...] = (),
    links: tuple[FileMount, ...] = (),
    void: bool = True,
) -> dict[str, Any]:
    """The CDI spec (as a dict) for every device in `inv`, every capability group included, and
    the `extra` names (their nodes: a GPU's own, or a MIG device's parent and capability node).

    `links`: a library's other names (its soname, `libnvidia-ml.so.1`) mounted from the same file,
    for a spec with no ldcache hook to make them. `void` sets `<VISIBLE_DEVICES>=void` (the live
    spec leaves it out: the device plugin's variable then names the container's devices, as
    NVIDIA's tools and sro's workload validation expect, and a legacy hook of the same pod injects
    the same allocation again, which changes nothing).

    `version` "0.5.0" is for older readers (podman 4.3): the same spec without annotations (0.6.0).
    """
    if version not in VERSIONS:
        raise CDIError(f"cdiVersion {version!r} not supported (one of {', '.join(VERSIONS)})")
    if not inv.devices:
        raise CDIError(f"no {recipe.name} devices found (pattern {recipe.device_node}); a CDI spec needs one")
    caps = tuple(sorted(set(recipe.libraries) | set(recipe.binaries) | set(recipe.directories)))
    common = plan(Request(recipe, (), caps, "cdi"), inv)
    if links:
        common = common.merge(InjectionPlan(mounts=links))
    devices = [  # a device's companion nodes (an FPGA's render node) go with its primary node
        {"name": name, "containerEdits": {"deviceNodes": [_node(d) for d in nodes]}}
        for name, nodes in inv.by_device().items()
    ]
    devices += [
        {"name": e.name, "containerEdits": {"deviceNodes": [_node(d) for d in e.nodes]}} for e in extra
    ]
    devices.append({"name": ALL, "containerEdits": {"deviceNodes": [_node(d) for d in inv.devices]}})
    spec: dict[str, Any] = {"cdiVersion": version, "kind": recipe.cdi_kind}
    if (
        recipe.simulated and version != "0.5.0"
    ):  # labelled wherever it shows, so no one mistakes it for hardware
        spec["annotations"] = {"sro.dev/simulated": "true"}
    spec["devices"] = devices
    spec["containerEdits"] = _common_edits(recipe, common, ldcache, void)
    return spec


def spec_file_name(recipe: Recipe, fmt: str) -> str:
    """CDI's naming convention: `<vendor>-<class>.<yaml|json>` under /etc/cdi or /var/run/cdi."""
    return recipe.cdi_kind.replace("/", "-") + "." + fmt


def dumps(spec: Mapping[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(spec, indent=2) + "\n"
    if fmt == "yaml":
        import yaml  # only here: the hook's import graph stays free of it

        return str(yaml.safe_dump(dict(spec), sort_keys=False, default_flow_style=False))
    raise CDIError(f"unknown format {fmt!r} (yaml or json)")
