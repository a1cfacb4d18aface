"""`sro validate workload`: the pure verdicts over hand-made facts (device-node outcomes, the probe,
libraries, the tool), and `observe` over a container-like tree made from the simulated driver
installed into a temp dir: a /dev holding only the granted node, a linker cache built by ldconfig."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices import simconfig, simulated_driver
from sro.host import devnodes, ldcache
from sro.host.root import HostRoot
from sro.node.validation import tools, workload
from sro.node.validation.report import Report

LDCONFIG = shutil.which("ldconfig") or "/sbin/ldconfig"
U = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(3)]
MAJOR = 120


def _node(i: int | str, err: int) -> devnodes.OpenResult:
    name = f"sro-simgpu{i}"
    minor = 255 if i == "ctl" else int(i)
    kind = "absent" if err == errno.ENOENT else "char"
    return devnodes.OpenResult(devnodes.NodeStat(f"/dev/{name}", f"/d/{name}", kind, MAJOR, minor), err)


def _listing(*pairs: tuple[int, str]) -> str:
    return "".join(f"GPU {i}: Sim (UUID: {u}) [simulated]\n" for i, u in pairs)


def _facts(**changes: object) -> workload.WorkloadFacts:
    base: dict[str, object] = dict(
        recipe=SIMULATED_GPU,
        visible=U[1],
        capabilities=("utility", "compute"),
        nodes=(_node(1, errno.ENXIO),),
        control=(_node("ctl", errno.ENXIO),),
        probe=workload.Probe(MAJOR, 200, errno.EPERM),
        libraries=(
            workload.Library(
                "utility", "libsimgpu-ml.so.*", (("libsimgpu-ml.so.1", "/lib/libsimgpu-ml.so.1", ""),)
            ),
            workload.Library("compute", "libsimgpu.so.*", (("libsimgpu.so.1", "/lib/libsimgpu.so.1", ""),)),
        ),
        tool=tools.ToolRun(("/usr/bin/simgpu-smi", "-L"), 0, _listing((1, U[1]))),
        cuda_note="skipped: simulated-gpu devices are SIMULATED: there is no CUDA to run on them",
    )
    base.update(changes)
    return workload.WorkloadFacts(**base)  # type: ignore[arg-type]


def _checks(facts: workload.WorkloadFacts) -> dict[str, tuple[str, str]]:
    return {r.check: (r.status, r.reason) for r in workload.evaluate(facts)}


def test_all_good() -> None:
    results = workload.evaluate(_facts())
    assert [(r.check, r.status) for r in results] == [
        ("visible devices", "pass"),
        ("tool", "pass"),
        ("device nodes", "pass"),
        ("device cgroup", "pass"),
        ("libraries", "pass"),
        ("nvml", "skip"),
        ("cuda sample", "skip"),
    ]
    report = Report("workload", "h", results)
    assert report.exit_code == 0 and report.verdict.startswith("workload validation passed (5 checks)")
    assert "SKIP cuda sample: simulated-gpu devices are SIMULATED" in "\n".join(report.stdout_lines())


@pytest.mark.parametrize(
    ("visible", "says"),
    [
        (None, "SRO_VISIBLE_DEVICES is not set: no device was allocated"),
        ("", "SRO_VISIBLE_DEVICES is empty"),
        ("all", "SRO_VISIBLE_DEVICES=all names no single device"),
        ("void", "SRO_VISIBLE_DEVICES=void names no single device"),
        (f"{U[0]},{U[1]}", "names 2 devices, expected exactly one"),
    ],
)
def test_env_names_zero_or_two_devices(visible: str | None, says: str) -> None:
    status, reason = _checks(_facts(visible=visible))["visible devices"]
    assert status == "fail" and says in reason
    assert "`sro.dev/simulated-gpu: 1`" in reason


def test_env_by_index_or_cdi_name() -> None:
    assert workload.split_ids("sro.dev/simulated-gpu=1") == ("1",)
    assert workload.split_ids(" 1, 1 ,") == ("1",)
    facts = _facts(visible="1")
    assert _checks(facts)["visible devices"][0] == "pass"
    assert workload.expected_node(SIMULATED_GPU, "1", ()) == "/dev/sro-simgpu1"
    # by UUID: the tool's listing gives the index; nvidia nodes are numbered by minor: not derivable
    assert (
        workload.expected_node(SIMULATED_GPU, U[2], tools.parse_listing(_listing((2, U[2]))))
        == "/dev/sro-simgpu2"
    )
    assert workload.expected_node(NVIDIA_GPU, "0", ()) is None


def test_ungranted_node_openable() -> None:
    facts = _facts(nodes=(_node(0, errno.ENXIO), _node(1, errno.ENXIO)))
    status, reason = _checks(facts)["device nodes"]
    assert status == "fail"
    assert reason.startswith("2 device nodes are usable (/dev/sro-simgpu0, /dev/sro-simgpu1), expected only")


def test_other_nodes_refused_is_fine() -> None:
    facts = _facts(nodes=(_node(0, errno.EPERM), _node(1, errno.ENXIO), _node(2, errno.EPERM)))
    res = next(r for r in workload.evaluate(facts) if r.check == "device nodes")
    assert res.status == "pass", res.reason
    assert "/dev/sro-simgpu0: refused by the device cgroup (EPERM)" in res.details


def test_granted_node_refused_absent_or_wrong() -> None:
    status, reason = _checks(_facts(nodes=(_node(1, errno.EPERM),)))["device nodes"]
    assert status == "fail"
    assert reason.startswith(
        "the granted device's node /dev/sro-simgpu1 is refused by the device cgroup (EPERM)"
    )
    status, reason = _checks(_facts(nodes=()))["device nodes"]
    assert reason.startswith(
        "the granted device's node /dev/sro-simgpu1 is absent; the runtime hook did not inject"
    )
    status, reason = _checks(_facts(nodes=(_node(0, errno.ENXIO),)))["device nodes"]
    assert reason.startswith("/dev/sro-simgpu0 is usable but the granted device's node is /dev/sro-simgpu1")
    # a real GPU's node opens; nvidia nodes cannot be tied to the id, so one usable node is what counts
    gpu = devnodes.OpenResult(devnodes.NodeStat("/dev/nvidia3", "/dev/nvidia3", "char", 195, 3), 0)
    facts = _facts(
        recipe=NVIDIA_GPU, visible="GPU-x", nodes=(gpu,), control=(), tool=None, tool_note="skipped"
    )
    assert _checks(facts)["device nodes"][0] == "pass"


def test_node_with_other_error_and_control_node_refused() -> None:
    status, reason = _checks(_facts(nodes=(_node(0, errno.EACCES), _node(1, errno.ENXIO))))["device nodes"]
    assert status == "fail" and reason.startswith("/dev/sro-simgpu0 is not usable (EACCES)")
    status, reason = _checks(_facts(control=(_node("ctl", errno.EPERM),)))["device nodes"]
    assert status == "fail" and reason.startswith(
        "control node /dev/sro-simgpuctl is refused by the device cgroup"
    )
    assert _checks(_facts(control=(_node("ctl", errno.ENOENT),)))["device nodes"][0] == "pass"


@pytest.mark.parametrize(
    ("probe", "status"),
    [
        (workload.Probe(MAJOR, 200, errno.EPERM), "pass"),
        (workload.Probe(MAJOR, 200, errno.ENXIO), "fail"),
        (workload.Probe(MAJOR, 200, 0), "fail"),
        (workload.Probe(MAJOR, 200, None), "skip"),
        (None, "skip"),
    ],
)
def test_device_cgroup_probe(probe: workload.Probe | None, status: str) -> None:
    got, reason = _checks(_facts(probe=probe))["device cgroup"]
    assert got == status
    if status == "fail":
        assert "instead of EPERM: the container runs without a device cgroup restriction" in reason


def test_probe_minor_avoids_usable_minors() -> None:
    assert workload.probe_minor({0, 255}) == 200
    assert workload.probe_minor(set(range(200, 256))) == 0


def test_library_missing_or_not_loading() -> None:
    missing = (
        workload.Library("utility", "libsimgpu-ml.so.*", ()),
        workload.Library("compute", "libsimgpu.so.*", (("libsimgpu.so.1", "/lib/libsimgpu.so.1", ""),)),
    )
    status, reason = _checks(_facts(libraries=missing, ldcache_error=""))["libraries"]
    assert status == "fail"
    assert reason.startswith(
        "no library of the 'utility' group (libsimgpu-ml.so.*) is in the linker cache: the runtime hook"
    )
    broken = (
        workload.Library(
            "compute", "libsimgpu.so.*", (("libsimgpu.so.1", "/lib/x", "x: invalid ELF header"),)
        ),
    )
    status, reason = _checks(_facts(libraries=broken, capabilities=("compute",)))["libraries"]
    assert (
        reason == "libsimgpu.so.1 (-> /lib/x) is in the linker cache but does not load: x: invalid ELF header"
    )
    # a group with one of its optional libraries absent still passes
    nv = (
        workload.Library("compute", "libcuda.so.*", (("libcuda.so.1", "/usr/lib/libcuda.so.1", ""),)),
        workload.Library("compute", "libnvidia-nvvm.so.*", ()),
    )
    facts = _facts(recipe=NVIDIA_GPU, capabilities=("compute",), libraries=nv)
    res = next(r for r in workload.evaluate(facts) if r.check == "libraries")
    assert res.status == "pass" and "libnvidia-nvvm.so.*: not in the linker cache" in res.details


def test_tool_missing_fails_or_lists_other_devices() -> None:
    status, reason = _checks(_facts(tool=None, tool_note="simgpu-smi is not on PATH (/usr/bin:/bin)"))["tool"]
    assert status == "fail" and reason.startswith(
        "simgpu-smi is not on PATH (/usr/bin:/bin): the driver's binaries"
    )
    two = tools.ToolRun(("smi", "-L"), 0, _listing((0, U[0]), (1, U[1])))
    status, reason = _checks(_facts(tool=two))["tool"]
    assert status == "fail" and "lists 2 devices in the container" in reason
    other = tools.ToolRun(("smi", "-L"), 0, _listing((0, U[0])))
    assert f"lists {U[0]}, but SRO_VISIBLE_DEVICES names {U[1]}" in _checks(_facts(tool=other))["tool"][1]
    failed = tools.ToolRun(("smi", "-L"), 127, "", "sh: not found\n")
    assert "(exit status 127: sh: not found)" in _checks(_facts(tool=failed))["tool"][1]


def test_cuda_sample() -> None:
    ok = tools.ToolRun(("vectorAdd",), 0, "Test PASSED\n")
    assert _checks(_facts(recipe=NVIDIA_GPU, cuda=ok))["cuda sample"][0] == "pass"
    bad = tools.ToolRun(
        ("vectorAdd",), 1, "Failed to allocate device vector A (error code no CUDA-capable device)\n"
    )
    status, reason = _checks(_facts(recipe=NVIDIA_GPU, cuda=bad))["cuda sample"]
    assert status == "fail" and "no CUDA-capable device" in reason and "Xid" in reason
    env = {"PATH": "/nonexistent"}
    assert workload._cuda(SIMULATED_GPU, "vectorAdd", env)[1].startswith(
        "skipped: simulated-gpu devices are SIMULATED"
    )
    assert workload._cuda(NVIDIA_GPU, None, env)[1].startswith("skipped: vectorAdd is not on PATH")
    assert workload._cuda(NVIDIA_GPU, "none", env)[1] == "skipped: disabled (--cuda-sample none)"
    assert (
        workload._cuda(NVIDIA_GPU, "/opt/x/sample --n 4", env)[1]
        == "/opt/x/sample is not on PATH (/nonexistent)"
    )
    run, _ = workload._cuda(NVIDIA_GPU, "true --ignored", {"PATH": os.environ["PATH"]})
    assert run is not None and run.ok and run.argv == ("true", "--ignored")


def test_capabilities_follow_the_env() -> None:
    assert workload.capabilities(SIMULATED_GPU, {}) == ("utility", "compute")
    assert workload.capabilities(SIMULATED_GPU, {"SRO_DRIVER_CAPABILITIES": "compute,video"}) == ("compute",)
    assert workload.capabilities(NVIDIA_GPU, {"NVIDIA_DRIVER_CAPABILITIES": "all"}) == (
        "compute",
        "graphics",
        "utility",
        "video",
    )


def test_default_loader_uses_the_real_linker_cache() -> None:
    workload.load_by_soname("libc.so.6")
    with pytest.raises(OSError, match=r"libsro-nothing\.so\.1"):
        workload.load_by_soname("libsro-nothing.so.1")


# -- observe over a container-like tree -----------------------------------------------------------


class Container:
    """What a container granted one simulated device would see: its /dev, /etc/ld.so.cache, PATH."""

    def __init__(self, base: Path, granted: tuple[int, ...]) -> None:
        inv = simconfig.parse({"count": 3}, device_node=SIMULATED_GPU.device_node)
        self.installed = simulated_driver.install(
            inv, base / "root", base / "host-dev", Path("/proc/devices").read_text()
        )
        self.uuids = [d.uuid for d in self.installed.inventory.devices]
        self.dev = base / "dev"
        self.dev.mkdir()
        for name in [f"sro-simgpu{i}" for i in granted] + ["sro-simgpuctl"]:
            st = (base / "host-dev" / name).stat()
            os.mknod(self.dev / name, st.st_mode, st.st_rdev)
        self.etc = base / "etc"
        self.etc.mkdir()
        self.lib = base / "root" / "lib"
        self.host = HostRoot.at("/").with_tree(dev=self.dev, etc=self.etc)

    def ldconfig(self) -> None:
        conf = self.etc / "ld.so.conf"
        conf.write_text(f"{self.lib}\n")
        subprocess.run([LDCONFIG, "-C", str(self.etc / "ld.so.cache"), "-f", str(conf)], check=True)

    def load(self, soname: str) -> None:
        """Load what the test's cache maps the soname to (the process's own cache knows nothing of it)."""
        paths = {e.soname: e.path for e in ldcache.read(self.host)}
        ctypes.CDLL(paths[soname])

    def env(self, visible: str | None) -> dict[str, str]:
        env = {"PATH": f"{self.installed.driver_root / 'bin'}:/usr/bin:/bin"}
        if visible is not None:
            env["SRO_VISIBLE_DEVICES"] = visible
        return env

    def results(self, visible: str | None) -> dict[str, tuple[str, str]]:
        report = workload.validate(SIMULATED_GPU, self.env(visible), self.host, loader=self.load)
        return {r.check: (r.status, r.reason) for r in report.results}


needs_tools = pytest.mark.skipif(not os.path.exists(LDCONFIG), reason="needs ldconfig")


@pytest.mark.root
@needs_tools
def test_observe_one_granted_device(tmp_path: Path) -> None:
    c = Container(tmp_path, granted=(1,))
    c.ldconfig()
    checks = c.results(c.uuids[1])
    for name in ("visible devices", "tool", "device nodes", "libraries"):
        assert checks[name][0] == "pass", (name, checks[name])
    assert checks["cuda sample"][0] == "skip"
    # this process's own device cgroup decides the probe: refused only where a cgroup restricts it
    independent = devnodes.probe_device(c.host, c.installed.major, 201)
    assert checks["device cgroup"][0] == ("pass" if independent == errno.EPERM else "fail")
    assert sorted(p.name for p in c.dev.iterdir()) == ["sro-simgpu1", "sro-simgpuctl"]  # probe node removed


@pytest.mark.root
@needs_tools
def test_observe_ungranted_node_openable_and_two_devices(tmp_path: Path) -> None:
    c = Container(tmp_path, granted=(0, 1))
    c.ldconfig()
    checks = c.results(c.uuids[1])
    assert checks["device nodes"][0] == "fail" and "2 device nodes are usable" in checks["device nodes"][1]
    checks = c.results(f"{c.uuids[0]},{c.uuids[1]}")
    assert checks["visible devices"][0] == "fail" and checks["tool"][0] == "fail"
    assert "lists 2 devices" in checks["tool"][1]


@pytest.mark.root
@needs_tools
def test_observe_missing_library_cache_and_env(tmp_path: Path) -> None:
    c = Container(tmp_path, granted=(0,))
    checks = c.results("0")
    assert checks["libraries"][0] == "fail" and "ld.so.cache" in checks["libraries"][1]  # no cache at all
    (c.lib / "libsimgpu-ml.so.1").unlink()
    c.ldconfig()
    checks = c.results("0")
    assert checks["libraries"][0] == "fail"
    assert checks["libraries"][1].startswith("no library of the 'utility' group (libsimgpu-ml.so.*)")
    checks = c.results(None)
    assert checks["visible devices"][0] == "fail" and checks["tool"][0] == "fail"  # lists all 3


@needs_tools
def test_ldcache_parse_matches_ldconfig_p() -> None:
    cache = Path("/etc/ld.so.cache")
    if not cache.exists():
        pytest.skip("no /etc/ld.so.cache here")
    entries = ldcache.read(HostRoot.at("/"))
    out = subprocess.run([LDCONFIG, "-p"], capture_output=True, text=True, check=True).stdout
    listed = [(line.split()[0], line.split(" => ")[1]) for line in out.splitlines() if " => " in line]
    assert [(e.soname, e.path) for e in entries] == listed


def test_ldcache_rejects_garbage() -> None:
    with pytest.raises(ldcache.LdCacheError, match="not a glibc linker cache"):
        ldcache.parse(b"nonsense")
    with pytest.raises(ldcache.LdCacheError, match="truncated"):
        ldcache.parse(ldcache.MAGIC + b"\x05\0\0\0" + b"\0" * 30)
