"""`sro driver holders` over fake proc trees: maps and cgroup parsing, device and library matching,
vanished and unreadable processes, the termination message and its 4 KiB limit, the CLI's exit codes.

The fake fd links point at /dev/null (char 1:3), which the fake driver's devices.json claims as its
device: stat() through a link is then exactly what it is on a real /proc, without root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sro.api import holders as contract
from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.node import holderscan as holders
from sro.node.commands import driver

POD = "0c6e6d3e-9a4f-4f0e-8d55-2b1e3c4d5e6f"
NULL = os.stat("/dev/null").st_rdev


def _maps_line(path: str, dev: str = "fd:01", inode: int = 1234) -> str:
    return f"7f1c2a000000-7f1c2a021000 r-xp 00000000 {dev} {inode}                    {path}"


def test_parse_maps_keeps_file_mappings_only() -> None:
    text = "\n".join(
        [
            _maps_line("/usr/lib/x86_64-linux-gnu/libc.so.6", "08:02", 77),
            "7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]",
            "7ffd3000-7ffd4000 rw-p 00000000 00:00 0 ",
            _maps_line("/lib/libsimgpu.so.1 (deleted)", "103:5", 9),
            _maps_line("/tmp/a file with spaces.so"),
            "garbage",
        ]
    )
    maps = list(holders.parse_maps(text))
    assert [m.path for m in maps] == [
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/libsimgpu.so.1",
        "/tmp/a file with spaces.so",
    ]
    assert maps[0].dev == os.makedev(8, 2) and maps[0].inode == 77
    assert maps[1].dev == os.makedev(0x103, 5)


def test_library_matching_by_glob_and_by_inode() -> None:
    targets = holders.Targets(
        library_globs=SIMULATED_GPU.libraries["compute"] + SIMULATED_GPU.libraries["utility"],
        library_files={(os.makedev(8, 1), 42): "libsimgpu-ml.so.1"},
    )
    text = "\n".join(
        [
            _maps_line("/lib/libsimgpu.so.1 (deleted)"),  # replaced by an upgrade: still held
            _maps_line("/lib/libsimgpu.so.1"),  # the same library twice: listed once
            _maps_line("/renamed/by/someone.so", "08:01", 42),  # by inode
            _maps_line("/usr/lib/libc.so.6", "08:01", 43),
            _maps_line("/lib/libsimgpu.so"),  # the dev link name: not the recipe's glob
        ]
    )
    assert holders.mapped_libraries(text, targets) == ["libsimgpu.so.1", "libsimgpu-ml.so.1"]


def test_executable_name_and_pod_uid() -> None:
    assert holders.executable_name("/usr/bin/python3.11") == "python3.11"
    assert holders.executable_name("/opt/x/bench (deleted)", "bench") == "bench"
    assert holders.executable_name("", "kworker/0:1\n") == "[kworker/0:1]"
    cgroupfs = f"12:devices:/kubepods/besteffort/pod{POD}/0123abcd\n0::/\n"
    systemd = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}.slice/cri-containerd-ab.scope\n"
    static = "0::/kubepods/pod6b4f0a0c5f0e4d2a9c8b7a6f5e4d3c2b/ab12\n"
    assert holders.pod_uid(cgroupfs) == holders.pod_uid(systemd) == POD
    assert holders.pod_uid(static) == "6b4f0a0c5f0e4d2a9c8b7a6f5e4d3c2b"
    assert holders.pod_uid("0::/user.slice/session-1.scope\n") == ""


def test_simulated_devices_from_devices_json() -> None:
    doc = {
        "major": 120,
        "devices": [{"minor": 0, "deviceNode": "/dev/sro-simgpu0"}, {"minor": "x"}, "junk"],
        "controlNodes": [{"path": "/dev/sro-simgpuctl", "minor": 255}],
    }
    assert holders.simulated_devices(doc) == {(120, 0): "/dev/sro-simgpu0", (120, 255): "/dev/sro-simgpuctl"}
    assert holders.simulated_devices({"major": "120"}) == {} == holders.simulated_devices([])


class FakeProc:
    """A /proc of hand-made processes: fd links, maps, cmdline, exe, cgroup."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def process(
        self,
        pid: int,
        cmdline: str,
        fds: dict[int, str] | None = None,
        maps: str = "",
        cgroup: str = "0::/\n",
    ) -> Path:
        d = self.root / str(pid)
        (d / "fd").mkdir(parents=True)
        for fd, target in (fds or {}).items():
            (d / "fd" / str(fd)).symlink_to(target)
        (d / "maps").write_text(maps)
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
        (d / "comm").write_text(cmdline.split()[0][:15] + "\n")
        (d / "exe").symlink_to("/usr/bin/" + cmdline.split()[0])
        (d / "cgroup").write_text(cgroup)
        return d


