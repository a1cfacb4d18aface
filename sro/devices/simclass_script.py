"""The binaries of a simulated device class: busybox-sh scripts that list the devices (pure text).

Why a script: a container given a simulated FPGA or SmartNIC VF gets the recipe's binaries
bind-mounted from the driver root, and validation runs one of them (`xbutil examine`) in a pod
given one device. A POSIX sh script runs in any image (busybox, glibc or none of the driver's
libraries), lists exactly the devices the recipe's visible-devices variable names (every device
when it is unset: the host's view), marks a faulted one, and says SIMULATED on its first line so
its output can never pass for real hardware. Every value written into the script is shell-quoted.
The lines that find the driver root and decide whether a device is shown and whether it is
faulted are shared with the simulated GPU driver's `simgpu-smi` (`sro.devices.simulated_driver`).
"""

from __future__ import annotations

import shlex

from sro.api.recipes import SIMULATED_DEVICE_LIST, SIMULATED_FAULTS, Recipe
from sro.devices.simclass import SimClass

ACTIONS = ("examine", "list")

# The lines of `show IDX UUID ...` that every simulated listing script (this one, the simulated GPU
# driver's simgpu-smi) begins with, once it has set `idx` and `uuid`: return unless the device is
# visible, then set `state` to ok or FAULT from the fault file. One text, so the two drivers cannot
# disagree on what a visible-devices value means.
SHOW_VISIBLE_STATE = """  case "$visible" in
    all) ;;
    ""|none|void) return 0 ;;
    *) case ",$visible," in *",$idx,"*|*",$uuid,"*) ;; *) return 0 ;; esac ;;
  esac
  state=ok
  if [ -r "$faults" ] && grep -q "\\"$uuid\\"" "$faults"; then state=FAULT; fi
"""


def locate(root_env: str, driver_root: str, visible_env: str) -> str:
    """A listing script's opening lines: its driver root (`$root_env`, else the folder above the script
    when it holds the device list, as inside a container, else `driver_root`), then `faults` and
    `visible` (`all` when the recipe's visible-devices variable is unset: the host's view)."""
    return f"""root="${{{root_env}:-}}"
if [ -z "$root" ]; then
  here=$(dirname "$0")/..
  if [ -r "$here/{SIMULATED_DEVICE_LIST}" ]; then root=$here; else root={shlex.quote(driver_root)}; fi
fi
faults="$root/{SIMULATED_FAULTS}"
visible="${{{visible_env}-all}}"
"""


def script(sim: SimClass, recipe: Recipe, name: str, driver_root: str) -> str:
    """The script `<root>/bin/<name>`; `driver_root` is where a container sees the driver root."""
    inv = sim.inventory
    q = shlex.quote
    title = f"{name}: SIMULATED {sim.device_class} devices, driver {inv.driver_version} (not real hardware)"
    version = f"{name} (sro SIMULATED {sim.device_class} driver) {inv.driver_version}"
    usage = f"usage: {name} [{'|'.join(ACTIONS)}|--version]"
    rows = "\n".join(
        "show "
        + " ".join(
            q(v)
            for v in (
                str(d.index),
                d.uuid,
                " ".join((d.device_node, *d.companion_nodes)),
                d.product,
                ",".join(f"{k}={v}" for k, v in sorted(d.attributes.items())) or "-",
            )
        )
        for d in inv.devices
    )
    env = recipe.visible_devices_env  # an env name (simclass.check_recipe)
    return f"""#!/bin/sh
# {name}: device listing of the sro SIMULATED {sim.device_class} driver {inv.driver_version} (not real hardware).
{locate("SRO_DRIVER_ROOT", driver_root, env)}case "${{1:-list}}" in
  {"|".join(ACTIONS)}|-L) ;;
  --version) echo {q(version)}; exit 0 ;;
  -h|--help) echo {q(usage)}; exit 0 ;;
  *) echo {q(name)}": unknown command '$1' ({usage})" >&2; exit 2 ;;
esac
echo {q(title)}
printf '%-4s %-8s %-30s %-40s %-24s %s\\n' IDX STATE NODES UUID ATTRIBUTES PRODUCT
show() {{
  idx=$1; uuid=$2; nodes=$3; product=$4; attrs=$5
{SHOW_VISIBLE_STATE}  printf '%-4s %-8s %-30s %-40s %-24s %s\\n' "$idx" "$state" "$nodes" "$uuid" "$attrs" "$product"
}}
{rows}
exit 0
"""
