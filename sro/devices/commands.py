"""`sro driver simulate` (install/remove the simulated driver), `sro simulate fault` (inject or
clear a device fault) and `sro simulate load` (set or clear the load the exporter's simulated
readings follow, `sro.devices.simreadings`). Thin: parsing and printing around `simconfig`, `simulated_driver` and
`driverstate`; every path is an option so the same commands work on a host and on a temp tree.

`sro driver simulate --hold` is the payload of the driver DaemonSet: it installs, marks the driver
ready, and removes it again when the pod stops, as a driver container loads and unloads its module;
`--driver-version` installs another version than the config's (an upgrade replaces files and nodes).
`--personality nvidia` (or `personality: nvidia` in the config) installs the NVIDIA personality
(`simulated_nvidia`: NVIDIA's device nodes, a libnvidia-ml.so.1 serving NVML from a state file that
`--hold` rewrites every second and `simulate fault`/`load` rewrite at once, `simnvml_state`).
The `driver` group itself, with `sro driver holders` beside `simulate`, is `sro.node.commands`."""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
from pathlib import Path

import click

from sro.api.builtin_recipes import SIMULATED_NVIDIA_DRIVER_ROOT
from sro.api.recipes import SIMULATED_GPU
from sro.api.yamltext import load_yaml_file
from sro.devices import (
    driverstate,
    simclass_command,
    simconfig,
    simnvml_state,
    simulated_driver,
    simulated_nvidia,
)
from sro.devices.model import DeviceUUID, Inventory

# Written under the driver root by `--hold` once the driver is installed, removed before it is taken
# away: the driver pod's readiness probe (sro/manifests/driver) tests for it.
READY_MARKER = ".ready"
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
NVML_STATE_INTERVAL = 1.0  # seconds between rewrites of the NVML state while holding the driver
DRIVER_ROOTS = {"simgpu": Path(SIMULATED_GPU.driver_root), "nvidia": Path(SIMULATED_NVIDIA_DRIVER_ROOT)}

_device_option = click.option(
    "--device", "devices", multiple=True, help="Device index, UUID, MIG UUID or PCI bus id (repeatable)."
)
_root_option = click.option(
    "--driver-root",
    type=click.Path(path_type=Path),
    default=Path(SIMULATED_GPU.driver_root),
    show_default=True,
    help="Where the simulated driver keeps its files.",
)


