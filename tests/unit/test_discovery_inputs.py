"""Discovery scans again within about a second when a node file its last pass read changes (outside
/sys and /proc), instead of at the next `core.sleepInterval`: a driver installed or removed, a
device node made, a feature file dropped in features.d."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sro.host.root import HostRoot
from sro.node.discovery.config import Config
from sro.node.discovery.inputs import InputWatch, watched
from sro.node.discovery.sources import scan
from tests.unit.test_discovery_health import _kernel, _set_kernel, running, wait_for
from tests.unit.test_discovery_nodefeature import GPU, FakeNodeFeatures, _host

pytestmark = pytest.mark.timeout(30)


class CountingNodeFeatures(FakeNodeFeatures):
    """Counts the passes: each reads the NodeFeature before writing it (or not, when unchanged)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return super().get(namespace, name)


def test_watched_leaves_out_sys_and_proc_and_names_each_path_once() -> None:
    host = HostRoot.at("/host")
    visited = {
        "/host/sys/bus/pci/devices",
        "/host/sys",
        Path("/host/proc/cpuinfo"),
        "/host/etc/os-release",
        Path("/host/etc/os-release"),
        "/host/dev/nvidiactl",
        "/host/system-release",  # under no tree of the host, still a path the pass read
    }
    assert watched(host, visited) == ("/host/dev/nvidiactl", "/host/etc/os-release", "/host/system-release")


def test_a_pass_over_a_gpu_node_depends_on_few_files_outside_sys_and_proc() -> None:
    host = HostRoot.at(GPU)
    visited: set[Path | str] = set()
    scan(host, Config(), visited=visited)
    paths = watched(host, visited)
    assert len(visited) > 100 > len(paths)  # a pass reads hundreds of sysfs files
    assert f"{GPU}/etc/os-release" in paths
    assert f"{GPU}/var/lib/sro/driver/simulated-gpu/devices.json" in paths  # the driver's device list
    assert f"{GPU}/etc/kubernetes/node-feature-discovery/features.d" in paths
    assert not any(p.startswith((f"{GPU}/sys/", f"{GPU}/proc/")) for p in paths)


def test_the_watch_sees_a_file_changed_made_or_removed_and_a_folder_listed_gaining_one(
    tmp_path: Path,
) -> None:
    host = HostRoot.at(tmp_path)
    release, driver, folder = tmp_path / "etc/os-release", tmp_path / "dev/gpu0", tmp_path / "features.d"
    release.parent.mkdir()
    release.write_text("ID=debian\n")
    folder.mkdir()
    (tmp_path / "proc").mkdir()
    watch = InputWatch(host)
    watch.before_pass()
    watch.after_pass({str(release), driver, str(folder), f"{tmp_path}/proc/cpuinfo"})
    assert watch.paths == tuple(sorted((str(release), str(driver), str(folder))))
    assert watch.changed() == []
    release.write_text("ID=ubuntu\n")
    assert watch.changed() == [str(release)]
    driver.parent.mkdir()
    driver.write_text("")
    (folder / "gpu.features").write_text("gpu=1\n")
    assert sorted(watch.changed()) == sorted((str(release), str(driver), str(folder)))
    watch.before_pass()
    watch.after_pass(watch.paths)  # a pass that read them as they are now
    assert watch.changed() == []
    driver.unlink()
    assert watch.changed() == [str(driver)]
    (tmp_path / "proc/cpuinfo").write_text("changed")  # not watched: /proc files keep their stat
    assert str(tmp_path / "proc/cpuinfo") not in watch.changed()


def test_a_file_changed_while_a_pass_reads_it_makes_another_pass(tmp_path: Path) -> None:
    """The signature is the one from before the pass: what the pass may have read old is not
    taken as seen."""
    path = tmp_path / "devices.json"
    path.write_text("{}")
    watch = InputWatch(HostRoot.at(tmp_path))
    watch.before_pass()
    watch.after_pass({path})
    watch.before_pass()
    path.write_text('{"devices": []}')  # during the pass
    watch.after_pass({path})
    assert watch.changed() == [str(path)]


def test_the_daemon_scans_again_within_two_seconds_of_a_file_its_pass_read_changing(tmp_path: Path) -> None:
    host = _host(tmp_path)
    _set_kernel(host, "6.1.0")
    api = CountingNodeFeatures()
    with running(host, api):
        assert _kernel(api) == "6.1.0"
        passes = api.reads
        _set_kernel(host, "6.8.0")  # under /proc: not watched, waits for the timed pass
        time.sleep(1.5)
        assert _kernel(api) == "6.1.0" and api.reads == passes
        (tmp_path / "etc/os-release").write_text("ID=ubuntu\nVERSION_ID=24.04\n")
        wait_for(lambda: _kernel(api) == "6.8.0")  # scanned again, /proc read anew with the rest
        doc = api.objects[("sro-system", "n1")]
        assert doc["spec"]["features"]["attributes"]["system.osrelease"]["elements"]["ID"] == "ubuntu"
        passes = api.reads
        time.sleep(1.5)
        assert api.reads == passes  # nothing changed since: no pass after it
