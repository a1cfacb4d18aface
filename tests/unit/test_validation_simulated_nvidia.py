"""`sro validate driver|workload` on sro's simulated NVIDIA driver: the pure verdicts over hand-made
facts (NVML's view in the container, the CUDA and compute-library skips, NVML against the driver's
own device list), how the driver's nvidia-smi is run and told where /dev is, detection from the
NVML state file, and the termination message that carries the skipped checks to the operator."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from sro.api.recipes import NVIDIA_GPU, on_simulated_driver
from sro.devices.model import Device, DeviceUUID, Inventory
from sro.host import devnodes
from sro.host.root import HostRoot
from sro.node.validation import driver, nvmlview, tools, workload
from sro.node.validation.report import Report

U = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(3)]
RECIPE = on_simulated_driver(NVIDIA_GPU)
HINT = "check the hook"


def _listed(*uuids: str) -> tuple[tools.Listed, ...]:
    return tuple(tools.Listed(i, "NVIDIA A100-SXM4-40GB (simulated)", u) for i, u in enumerate(uuids))


def _check(
    view: nvmlview.NvmlView | None, granted: str | None = U[1], minor: int | None = 1, **kw: object
) -> tuple[str, str]:
    listed = kw.get("listed", _listed(U[1]))
    r = nvmlview.check(view, str(kw.get("note", "")), granted, minor, listed, HINT)  # type: ignore[arg-type]
    return r.status, r.reason or r.summary


def test_nvml_lists_exactly_the_granted_gpu() -> None:
    one = nvmlview.NvmlView((nvmlview.NvmlGpu(U[1], 1),), driver_version="550.90.07")
    status, says = _check(one)
    assert status == "pass" and U[1] in says and "550.90.07" in says
    assert _check(one, granted="1")[0] == "pass"  # an index names no UUID: the minor and the tool decide
    status, says = _check(one, granted=U[2])
    assert status == "fail" and says.startswith(f"NVML lists {U[1]}, but the allocation names {U[2]}")
    status, says = _check(one, listed=_listed(U[0]))
    assert status == "fail" and f"but the tool lists {U[0]}" in says
    status, says = _check(one, minor=2)
    assert status == "fail" and "minor 1, but the usable device node has minor 2" in says
    two = nvmlview.NvmlView((nvmlview.NvmlGpu(U[0], 0), nvmlview.NvmlGpu(U[1], 1)))
    status, says = _check(two)
    assert status == "fail" and "lists 2 GPUs in the container" in says
    assert _check(nvmlview.NvmlView())[0] == "fail"  # none at all


def test_nvml_that_does_not_load_or_was_not_asked() -> None:
    status, says = _check(nvmlview.NvmlView(error="nvmlInit_v2 failed: Driver Not Loaded (9)"))
    assert status == "fail" and says.startswith(
        "nvmlInit_v2 failed: Driver Not Loaded (9): NVML does not work"
    )
    assert says.endswith(HINT)
    assert _check(None, note="skipped: simulated-gpu devices are not NVML's")[0] == "skip"
    assert nvmlview.observe(NVIDIA_GPU, ("compute",)) == (
        None,
        "skipped: the container did not ask for the 'utility' group that holds NVML",
    )


def test_ask_reports_a_library_that_does_not_load() -> None:
    view = nvmlview.ask("libsro-no-such-library.so.1")
    assert view.gpus == () and view.error.startswith("libsro-no-such-library.so.1 does not load:")


def _node(i: int, err: int) -> devnodes.OpenResult:
    return devnodes.OpenResult(devnodes.NodeStat(f"/dev/nvidia{i}", f"/dev/nvidia{i}", "char", 195, i), err)


def _workload(**changes: object) -> workload.WorkloadFacts:
    ml = workload.Library(
        "utility",
        "libnvidia-ml.so.*",
        (("libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", ""),),
    )
    base: dict[str, object] = dict(
        recipe=RECIPE,
        visible=U[1],
        capabilities=("utility", "compute"),
        nodes=(_node(0, errno.EPERM), _node(1, errno.ENXIO)),  # every node but the granted one refused
        control=(),
        probe=workload.Probe(195, 200, errno.EPERM),
        libraries=(
            ml,
            workload.Library("utility", "libnvidia-cfg.so.*", ()),
            workload.Library("compute", "libcuda.so.*", ()),
        ),
        tool=tools.ToolRun(
            ("/usr/bin/nvidia-smi", "-L"), 0, f"GPU 0: NVIDIA A100-SXM4-40GB (simulated) (UUID: {U[1]})\n"
        ),
        cuda_note=workload._cuda(RECIPE, None, {"PATH": "/usr/bin"}, simulated_driver=True)[1],
        simulated_driver=True,
        nvml=nvmlview.NvmlView((nvmlview.NvmlGpu(U[1], 1),)),
        nvml_note="",
    )
    base.update(changes)
    return workload.WorkloadFacts(**base)  # type: ignore[arg-type]


def test_workload_on_the_simulated_driver_passes_without_cuda() -> None:
    results = {r.check: r for r in workload.evaluate(_workload())}
    assert {k: r.status for k, r in results.items()} == {
        "visible devices": "pass",
        "tool": "pass",
        "device nodes": "pass",
        "device cgroup": "pass",
        "libraries": "pass",
        "nvml": "pass",
        "cuda sample": "skip",
    }
    assert results["cuda sample"].summary.startswith(tools.NO_CUDA)
    assert f"compute: none in the linker cache ({tools.NO_CUDA})" in results["libraries"].details
    report = Report("workload", "h", tuple(results.values()))
    assert report.ok and report.verdict.startswith("workload validation passed (6 checks)")
    assert report.termination_message().splitlines()[1:] == [
        f"SKIP cuda sample: {results['cuda sample'].summary}"
    ]


def test_on_a_real_driver_the_missing_cuda_library_fails() -> None:
    facts = _workload(simulated_driver=False, recipe=NVIDIA_GPU)
    status = {r.check: (r.status, r.reason) for r in workload.evaluate(facts)}
    assert status["libraries"][0] == "fail"
    assert status["libraries"][1].startswith("no library of the 'compute' group (libcuda.so.*)")
    assert workload._cuda(NVIDIA_GPU, None, {"PATH": "/nonexistent"})[1].startswith(
        "skipped: vectorAdd is not"
    )


def test_the_workload_nvml_check_sees_another_gpu() -> None:
    facts = _workload(nvml=nvmlview.NvmlView((nvmlview.NvmlGpu(U[0], 0),)))
    status = {r.check: (r.status, r.reason) for r in workload.evaluate(facts)}
    assert (
        status["nvml"][0] == "fail"
        and f"NVML lists {U[0]}, but the allocation names {U[1]}" in status["nvml"][1]
    )


def _devices(n: int) -> Inventory:
    return Inventory(
        "nvml",
        tuple(
            Device(
                DeviceUUID(U[i]),
                i,
                i,
                f"/dev/nvidia{i}",
                f"0000:0{i}:00.0",
                "NVIDIA A100-SXM4-40GB (simulated)",
                40960,
                "8.0",
            )
            for i in range(n)
        ),
        "550.90.07",
    )


def _driver(**changes: object) -> driver.DriverFacts:
    base: dict[str, object] = dict(
        recipe=RECIPE,
        driver_root="/driver-root",
        dev_root="/host-dev",
        inventory=_devices(2),
        tool=tools.ToolRun(
            ("/driver-root/usr/bin/nvidia-smi", "-L"),
            0,
            "".join(f"GPU {i}: A (UUID: {U[i]})\n" for i in range(2)),
        ),
        nodes=tuple(
            devnodes.NodeStat(f"/dev/nvidia{i}", f"/host-dev/nvidia{i}", "char", 195, i) for i in range(2)
        ),
        simulated_driver=True,
        made=(U[0], U[1]),
    )
    base.update(changes)
    return driver.DriverFacts(**base)  # type: ignore[arg-type]


def test_driver_check_compares_nvml_with_what_the_simulated_driver_made() -> None:
    results = driver.evaluate(_driver())
    assert [(r.check, r.status) for r in results][-1] == ("simulated devices", "pass")
    assert all(r.status == "pass" for r in results)
    assert "(SIMULATED, not real hardware)" in results[0].summary
    # a missing /dev/nvidia2 hides GPU 2 from NVML and from nvidia-smi alike: only the list tells
    hidden = {r.check: (r.status, r.reason) for r in driver.evaluate(_driver(made=(U[0], U[1], U[2])))}
    assert hidden["tool vs inventory"][0] == "pass"
    status, reason = hidden["simulated devices"]
    assert status == "fail" and reason.startswith(f"NVML does not see {U[2]} that the simulated driver made")
    assert "sro driver simulate --personality nvidia" in reason
    missing = dict(
        (r.check, r.status) for r in driver.evaluate(_driver(made=(), made_error="no devices.json"))
    )
    assert missing["simulated devices"] == "fail"
    # a real driver's report is as before: four checks
    assert len(driver.evaluate(_driver(simulated_driver=False))) == 4


def test_nvidia_smi_runs_in_place_and_is_told_the_dev_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    smi = root / "usr/bin/nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "GPU 0: A (UUID: {U[0]}) dev=${tools.SIMNVML_DEV_ROOT_ENV}"\n')
    smi.chmod(0o755)
    assert driver.tool_argv(NVIDIA_GPU, root, smi) == ["chroot", str(root), "/usr/bin/nvidia-smi", "-L"]
    assert driver.tool_argv(NVIDIA_GPU, root, smi, simulated_driver=True) == [str(smi), "-L"]
    dev = tmp_path / "host-dev"
    dev.mkdir()

    def opener(recipe: object, driver_root: Path) -> object:
        raise OSError("no NVML in this test")

    facts = driver.observe(RECIPE, root, HostRoot.at("/").with_tree(dev=dev), opener, simulated_driver=True)  # type: ignore[arg-type]
    assert facts.tool is not None and facts.tool.ok, facts.tool
    assert facts.tool.stdout.strip().endswith(f"dev={dev}")
    assert facts.made_error.startswith(str(root / "devices.json"))  # no simulated driver installed here


def test_the_simulated_driver_is_found_by_its_nvml_state(tmp_path: Path) -> None:
    assert not tools.simulated_nvidia(tmp_path)
    state = tmp_path / "run/sro-simnvml/state"
    state.parent.mkdir(parents=True)
    state.write_text("simnvml version=1\n")
    assert tools.simulated_nvidia(tmp_path)
    assert os.environ.get(tools.SIMNVML_DEV_ROOT_ENV) is None  # nothing here set it for the process