def _check_driver_version(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return simconfig.driver_version(value, where=repr(value))
    except simconfig.SimConfigError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from e


@click.command("simulate")
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), help="Devices YAML."
)
@click.option(
    "--personality",
    type=click.Choice(simconfig.PERSONALITIES),
    help="simgpu: the simulated GPU's own devices; nvidia: NVIDIA's device nodes, libnvidia-ml.so.1 and "
    "nvidia-smi serving NVML. [default: the config's `personality`, else simgpu]",
)
@click.option(
    "--driver-root",
    type=click.Path(path_type=Path),
    help=f"Where the simulated driver keeps its files. [default: {SIMULATED_GPU.driver_root}, "
    f"{SIMULATED_NVIDIA_DRIVER_ROOT} for nvidia]",
)
@click.option("--dev-root", type=click.Path(path_type=Path), default=Path("/dev"), show_default=True)
@click.option(
    "--proc-devices", type=click.Path(path_type=Path), default=Path("/proc/devices"), show_default=True
)
@click.option(
    "--proc-modules",
    type=click.Path(path_type=Path),
    default=Path("/proc/modules"),
    show_default=True,
    help="nvidia: refuse to install where a real NVIDIA driver is loaded.",
)
@click.option(
    "--native-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar=simulated_nvidia.NATIVE_DIR_ENV,
    default=simulated_nvidia.DEFAULT_NATIVE_DIR,
    show_default=True,
    help=f"nvidia: the compiled libnvidia-ml.so.1 and nvidia-smi (env {simulated_nvidia.NATIVE_DIR_ENV}).",
)
@click.option(
    "--major", type=int, help="simgpu: character major to use (default: a free LOCAL/EXPERIMENTAL one)."
)
@click.option(
    "--driver-version",
    callback=_check_driver_version,
    help="Install this driver version instead of the config's driverVersion (installing another "
    "version over an installed driver replaces its files and device nodes: an upgrade).",
)
@click.option(
    "--recipe-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A custom simulated recipe (YAML): simulate its device class (--config then describes the "
    "devices: sro/devices/simclass.py); the driver root defaults to the recipe's.",
)
@click.option("--remove", is_flag=True, help="Remove the device nodes and driver files instead.")
@click.option(
    "--hold",
    is_flag=True,
    help=f"Stay after installing (a driver container): write {READY_MARKER} under the driver root, "
    "then remove the driver on SIGTERM or SIGINT and exit 0.",
)
def simulate_driver(
    config_path: Path | None,
    personality: str | None,
    driver_root: Path | None,
    dev_root: Path,
    proc_devices: Path,
    proc_modules: Path,
    native_dir: Path,
    major: int | None,
    driver_version: str | None,
    recipe_file: Path | None,
    remove: bool,
    hold: bool,
) -> None:
    """Install the SIMULATED GPU driver: device nodes, libraries, simgpu-smi and state files (with
    --personality nvidia: NVIDIA's device nodes, libnvidia-ml.so.1 and nvidia-smi)."""
    if remove and hold:
        raise click.UsageError("--hold installs and holds the driver; it does not go with --remove")
    if remove and driver_version is not None:
        raise click.UsageError("--driver-version is for installing; it does not go with --remove")
    recipe = simclass_command.class_recipe(recipe_file, personality)
    _block_stop_signals(hold)
    if recipe is not None and not remove:
        done = simclass_command.install(
            recipe, config_path, driver_root, dev_root, proc_devices, major, driver_version
        )
        if hold:
            _hold(done.driver_root, dev_root)
        return
    if remove:
        default_root = Path(recipe.driver_root) if recipe is not None else None
        root = driver_root or default_root or DRIVER_ROOTS[personality or simconfig.PERSONALITIES[0]]
        removed = _remove(root, dev_root)
        click.echo(f"removed {len(removed)} simulated driver files and device nodes")
        return
    if config_path is None:
        raise click.UsageError("--config FILE is required (or --remove)")
    doc = load_yaml_file(config_path, lambda doc: doc, click.ClickException)
    try:
        chosen = personality or simconfig.personality(doc)
        if chosen == simulated_nvidia.PERSONALITY:
            inv = simulated_nvidia.parse(doc)
        else:
            inv = simconfig.parse(doc, device_node=SIMULATED_GPU.device_node)
    except simconfig.SimConfigError as e:
        raise click.ClickException(f"{config_path}: {e}") from e
    if chosen == simulated_nvidia.PERSONALITY and major is not None:
        raise click.UsageError(
            f"--major is for the simgpu personality (NVIDIA's is {simulated_nvidia.NVIDIA_MAJOR})"
        )
    root = driver_root or DRIVER_ROOTS[chosen]
    if driver_version is not None:
        inv = dataclasses.replace(inv, driver_version=driver_version)
    try:
        known = proc_devices.read_text()
    except OSError as e:
        raise click.ClickException(f"--proc-devices {proc_devices}: cannot read: {e.strerror}") from e
    try:
        if chosen == simulated_nvidia.PERSONALITY:
            modules = _modules(proc_modules)
            simulated_nvidia.check_host(modules, known)  # a real driver matters more than a missing build
            native = simulated_nvidia.find_native(native_dir)
            done = simulated_nvidia.install(inv, root, dev_root, known, modules, native)
        else:
            done = simulated_driver.install(inv, root, dev_root, known, major=major)
    except simulated_driver.SimulatedDriverError as e:
        raise click.ClickException(str(e)) from e
    except (OSError, driverstate.DriverStateError) as e:  # the driver or dev root: not a directory, ...
        where = f"{e.filename}: " if isinstance(e, OSError) and e.filename else ""
        detail = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise click.ClickException(f"cannot install the simulated driver: {where}{detail}") from e
    name = "simulated NVIDIA driver" if chosen == simulated_nvidia.PERSONALITY else "simulated driver"
    click.echo(f"{name} {inv.driver_version}: {len(inv.devices)} SIMULATED devices, char major {done.major}")
    for d in done.inventory.devices:
        click.echo(f"  {d.index}: {d.uuid} {d.device_node} {d.product} {d.memory_mib}MiB numa={d.numa_node}")
    click.echo(f"driver files in {root}")
    if hold:
        _hold(root, dev_root)


