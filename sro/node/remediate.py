"""`sro driver reset` and `sro driver reboot`: the node side of a remediation (the operator's action
pod runs one of them, `sro/manifests/remediation/0100_action-pod.yaml`).

Why here: what repairs a device depends on the driver behind the recipe, and only the node sees it.
- sro's simulated driver (simulated-gpu, the simulated NVIDIA driver of `spec.driver.mode:
  simulated`, a custom simulated device class): a reset clears the named devices' faults through the
  very code `sro simulate fault --clear` uses (`driverstate.clear_faults`, then the NVML state where
  the driver serves NVML), so the device plugin sees the fault go as it would after a real reset.
  With `--dev-root` (the host's /dev, which needs CAP_MKNOD) it also makes the device's nodes again
  with the numbers and mode the driver gave them, as a real reset gives a device a new node. Each
  reset adds one to the device's count in the driver's state (`driverstate.count_resets`, beside
  the fault state: it outlives the device plugin, the exporter and a simulated reboot), which the
  exporter shows as `sro_device_resets_total`. A
  simulated reboot clears every fault of the driver and writes a new boot id under its root
  (`healthreport.SIM_BOOT_ID`), which the health report carries: the operator sees the node "come
  back" from a reboot that took no machine down.
- a real NVIDIA driver (nvml): `nvidia-smi --gpu-reset -i <id>`, the driver root's own binary run
  chrooted into that root (the host's binary against the host's libraries, as driver validation runs
  it). A real reboot is only ASKED for: the sentinel `/var/run/reboot-required` is written under the
  host root. That is kured's documented mechanism (kured, or any reboot daemon watching that file —
  `--reboot-sentinel` — drains the node and reboots it inside its maintenance window and its own
  one-node-at-a-time lock); sro never reboots a machine itself, so whoever runs the fleet keeps one
  reboot policy. Replace kured by anything that watches the same file.
- devnodes (hardware sro knows only by its device nodes): no reset exists; the command says so
  (exit 2) and the machine's step times out, leaving the node to a person. A reboot is asked for as
  on any real node.

Once per token: the operator asks again with the same token when it restarts mid-step (its pod per
(node, token) normally answers that), so each success is also written to a small ledger on the node
(`--ledger`, /var/lib/sro/remediation: it outlives a reboot, unlike /var/run), and a token found
there is not acted on twice — a simulated reboot would otherwise take a second boot, a real one
could loop. A failure is not recorded: the same token may try again.

Exit status: 0 when every device was reset (or the reboot done/asked for), 1 when one was not (the
lines say which and why), 2 for what cannot work (unknown device, devnodes, no recipe). Each result
line ends with the step's token, so the pod's log says which step it served.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import click

from sro.api.recipes import SIMULATED_DEVICE_LIST, Recipe
from sro.console.options import load_recipe, recipe_file_option, recipe_option
from sro.devices import driverstate, simnvml_state, simulated_driver, simulated_nvidia
from sro.devices.healthreport import SIM_BOOT_ID
from sro.devices.model import DeviceUUID, Inventory
from sro.node.validation import tools

DriverKind = Literal["simulated", "nvml", "devnodes"]
SENTINEL = "var/run/reboot-required"  # under the host root: kured's default --reboot-sentinel
NVIDIA_SMI = "nvidia-smi"
RESET_TIMEOUT_S = 120.0
LEDGER = Path("/var/lib/sro/remediation")  # what was done per token, on the node
LEDGER_KEEP_S = 7 * 24 * 3600.0  # entries older than a week go (a step lasts minutes)
Runner = Callable[[list[str]], tools.ToolRun]


class Refused(click.ClickException):
    """What cannot work however often it is tried: exit 2, one line."""

    exit_code = 2


@dataclass(frozen=True)
class Outcome:
    device: str
    ok: bool
    detail: str


def driver_kind(recipe: Recipe, driver_root: Path) -> DriverKind:
    """sro's simulated driver (the recipe's backend, or its device list under the driver root: the
    NVIDIA personality standing in for nvidia-gpu), a real NVIDIA driver, or devnodes hardware."""
    if recipe.backend == "devnodes":
        return "devnodes"
    if recipe.simulated or recipe.backend == "simulated" or (driver_root / SIMULATED_DEVICE_LIST).is_file():
        return "simulated"
    return "nvml"


def resolve(inv: Inventory, refs: Sequence[str]) -> dict[str, list[DeviceUUID]]:
    """Each named device (index, UUID, MIG UUID or PCI bus id) -> the UUIDs a reset clears: a GPU's
    own and its MIG devices' (a reset takes the whole GPU), a MIG device's own. Refused: unknown."""
    migs = inv.mig_by_uuid()
    out: dict[str, list[DeviceUUID]] = {}
    for ref in refs:
        d = inv.find(ref)
        if d is not None:
            out[ref] = [d.uuid, *(m.uuid for m in d.mig_devices)]
        elif ref in migs:
            out[ref] = [DeviceUUID(ref)]
        else:
            known = ", ".join(f"{x.index}={x.uuid}" for x in inv.devices) or "none"
            raise Refused(f"--device {ref!r}: no such device of this driver (known: {known})")
    return out


def reset_argv(driver_root: Path, smi: Path, device: str) -> list[str]:
    """nvidia-smi's reset of one GPU: in place when the driver root is `/`, else chrooted into it."""
    args = ["--gpu-reset", "-i", device]
    if driver_root.resolve() == Path("/"):
        return [str(smi), *args]
    return ["chroot", str(driver_root), "/" + str(smi.relative_to(driver_root)), *args]