@pytest.fixture
def node(tmp_path: Path) -> tuple[FakeProc, Path, Path]:
    """A fake proc tree, a simulated driver root claiming /dev/null as device 0, an empty dev root."""
    driver_root = tmp_path / "driver"
    (driver_root / "lib").mkdir(parents=True)
    (driver_root / "lib" / "libsimgpu.so.1").write_bytes(b"\x7fELF")
    doc = {
        "major": os.major(NULL),
        "devices": [{"minor": os.minor(NULL), "deviceNode": "/dev/sro-simgpu0"}],
        "controlNodes": [],
    }
    (driver_root / "devices.json").write_text(json.dumps(doc))
    (tmp_path / "dev").mkdir()
    return FakeProc(tmp_path / "proc"), driver_root, tmp_path / "dev"


def test_scan_finds_device_and_library_holders(node: tuple[FakeProc, Path, Path]) -> None:
    proc, driver_root, dev_root = node
    lib = driver_root / "lib" / "libsimgpu.so.1"
    st = lib.stat()
    by_inode = _maps_line("/elsewhere/x.so", f"{os.major(st.st_dev):x}:{os.minor(st.st_dev):x}", st.st_ino)
    proc.process(100, "python3 train.py --token=s3cret", {0: "/dev/zero", 3: "/dev/null", 4: "/dev/null"})
    proc.process(200, "simgpu-bench", maps=by_inode, cgroup=f"0::/kubepods/besteffort/pod{POD}/c1\n")
    proc.process(300, "bash", {0: "/dev/zero", 1: "/nonexistent"}, maps=_maps_line("/usr/lib/libc.so.6"))
    proc.process(400, "both", {7: "/dev/null"}, maps=_maps_line("/lib/libsimgpu-ml.so.1 (deleted)"))
    proc.process(500, "me", {3: "/dev/null"})
    (proc.root / "self").symlink_to("500")
    (proc.root / "600").mkdir()  # exited between listdir and reading: no fd, no maps
    targets = holders.targets_for(SIMULATED_GPU, str(driver_root), str(dev_root))
    assert targets.found_on_node
    scan = holders.scan(str(proc.root), targets, skip={500})
    assert scan.unreadable == ()
    assert scan.holders == (
        contract.Holder(100, "python3", ("/dev/sro-simgpu0",)),
        contract.Holder(200, "simgpu-bench", ("libsimgpu.so.1",), POD),
        contract.Holder(400, "both", ("/dev/sro-simgpu0", "libsimgpu-ml.so.1")),
    )


def test_unreadable_processes_are_counted_not_fatal(node: tuple[FakeProc, Path, Path]) -> None:
    proc, driver_root, dev_root = node
    d = proc.process(100, "locked")
    (d / "fd").rmdir()
    (d / "fd").write_text("")  # listing it fails with something else than "gone"
    proc.process(200, "free")
    targets = holders.targets_for(SIMULATED_GPU, str(driver_root), str(dev_root))
    scan = holders.scan(str(proc.root), targets)
    assert scan.holders == () and scan.unreadable == (100,)
    assert contract.Summary(scan.holders, unreadable=scan.unreadable).exit_code == contract.EXIT_INCONCLUSIVE