def _block_stop_signals(hold: bool) -> None:
    if hold:
        # From here a stop signal waits for sigwait below, even one that comes during the install:
        # the driver is then installed completely and removed again, never left half-made.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        for signum in _STOP_SIGNALS:
            # A handler, not the default: as PID 1 of a container the process gets only handled signals.
            signal.signal(signum, lambda *_: None)


def _modules(proc_modules: Path) -> str:
    """The text of /proc/modules; none where the kernel has no modules (no such file)."""
    try:
        return proc_modules.read_text()
    except FileNotFoundError:
        return ""
    except OSError as e:
        raise click.ClickException(f"--proc-modules {proc_modules}: cannot read: {e.strerror}") from e


def _remove(driver_root: Path, dev_root: Path) -> list[Path]:
    """Remove the simulated driver installed at `driver_root`, whichever personality it has."""
    if simulated_nvidia.personality_of(driver_root) == simulated_nvidia.PERSONALITY:
        return simulated_nvidia.remove(driver_root, dev_root)
    return simulated_driver.remove(driver_root, dev_root)


def _hold(driver_root: Path, dev_root: Path) -> None:
    """Hold the driver until a stop signal; meanwhile keep the NVML state (if any) up to date."""
    marker = driver_root / READY_MARKER
    driverstate.write_atomic(marker, "simulated driver installed\n")
    click.echo(f"ready ({marker}); holding the driver until SIGTERM")
    signum = _wait_for_stop(driver_root)
    marker.unlink(missing_ok=True)  # not ready from here on, and `remove` can take the directory
    removed = _remove(driver_root, dev_root)
    click.echo(
        f"{signal.Signals(signum).name}: removed {len(removed)} simulated driver files and device nodes"
    )


def _wait_for_stop(driver_root: Path) -> int:
    """The stop signal, once it comes; meanwhile the NVML state (where the driver serves NVML) is
    rewritten every second, so its readings move with the load."""
    if not simnvml_state.enabled(driver_root):
        return signal.sigwait(_STOP_SIGNALS)
    writer = simnvml_state.StateWriter(driver_root)
    said = ""
    while True:
        info = signal.sigtimedwait(_STOP_SIGNALS, NVML_STATE_INTERVAL)
        if info is not None:
            return info.si_signo
        try:
            writer.write()
            said = ""
        except (driverstate.DriverStateError, OSError) as e:
            if str(e) != said:  # once per problem, not every second; the last good state stays
                click.echo(f"NVML state not updated (the last one stays): {e}", err=True)
                said = str(e)


def _update_nvml(driver_root: Path) -> None:
    """After a fault or load change: the NVML state at once, where the driver serves NVML."""
    if not simnvml_state.enabled(driver_root):
        return
    try:
        simnvml_state.write_state(driver_root)
    except (driverstate.DriverStateError, OSError) as e:
        click.echo(f"NVML state not updated now (the holding driver rewrites it each second): {e}", err=True)


@click.group("simulate")
def simulate() -> None:
    """Inject faults into the SIMULATED driver's devices, or put a load on them."""


def _inventory(driver_root: Path) -> Inventory:
    try:
        return driverstate.read_inventory(driver_root)
    except driverstate.DriverStateError as e:
        raise click.ClickException(str(e)) from e


def _targets(inv: Inventory, devices: tuple[str, ...], all_devices: bool) -> list[DeviceUUID]:
    """The UUIDs named by --device (index, UUID, MIG UUID or PCI bus id) or --all."""
    migs = inv.mig_by_uuid()
    targets: list[DeviceUUID] = []
    for ref in devices:
        d = inv.find(ref)
        if d is not None:
            targets.append(d.uuid)
        elif ref in migs:
            targets.append(DeviceUUID(ref))
        else:
            known = ", ".join(f"{x.index}={x.uuid}" for x in inv.devices)
            raise click.ClickException(f"--device {ref!r}: no such simulated device (known: {known})")
    if all_devices:
        targets = [d.uuid for d in inv.devices]
    return targets