def _check_ids(devices: Sequence[str]) -> None:
    for d in devices:
        if not d.strip() or d.startswith("-") or any(c.isspace() for c in d):
            raise Refused(f"--device {d!r}: not a device id")


def _update_nvml(driver_root: Path) -> str:
    """The simulated NVML state at once (as `sro simulate fault` does); a note when it could not be."""
    if not simnvml_state.enabled(driver_root):
        return ""
    try:
        simnvml_state.write_state(driver_root)
    except (driverstate.DriverStateError, OSError) as e:
        return f"; NVML state not rewritten now (the holding driver does each second): {e}"
    return ""


def _inventory(driver_root: Path) -> Inventory:
    try:
        return driverstate.read_inventory(driver_root)
    except driverstate.DriverStateError as e:
        raise click.ClickException(str(e)) from e


def node_numbers(
    driver_root: Path, inv: Inventory, uuids: Sequence[DeviceUUID]
) -> list[tuple[str, int, int]]:
    """The nodes (/dev path, major, minor) the simulated driver made for `uuids`: a device's own node,
    its companions' and its MIG devices', with the numbers the installed personality recorded."""
    if simulated_nvidia.personality_of(driver_root) == simulated_nvidia.PERSONALITY:
        made = simulated_nvidia.made_nodes(driver_root)
    else:
        made = simulated_driver.made_nodes(driver_root)
    paths: list[str] = []
    for d in inv.devices:
        if d.uuid in uuids:
            paths += [d.device_node, *d.companion_nodes]
        paths += [m.device_node for m in d.mig_devices if m.uuid in uuids and m.device_node]
    return [(p, *made[p]) for p in dict.fromkeys(paths) if p in made]


def _recreate(driver_root: Path, dev_root: Path, inv: Inventory, uuids: Sequence[DeviceUUID]) -> str:
    """Make the devices' nodes again under `dev_root`; what was done, in words."""
    try:
        nodes = node_numbers(driver_root, inv, uuids)
        simulated_driver.recreate_nodes(dev_root, nodes)
    except (simulated_driver.SimulatedDriverError, driverstate.DriverStateError, OSError) as e:
        raise click.ClickException(f"cannot make the device nodes again under {dev_root}: {e}") from e
    return f" (node made again: {', '.join(p for p, _, _ in nodes) or 'none recorded'})"