def test_nvidia_counts_every_minor_of_its_majors(tmp_path: Path) -> None:
    """Real hardware: any node of the majors of /dev/nvidia* (here /dev/null stands for one)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").symlink_to("/dev/null")  # find_* follow links; _family_nodes does not
    targets = holders.targets_for(NVIDIA_GPU, str(tmp_path / "root"), str(dev), str(tmp_path / "proc"))
    assert targets.majors == {os.major(NULL): "/dev/nvidiactl", 195: "nvidia"}  # and NVIDIA's own major
    assert targets.devices == {(os.major(NULL), os.minor(NULL)): "/dev/nvidiactl"}
    assert targets.device(os.makedev(os.major(NULL), 200)) == f"char {os.major(NULL)}:200 (/dev/nvidiactl)"
    assert "libcuda.so.*" in targets.library_globs


def test_message_is_compact_and_bounded() -> None:
    many = [
        contract.Holder(1000 + i, "python3 " + "x" * 500, ("/dev/sro-simgpu0", "libsimgpu.so.1"))
        for i in range(40)
    ]
    text = contract.to_message(many, unreadable=[1])
    assert "\n" not in text and len(text.encode()) <= contract.MAX_MESSAGE
    back = contract.from_message(text)
    assert back.more == 40 - len(back.holders) > 0 and back.unreadable == (1,)
    assert back.holders[0].pid == 1000 and back.holders[0].holds == ("/dev/sro-simgpu0", "libsimgpu.so.1")
    assert len(back.holders[0].executable) == contract.MAX_EXECUTABLE and back.exit_code == contract.EXIT_HELD
    one = contract.to_message([contract.Holder(7, "sh", ("/dev/x",), POD)])
    assert json.loads(one) == {"holders": [{"pid": 7, "exe": "sh", "holds": "/dev/x", "podUID": POD}]}
    # an older scan's command line is not carried on into status and events
    old = '{"holders":[{"pid":7,"command":"psql --password=s3cret","holds":"/dev/x"}]}'
    assert contract.from_message(old).holders == (contract.Holder(7, "", ("/dev/x",)),)
    assert contract.from_message(contract.to_message([])).exit_code == contract.EXIT_FREE
    with pytest.raises(ValueError, match="not a holder summary"):
        contract.from_message("PASS: driver")


def _holders(proc: FakeProc, driver_root: Path, dev_root: Path, *extra: str) -> list[str]:
    return ["holders", "--recipe", "simulated-gpu", "--proc-root", str(proc.root),
            "--driver-root", str(driver_root), "--dev-root", str(dev_root), *extra]  # fmt: skip


def test_cli_exit_codes_table_json_and_termination_log(
    node: tuple[FakeProc, Path, Path], tmp_path: Path
) -> None:
    proc, driver_root, dev_root = node
    proc.process(200, "sleep 1000")
    runner = CliRunner()
    log = tmp_path / "termination-log"
    r = runner.invoke(driver, _holders(proc, driver_root, dev_root, "--termination-log", str(log)))
    assert r.exit_code == contract.EXIT_FREE, r.output
    assert "nothing holds the simulated-gpu driver" in r.output
    assert json.loads(log.read_text()) == {"holders": []}

    proc.process(
        100, "python3 train.py --password s3cret", {3: "/dev/null"}, cgroup=f"0::/kubepods/pod{POD}/c\n"
    )
    r = runner.invoke(driver, _holders(proc, driver_root, dev_root, "--termination-log", str(log)))
    assert r.exit_code == contract.EXIT_HELD, r.output
    head, row = r.output.splitlines()
    assert head.split() == ["PID", "POD", "HOLDS", "EXECUTABLE"]
    assert row.split() == ["100", POD, "/dev/sro-simgpu0", "python3"]
    assert log.read_text().count("\n") == 1 and "s3cret" not in log.read_text()
    assert contract.from_message(log.read_text()).holders == (
        contract.Holder(100, "python3", ("/dev/sro-simgpu0",), POD),
    )

    r = runner.invoke(driver, [*_holders(proc, driver_root, dev_root), "--json"])
    assert r.exit_code == contract.EXIT_HELD
    assert json.loads(r.output) == {
        "recipe": "simulated-gpu",
        "holders": [
            {
                "pid": 100,
                "exe": "python3",
                "holds": ["/dev/sro-simgpu0"],
                "podUID": POD,
            }
        ],
        "unreadable": [],
    }


def test_cli_bad_input_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    for option in ("--proc-root", "--driver-root", "--dev-root"):
        r = runner.invoke(driver, ["holders", "--recipe", "simulated-gpu", option, str(tmp_path / "none")])
        assert r.exit_code == 2 and option in r.output and str(tmp_path / "none") in r.output, r.output
    (tmp_path / "file").write_text("")
    log = tmp_path / "file" / "log"
    args = ["--proc-root", str(tmp_path), "--driver-root", str(tmp_path), "--dev-root", str(tmp_path)]
    r = runner.invoke(driver, ["holders", "--recipe", "simulated-gpu", *args, "--termination-log", str(log)])
    assert r.exit_code == contract.EXIT_ERROR and f"--termination-log {log}" in r.output
    assert "Traceback" not in r.output
    r = runner.invoke(driver, ["holders", "--recipe", "fpga"])
    assert r.exit_code == 2 and "--recipe" in r.output
    r = runner.invoke(driver, ["holders", "--help"])
    assert r.exit_code == 0 and "3  something holds it" in r.output and "4  nothing found" in r.output
