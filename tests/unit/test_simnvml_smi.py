"""The simulated NVIDIA driver's nvidia-smi, run as a program against the compiled libnvidia-ml.so.1.

Why through the real binary and library: scripts, validation pods and people parse nvidia-smi's
output (`-L`, `--query-gpu ... --format=csv`), so what matters is the text the program prints for a
given driver state, and that it learns it only through NVML (the GPUs a container may see, their
renumbered indexes, a lost GPU). The state files and device nodes here are written by hand in the
design's format, so a change on either side of that contract shows up here.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sro.local.native import SimNvmlBuild
from tests.simnvml import simnvml_build  # noqa: F401  (the session fixture)

NVIDIA_MAJOR = 195
DRIVER = "550.90.07"
A100 = "NVIDIA A100-SXM4-40GB (simulated)"


def _encode(value: object) -> str:
    return "".join(chr(b) if 0x21 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in str(value).encode())


def _line(kind: str, values: Mapping[str, object]) -> str:
    return " ".join([kind, *(f"{k}={_encode(v)}" for k, v in values.items())])


@dataclass
class Gpu:
    index: int
    uuid: str
    bus: str
    lost: bool = False
    mig: bool = False
    serial: str = "1320000000001"
    reading: dict[str, int] = field(
        default_factory=lambda: {
            "util": 37, "memutil": 12, "fb_used": 1024, "fb_reserved": 512, "temp": 45, "memtemp": 51,
            "power": 123450, "energy": 99000, "sm_clock": 1200, "mem_clock": 1215, "pcie_tx": 10,
            "pcie_rx": 20, "pcie_replay": 0, "ecc_sbe_vol": 3, "ecc_dbe_vol": 2, "ecc_sbe_agg": 7,
            "ecc_dbe_agg": 4, "remap_corr": 0, "remap_unc": 0, "remap_pending": 0, "remap_failure": 0,
            "enc": 0, "dec": 0,
        }
    )  # fmt: skip

    def lines(self) -> list[str]:
        gpu = {
            "index": self.index, "minor": self.index, "uuid": self.uuid, "bus": self.bus, "name": A100,
            "memory": 40960, "cc": "8.0", "arch": "ampere", "numa": -1, "serial": self.serial,
            "mig": int(self.mig), "power_limit": 400000, "max_sm_clock": 1410, "max_mem_clock": 1215,
            "pcie_gen": 4, "pcie_width": 16, "lost": int(self.lost),
        }  # fmt: skip
        out = [_line("gpu", gpu)]
        if not self.lost:
            out.append(_line("reading", {"index": self.index, **self.reading}))
        return out


MIG_UUIDS = ("MIG-11111111-2222-5333-8444-555555555555", "MIG-66666666-7777-5888-9999-aaaaaaaaaaaa")


def _state(gpus: list[Gpu]) -> str:
    head = _line(
        "simnvml", {"version": 1, "generation": 7, "driver": DRIVER, "cuda": 12040, "nvml": f"12.{DRIVER}"}
    )
    lines = [head]
    for g in gpus:
        lines += g.lines()
    for g in gpus:
        if g.mig:
            for j, uuid in enumerate(MIG_UUIDS):
                mig = {
                    "parent": g.index, "index": j, "uuid": uuid, "gi": j + 1, "ci": 0, "profile": "1g.5gb",
                    "memory": 4864, "cap_minor": 12 + 9 * j, "fb_used": 3, "fb_reserved": 0,
                }  # fmt: skip
                lines.append(_line("mig", mig))
    return "\n".join(lines) + "\n"


def _uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-5222-8333-444444444444"


def _bus(i: int) -> str:
    return f"00000000:{0x3B + i:02X}:00.0"


@dataclass
class Driver:
    smi: Path
    state: Path
    dev: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "SRO_SIMNVML_STATE": str(self.state),
            "SRO_SIMNVML_DEV_ROOT": str(self.dev),
            "TZ": "UTC",
        }
        return subprocess.run([str(self.smi), *args], capture_output=True, text=True, env=env, timeout=30)

    def write(self, gpus: list[Gpu], nodes: tuple[int, ...] | None = None) -> None:
        """The state of `gpus`, and a char node 195:minor for each of `nodes` (default: all)."""
        self.state.write_text(_state(gpus))
        for minor in nodes if nodes is not None else tuple(g.index for g in gpus):
            os.mknod(self.dev / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, minor))


def _can_mknod() -> bool:
    return os.geteuid() == 0


needs_nodes = pytest.mark.skipif(not _can_mknod(), reason="needs root to make char device nodes")


@pytest.fixture
def driver(simnvml_build: SimNvmlBuild, tmp_path: Path) -> Driver:  # noqa: F811
    if simnvml_build.smi is None:
        pytest.skip("native/simnvml/nvidia-smi.c is missing")
    dev = tmp_path / "dev"
    dev.mkdir()
    return Driver(simnvml_build.smi, tmp_path / "state", dev)


@needs_nodes
def test_list_shows_exactly_the_gpus_whose_node_exists_renumbered(driver: Driver) -> None:
    driver.write([Gpu(i, _uuid(i), _bus(i)) for i in range(3)], nodes=(0, 2))
    (driver.dev / "nvidia1").write_text("a regular file is no device node")
    res = driver.run("-L")
    assert res.returncode == 0, res.stdout
    assert res.stdout.splitlines() == [
        f"GPU 0: {A100} (UUID: {_uuid(0)})",
        f"GPU 1: {A100} (UUID: {_uuid(2)})",
    ]


@needs_nodes
def test_list_shows_mig_devices_as_nvidia_prints_them(driver: Driver) -> None:
    driver.write([Gpu(0, _uuid(0), _bus(0), mig=True)])
    res = driver.run("-L")
    assert res.returncode == 0, res.stdout
    assert res.stdout.splitlines() == [
        f"GPU 0: {A100} (UUID: {_uuid(0)})",
        f"  MIG 1g.5gb      Device  0: (UUID: {MIG_UUIDS[0]})",
        f"  MIG 1g.5gb      Device  1: (UUID: {MIG_UUIDS[1]})",
    ]


FIELDS = (
    "index,uuid,name,pci.bus_id,driver_version,memory.total,memory.used,memory.free,utilization.gpu,"
    "utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,clocks.max.sm,"
    "compute_cap,mig.mode.current,ecc.errors.uncorrected.volatile.total,serial,persistence_mode,pstate,count"
)


@needs_nodes
def test_query_gpu_values_are_the_states(driver: Driver) -> None:
    gpus = [Gpu(i, _uuid(i), _bus(i), serial=f"13200000000{i:02d}") for i in range(2)]
    gpus[1].reading |= {"util": 88, "fb_used": 30000, "temp": 71, "power": 301999, "ecc_dbe_vol": 0}
    driver.write(gpus)
    res = driver.run(f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits")
    assert res.returncode == 0, res.stdout
    rows = [line.split(", ") for line in res.stdout.splitlines()]
    assert len(rows) == 2
    for g, row in zip(gpus, rows, strict=True):
        r = g.reading
        free = 40960 - r["fb_used"] - r["fb_reserved"]
        assert row == [
            str(g.index), g.uuid, A100, g.bus, DRIVER, "40960", str(r["fb_used"]), str(free),
            str(r["util"]), str(r["memutil"]), str(r["temp"]), f"{r['power'] / 1000:.2f}", "400.00",
            str(r["sm_clock"]), str(r["mem_clock"]), "1410", "8.0", "Disabled", str(r["ecc_dbe_vol"]),
            g.serial, "Enabled", "P0", "2",
        ]  # fmt: skip


@needs_nodes
def test_query_gpu_header_and_units_are_nvidias(driver: Driver) -> None:
    driver.write([Gpu(0, _uuid(0), _bus(0))])
    res = driver.run(
        "--query-gpu=index,memory.total,utilization.gpu,power.draw,clocks.sm,temperature.gpu", "--format=csv"
    )
    assert res.returncode == 0, res.stdout
    assert res.stdout.splitlines() == [
        "index, memory.total [MiB], utilization.gpu [%], power.draw [W], clocks.current.sm [MHz], temperature.gpu",
        "0, 40960 MiB, 37 %, 123.45 W, 1200 MHz, 45",
    ]
    res = driver.run("--query-gpu=index,memory.total", "--format=csv,nounits")
    assert res.stdout.splitlines() == ["index, memory.total [MiB]", "0, 40960"]


@needs_nodes
def test_a_lost_gpu_answers_only_its_identity(driver: Driver) -> None:
    driver.write([Gpu(0, _uuid(0), _bus(0)), Gpu(1, _uuid(1), _bus(1), lost=True)])
    res = driver.run("-L")
    assert res.returncode == 0, res.stdout
    assert f"GPU 1: {A100} (UUID: {_uuid(1)})" in res.stdout.splitlines()
    res = driver.run(
        "--query-gpu=index,name,pci.bus_id,memory.total,temperature.gpu", "--format=csv,noheader"
    )
    assert res.returncode == 15, res.stdout  # NVIDIA's "GPU has fallen off the bus"
    assert res.stdout.splitlines() == [
        f"0, {A100}, {_bus(0)}, 40960 MiB, 45",
        f"1, {A100}, {_bus(1)}, [GPU is lost], [GPU is lost]",
    ]
    assert driver.run("-q", "-i", "1").returncode == 15
    table = driver.run()
    assert table.returncode == 15 and "ERR!" in table.stdout


def test_no_state_is_a_driver_that_cannot_be_reached(driver: Driver) -> None:
    for args in ((), ("-L",), ("--query-gpu=name", "--format=csv"), ("-q",), ("--version",)):
        res = driver.run(*args)
        assert res.returncode == 9, (args, res.stdout)
        assert "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver" in res.stdout


def test_a_corrupt_state_says_what_nvml_said(driver: Driver) -> None:
    driver.state.write_text("simnvml version=1\ngpu index=0\n")
    res = driver.run("-L")
    assert res.returncode == 9, res.stdout
    assert "Failed to initialize NVML: Unknown Error" in res.stdout


@needs_nodes
def test_no_visible_gpu_is_no_devices_found(driver: Driver) -> None:
    driver.write([Gpu(0, _uuid(0), _bus(0))], nodes=())
    res = driver.run("-L")
    assert (res.returncode, res.stdout) == (6, "No devices were found\n")


@needs_nodes
@pytest.mark.parametrize(
    "ident",
    ["1", _uuid(1), _bus(1), "3C:00.0", "0000:3c:00.0"],
    ids=["index", "uuid", "bus", "short", "lower"],
)
def test_i_selects_one_gpu_by_index_uuid_or_bus_id(driver: Driver, ident: str) -> None:
    driver.write([Gpu(i, _uuid(i), _bus(i)) for i in range(3)])
    res = driver.run("-i", ident, "--query-gpu=index,uuid", "--format=csv,noheader")
    assert (res.returncode, res.stdout) == (0, f"1, {_uuid(1)}\n")


@needs_nodes
def test_i_lists_and_unknown_ids(driver: Driver) -> None:
    driver.write([Gpu(i, _uuid(i), _bus(i)) for i in range(3)])
    res = driver.run("-L", f"--id=2,{_uuid(0)}")
    assert [line.split(":")[0] for line in res.stdout.splitlines()] == ["GPU 0", "GPU 2"]
    res = driver.run("-L", "-i", "7")
    assert (res.returncode, res.stdout) == (6, "No devices were found\n")


@needs_nodes
def test_every_report_says_simulated(driver: Driver) -> None:
    driver.write([Gpu(0, _uuid(0), _bus(0), mig=True), Gpu(1, _uuid(1), _bus(1))])
    for args in ((), ("-q",), ("--version",)):
        res = driver.run(*args)
        assert res.returncode == 0, (args, res.stdout)
        assert "SIMULATED by sro" in res.stdout, args
    assert "(simulated)" in driver.run("-L").stdout


@needs_nodes
def test_version_is_the_drivers(driver: Driver) -> None:
    driver.write([Gpu(0, _uuid(0), _bus(0))])
    lines = driver.run("--version").stdout.splitlines()
    assert lines[:4] == [
        f"NVIDIA-SMI version  : {DRIVER}",
        "NVML version        : 550.90",
        f"DRIVER version      : {DRIVER}",
        "CUDA Version        : 12.4",
    ]


@needs_nodes
def test_query_log_reports_each_gpu(driver: Driver) -> None:
    driver.write([Gpu(0, _uuid(0), _bus(0), mig=True), Gpu(1, _uuid(1), _bus(1))])
    out = driver.run("-q").stdout
    kv = re.findall(r"^( *)(\S.*?) +: (.*)$", out, re.MULTILINE)
    top = {key: value for indent, key, value in kv if not indent}
    assert top["Driver Version"] == DRIVER and top["CUDA Version"] == "12.4" and top["Attached GPUs"] == "2"
    assert out.count(f"Product Name                          : {A100}") == 2
    assert f"GPU {_bus(1)}\n" in out and f"    GPU UUID                              : {_uuid(1)}\n" in out
    assert "        Total                             : 40960 MiB\n" in out
    assert "        GPU Current Temp                  : 45 C\n" in out
    assert "        Power Draw                        : 123.45 W\n" in out
    assert out.count("            GPU Instance ID") == 2  # the MIG devices of GPU 0
    assert all(len(k) + len(i) <= 42 for i, k, _ in kv)  # NVIDIA's column of colons


@needs_nodes
def test_table_is_a_box_of_one_width(driver: Driver) -> None:
    driver.write([Gpu(0, _uuid(0), _bus(0), mig=True), Gpu(1, _uuid(1), _bus(1))])
    res = driver.run()
    assert res.returncode == 0, res.stdout
    box = [line for line in res.stdout.splitlines() if line[:1] in "+|"]
    assert {len(line) for line in box} == {91}, res.stdout
    assert f"Driver Version: {DRIVER}" in res.stdout and "CUDA Version: 12.4" in res.stdout
    assert re.search(
        r"^\|\s+1\s+NVIDIA A100-SXM4-40GB.*\|\s+00000000:3C:00.0 Off \|", res.stdout, re.MULTILINE
    )
    assert re.search(r"\|\s+1024MiB /\s+40960MiB \|\s+37%\s+Default \|", res.stdout)
    assert "| N/A   45C    P0            123W /  400W |" in res.stdout  # no fan: NVML's NOT_SUPPORTED
    assert "MIG devices:" in res.stdout and "No running processes found" in res.stdout


def test_bad_arguments_are_refused(driver: Driver) -> None:
    driver.state.write_text(_state([]))
    assert driver.run("--frobnicate").returncode == 2
    res = driver.run("--query-gpu=index,nonsense", "--format=csv")
    assert (res.returncode, res.stdout.splitlines()[0]) == (
        2,
        'Field "nonsense" is not a valid field to query.',
    )
    assert driver.run("--query-gpu=index").returncode == 2  # no --format