def reset_simulated(driver_root: Path, devices: Sequence[str], dev_root: Path | None = None) -> list[Outcome]:
    """Reset simulated devices: their nodes made again (with `dev_root`), their faults cleared, one
    more reset counted for each. The nodes come first: when they cannot be made nothing is cleared
    or counted, and the step may try again."""
    inv = _inventory(driver_root)
    wanted = resolve(inv, devices)
    made = {ref: "" for ref in wanted}
    if dev_root is not None:
        made = {ref: _recreate(driver_root, dev_root, inv, uuids) for ref, uuids in wanted.items()}
    try:
        before = driverstate.read_faults(driver_root)
        cleared = set(driverstate.clear_faults(driver_root, [u for us in wanted.values() for u in us]))
        counts = driverstate.count_resets(driver_root, [u for us in wanted.values() for u in us])
    except (driverstate.DriverStateError, OSError) as e:
        raise click.ClickException(
            f"cannot clear the faults or count the reset under {driver_root}: {e}"
        ) from e
    note = _update_nvml(driver_root)
    out = []
    for ref, uuids in wanted.items():
        xids = sorted({before[u].xid for u in uuids if u in cleared})
        said = f"fault cleared (Xid {', '.join(map(str, xids))})" if xids else "no active fault"
        head = f"SIMULATED reset #{counts[uuids[0]]} of {uuids[0]}{made[ref]}"
        out.append(Outcome(ref, True, f"{head}: {said}{note}"))
    return out


def reset_nvml(driver_root: Path, devices: Sequence[str], runner: Runner) -> list[Outcome]:
    smi = tools.find_in_root(driver_root, NVIDIA_SMI)
    if smi is None:
        raise click.ClickException(
            f"{NVIDIA_SMI} not found (searched {tools.searched(driver_root, NVIDIA_SMI)})"
        )
    out = []
    for device in devices:
        run = runner(reset_argv(driver_root, smi, device))
        detail = "reset by nvidia-smi --gpu-reset" if run.ok else f"{run.command}: {run.failure()}"
        out.append(Outcome(device, run.ok, detail))
    return out


def reboot_simulated(driver_root: Path) -> str:
    """Clear every fault of the simulated driver and give it a new boot; what happened, in words."""
    _inventory(driver_root)  # a simulated driver is there
    boot = str(uuid.uuid4())
    try:
        cleared = driverstate.clear_faults(driver_root, None)
        driverstate.write_atomic(driver_root / SIM_BOOT_ID, boot + "\n")
    except (driverstate.DriverStateError, OSError) as e:
        raise click.ClickException(f"cannot reboot the simulated driver under {driver_root}: {e}") from e
    note = _update_nvml(driver_root)
    return f"SIMULATED reboot: {len(cleared)} fault(s) cleared, boot id {boot}{note}"


def request_reboot(host_root: Path, token: str) -> str:
    """Write the reboot sentinel under `host_root`; what was done, in words."""
    path = host_root / SENTINEL
    if not path.parent.is_dir():
        raise click.ClickException(f"{path.parent}: no such directory (mount the host's /var/run there)")
    try:
        driverstate.write_atomic(path, f"*** System restart required ***\nsro remediation {token}\n")
    except OSError as e:
        raise click.ClickException(f"cannot write {path}: {e.strerror or e}") from e
    return f"asked for: wrote {path} (kured, or the reboot daemon watching it, reboots the node)"


def _entry(ledger: Path, token: str, action: str) -> Path:
    return ledger / f"{action}-{hashlib.sha256(token.encode()).hexdigest()[:24]}.json"


def done_before(ledger: Path, token: str, action: str) -> tuple[str, ...] | None:
    """The devices the ledger records `action` done for under `token` (a reboot: none), or None
    when it was never done (or there is no token)."""
    if not token:
        return None
    path = _entry(ledger, token, action)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise click.ClickException(f"--ledger {ledger}: cannot read {path.name}: {e}") from e
    if not isinstance(doc, dict) or doc.get("token") != token:
        return None
    devices = doc.get("devices")
    return tuple(str(d) for d in devices) if isinstance(devices, list) else ()


def remember(ledger: Path, token: str, action: str, devices: Sequence[str], said: str, now: float) -> None:
    """Record a success for `token` (and drop entries past LEDGER_KEEP_S)."""
    if not token:
        return
    doc = {"token": token, "action": action, "devices": list(devices), "said": said, "at": now}
    try:
        driverstate.write_atomic(_entry(ledger, token, action), json.dumps(doc) + "\n")
        for old in ledger.glob("*.json"):
            if now - old.stat().st_mtime > LEDGER_KEEP_S:
                old.unlink(missing_ok=True)
    except OSError as e:
        raise click.ClickException(f"--ledger {ledger}: done, but not recorded: {e}") from e