@simulate.command("fault")
@_device_option
@click.option("--all", "all_devices", is_flag=True, help="Every device (with --clear: every fault).")
@click.option(
    "--xid",
    type=click.IntRange(min=1),
    default=79,
    show_default=True,
    help="Xid to report, a positive integer (79: fallen off the bus).",
)
@click.option("--clear", is_flag=True, help="Clear the fault(s) instead of injecting.")
@_root_option
def fault(devices: tuple[str, ...], all_devices: bool, xid: int, clear: bool, driver_root: Path) -> None:
    """Inject (or --clear) an Xid fault; the device plugin turns it into device health."""
    if not devices and not all_devices:
        raise click.UsageError("name a device with --device, or use --all")
    inv = _inventory(driver_root)
    targets = _targets(inv, devices, all_devices)
    if clear:
        cleared = driverstate.clear_faults(driver_root, None if all_devices else targets)
        _update_nvml(driver_root)
        click.echo(json.dumps({"cleared": cleared}))
        return
    for uuid in targets:
        driverstate.set_fault(driver_root, uuid, xid)
    _update_nvml(driver_root)
    json.dump({"fault": {"xid": xid, "devices": targets}}, sys.stdout)
    click.echo()


@simulate.command("load")
@_device_option
@click.option("--all", "all_devices", is_flag=True, help="Every device (with --clear: every load).")
@click.option("--util", type=click.FloatRange(0, 100), help="Utilisation in percent (DCGM_FI_DEV_GPU_UTIL).")
@click.option(
    "--memory", "memory_mib", type=click.IntRange(0), help="Framebuffer used in MiB (DCGM_FI_DEV_FB_USED)."
)
@click.option("--clear", is_flag=True, help="Clear the load(s): readings follow the pods again.")
@_root_option
def load(
    devices: tuple[str, ...],
    all_devices: bool,
    util: float | None,
    memory_mib: int | None,
    clear: bool,
    driver_root: Path,
) -> None:
    """Set (or --clear) the load the exporter reports for SIMULATED devices.

    Without a load, a simulated device's utilisation and memory follow the pods that hold it; with
    one, they follow the load (with a little noise), and temperature and power follow utilisation.
    """
    if not devices and not all_devices:
        raise click.UsageError("name a device with --device, or use --all")
    if not clear and util is None and memory_mib is None:
        raise click.UsageError("give --util and/or --memory (or --clear)")
    if clear and (util is not None or memory_mib is not None):
        raise click.UsageError("--clear takes no --util or --memory")
    inv = _inventory(driver_root)
    targets = _targets(inv, devices, all_devices)
    try:
        if clear:
            cleared = driverstate.clear_loads(driver_root, None if all_devices else targets)
            _update_nvml(driver_root)
            click.echo(json.dumps({"cleared": cleared}))
            return
        if memory_mib is not None:
            sizes = {d.uuid: d.memory_mib for d in inv.devices} | {
                m.uuid: m.memory_mib for m in inv.mig_by_uuid().values()
            }
            too_small = [u for u in targets if memory_mib > sizes[u]]
            if too_small:
                raise click.ClickException(
                    f"--memory {memory_mib}: more than the framebuffer of {too_small[0]} "
                    f"({sizes[too_small[0]]} MiB)"
                )
        for uuid in targets:
            driverstate.set_load(driver_root, uuid, util, memory_mib)
        _update_nvml(driver_root)
    except driverstate.DriverStateError as e:
        raise click.ClickException(str(e)) from e
    json.dump({"load": {"util": util, "memoryMiB": memory_mib, "devices": targets}}, sys.stdout)
    click.echo()


@simulate.command("status")
@_root_option
def status(driver_root: Path) -> None:
    """Print the SIMULATED devices, their active faults and loads as JSON."""
    try:
        inv = driverstate.read_inventory(driver_root)
        faults = driverstate.read_faults(driver_root)
        loads = driverstate.read_loads(driver_root)
    except driverstate.DriverStateError as e:
        raise click.ClickException(str(e)) from e
    out = {
        "simulated": True,
        "personality": simulated_nvidia.personality_of(driver_root),
        "driverVersion": inv.driver_version,
        "devices": [
            {
                "index": d.index,
                "uuid": d.uuid,
                "deviceNode": d.device_node,
                "fault": None
                if d.uuid not in faults
                else {"xid": faults[d.uuid].xid, "since": faults[d.uuid].since},
                "load": None
                if d.uuid not in loads
                else {"util": loads[d.uuid].util, "memoryMiB": loads[d.uuid].memory_mib},
                "mig": [
                    {"uuid": m.uuid, "profile": m.profile, "fault": m.uuid in faults} for m in d.mig_devices
                ],
            }
            for d in inv.devices
        ],
    }
    click.echo(json.dumps(out, indent=2))
