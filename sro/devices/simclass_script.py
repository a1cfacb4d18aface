"""The binaries of a simulated device class: busybox-sh scripts that list the devices (pure text).

Why a script: a container given a simulated FPGA or SmartNIC VF gets the recipe's binaries
bind-mounted from the driver root, and validation runs one of them (`xbutil examine`) in a pod
given one device. A POSIX sh script runs in any image (busybox, glibc or none of the driver's
libraries), lists exactly the devices the recipe's visible-devices variable names (every device
when it is unset: the host's view), marks a faulted one, and says SIMULATED on its first line so
its output can never pass for real hardware. Every value written into the script is shell-quoted.
"""

from __future__ import annotations

import shlex

from sro.api.recipes import SIMULATED_DEVICE_LIST, SIMULATED_FAULTS, Recipe
from sro.devices.simclass import SimClass

ACTIONS = ("examine", "list")


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
root="${{SRO_DRIVER_ROOT:-}}"
if [ -z "$root" ]; then
  here=$(dirname "$0")/..
  if [ -r "$here/{SIMULATED_DEVICE_LIST}" ]; then root=$here; else root={q(driver_root)}; fi
fi
faults="$root/{SIMULATED_FAULTS}"
visible="${{{env}-all}}"
case "${{1:-list}}" in
  {"|".join(ACTIONS)}|-L) ;;
  --version) echo {q(version)}; exit 0 ;;
  -h|--help) echo {q(usage)}; exit 0 ;;
  *) echo {q(name)}": unknown command '$1' ({usage})" >&2; exit 2 ;;
esac
echo {q(title)}
printf '%-4s %-8s %-30s %-40s %-24s %s\\n' IDX STATE NODES UUID ATTRIBUTES PRODUCT
show() {{
  idx=$1; uuid=$2; nodes=$3; product=$4; attrs=$5
  case "$visible" in
    all) ;;
    ""|none|void) return 0 ;;
    *) case ",$visible," in *",$idx,"*|*",$uuid,"*) ;; *) return 0 ;; esac ;;
  esac
  state=ok
  if [ -r "$faults" ] && grep -q "\\"$uuid\\"" "$faults"; then state=FAULT; fi
  printf '%-4s %-8s %-30s %-40s %-24s %s\\n' "$idx" "$state" "$nodes" "$uuid" "$attrs" "$product"
}}
{rows}
exit 0
"""