def _recipe(recipe_name: str | None, recipe_file: Path | None) -> Recipe:
    if recipe_name is None and recipe_file is None:
        raise Refused("give --recipe NAME or --recipe-file PATH (a custom recipe)")
    return load_recipe(recipe_name or "", recipe_file)


def _suffix(token: str) -> str:
    return f" (token {token})" if token else ""


_driver_root_option = click.option(
    "--driver-root",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help="The driver's files as seen from here (default: the recipe's driver root).",
)
_token_option = click.option(
    "--token", default="", help="The remediation step this serves (printed on each result line)."
)
_ledger_option = click.option(
    "--ledger",
    type=click.Path(path_type=Path, file_okay=False),
    default=LEDGER,
    show_default=True,
    help="Where each token's success is recorded, so a token is acted on once (with --token).",
)


@click.command("reset")
@recipe_option()
@recipe_file_option
@_driver_root_option
@click.option(
    "--device",
    "devices",
    multiple=True,
    help="Device to reset: its id (UUID), index or PCI bus id (repeatable).",
)
@click.option(
    "--dev-root",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help="A simulated driver's: the host's /dev as seen from here; the reset devices' nodes are made "
    "again there (needs CAP_MKNOD). Without it only their faults are cleared.",
)
@_token_option
@_ledger_option
def reset_command(
    recipe_name: str | None,
    recipe_file: Path | None,
    driver_root: Path | None,
    devices: tuple[str, ...],
    dev_root: Path | None,
    token: str,
    ledger: Path,
) -> None:
    """Reset devices: clear a SIMULATED device's fault, or `nvidia-smi --gpu-reset` a real GPU (which
    must be idle). Exit 0 when every device was reset, 1 when one was not, 2 when none can be."""
    recipe = _recipe(recipe_name, recipe_file)
    if not devices:
        raise Refused("name the devices to reset with --device")
    _check_ids(devices)
    root = driver_root if driver_root is not None else Path(recipe.driver_root)
    kind = driver_kind(recipe, root)
    if kind == "devnodes":
        raise Refused(f"reset not supported for recipe {recipe.name} (backend devnodes)")
    before = done_before(ledger, token, "reset")
    if before is not None and set(devices) <= set(before):
        click.echo(f"reset {', '.join(devices)}: already done for this token{_suffix(token)}")
        return
    if kind == "simulated":
        outcomes = reset_simulated(root, devices, dev_root)
    else:
        outcomes = reset_nvml(root, devices, lambda argv: tools.run(argv, timeout=RESET_TIMEOUT_S))
    lines = [f"reset {o.device}: {'ok' if o.ok else 'FAILED'}: {o.detail}{_suffix(token)}" for o in outcomes]
    for line in lines:
        click.echo(line)
    if not all(o.ok for o in outcomes):
        raise SystemExit(1)
    remember(ledger, token, "reset", devices, "; ".join(lines), time.time())


@click.command("reboot")
@recipe_option()
@recipe_file_option
@_driver_root_option
@click.option(
    "--host-root",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    default=Path("/"),
    show_default=True,
    help=f"The host's root as seen from here: a real reboot is asked for by writing <host-root>/{SENTINEL}.",
)
@_token_option
@_ledger_option
def reboot_command(
    recipe_name: str | None,
    recipe_file: Path | None,
    driver_root: Path | None,
    host_root: Path,
    token: str,
    ledger: Path,
) -> None:
    """Reboot the node: a SIMULATED driver reboots at once (faults cleared, a new boot id); a real node
    gets the reboot sentinel /var/run/reboot-required, which kured (or another reboot daemon) acts on."""
    recipe = _recipe(recipe_name, recipe_file)
    root = driver_root if driver_root is not None else Path(recipe.driver_root)
    if done_before(ledger, token, "reboot") is not None:
        click.echo(f"reboot {recipe.name}: already done for this token{_suffix(token)}")
        return
    if driver_kind(recipe, root) == "simulated":
        said = reboot_simulated(root)
    else:
        said = request_reboot(host_root, token)
    click.echo(f"reboot {recipe.name}: {said}{_suffix(token)}")
    remember(ledger, token, "reboot", (), said, time.time())
