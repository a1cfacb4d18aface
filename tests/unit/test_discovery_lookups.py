"""A discovery pass looks up only what can be there (issue 26: a pass <= 2x its read floor).

Each rule that saves a lookup is checked twice: the lookup is not made where the kernel says the
file cannot exist, and it is still made (and the feature still found) where it can — or where the
listing that would say so is absent, as in an old kernel or a fake tree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sro.host.reading import HostReader, PassCache, Recording
from sro.host.root import HostRoot
from sro.node.discovery import accelerators, cpu, network, pci
from sro.node.discovery.config import Config
from sro.node.discovery.features import Features, SourceResult
from sro.node.discovery.labeling import build_labels
from sro.node.discovery.remembered import Remembered, forget
from sro.node.discovery.sources import SOURCES

from .test_discovery_sources import NFD, pci_dev, write


@pytest.fixture
def looked_up(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every path opened or stat-ed while the test runs."""
    paths: list[str] = []
    real_open, real_stat = os.open, os.stat

    def spy_open(path: Any, *args: Any, **kwargs: Any) -> int:
        paths.append(str(path))
        return real_open(path, *args, **kwargs)

    def spy_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        paths.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "stat", spy_stat)
    yield paths


def _pci(root: Path) -> list[dict[str, str]]:
    reader = HostReader(HostRoot.at(root))
    features = pci.SOURCE.discover(reader, Config())
    assert reader.problems == []
    return [dict(d) for d in features.instances["device"]]


def test_pci_sriov_numvfs_is_looked_up_only_beside_sriov_totalvfs(
    tmp_path: Path, looked_up: list[str]
) -> None:
    pci_dev(tmp_path, "0000:07:00.0", sriov_totalvfs="8", sriov_numvfs="2")
    pci_dev(tmp_path, "0000:08:00.0")
    devices = _pci(tmp_path)
    assert [(d["address"], d.get("sriov_totalvfs"), d.get("sriov_numvfs")) for d in devices] == [
        ("0000:07:00.0", "8", "2"),
        ("0000:08:00.0", None, None),
    ]
    assert any(p.endswith("0000:07:00.0/sriov_numvfs") for p in looked_up)
    assert not any(p.endswith("0000:08:00.0/sriov_numvfs") for p in looked_up)


def test_pci_iommu_type_is_looked_up_only_when_the_kernel_lists_a_group(
    tmp_path: Path, looked_up: list[str]
) -> None:
    pci_dev(tmp_path, "0000:07:00.0", **{"iommu_group/type": "DMA"})
    # no /sys/kernel/iommu_groups (an old kernel, a fake tree): every device is looked at
    assert _pci(tmp_path)[0]["iommu_group/type"] == "dma"
    groups = tmp_path / "sys/kernel/iommu_groups"
    groups.mkdir(parents=True)
    looked_up.clear()
    assert "iommu_group/type" not in _pci(tmp_path)[0]  # no group on the node: no device has one
    assert not any(p.endswith("iommu_group/type") for p in looked_up)
    (groups / "0").mkdir()
    assert _pci(tmp_path)[0]["iommu_group/type"] == "dma"


def test_network_skips_the_interfaces_the_kernel_lists_as_virtual(
    tmp_path: Path, looked_up: list[str]
) -> None:
    write(tmp_path, "sys/class/net/ens1/device/sriov_totalvfs", "8\n")
    write(tmp_path, "sys/class/net/ens1/device/sriov_numvfs", "4\n")
    write(tmp_path, "sys/class/net/ens2/device/vendor", "0x8086\n")  # physical, no SR-IOV
    for name in ("lo", "veth0"):
        (tmp_path / "sys/class/net" / name).mkdir(parents=True)
        (tmp_path / "sys/devices/virtual/net" / name).mkdir(parents=True)
    reader = HostReader(HostRoot.at(tmp_path))
    features = network.SOURCE.discover(reader, Config())
    assert [dict(d) for d in features.instances["device"]] == [
        {"name": "ens1", "sriov_totalvfs": "8", "sriov_numvfs": "4"},
        {"name": "ens2"},
    ]
    assert network.SOURCE.labels(features, Config()) == {
        NFD + "network-sriov.capable": "true",
        NFD + "network-sriov.configured": "true",
    }
    assert not any("/lo/" in p or "/veth0/" in p for p in looked_up)
    assert not any(p.endswith("ens2/device/sriov_numvfs") for p in looked_up)


def test_network_without_the_virtual_listing_looks_at_each_interface(tmp_path: Path) -> None:
    write(tmp_path, "sys/class/net/ens1/device/sriov_totalvfs", "8\n")
    (tmp_path / "sys/class/net/lo").mkdir(parents=True)
    reader = HostReader(HostRoot.at(tmp_path))
    features = network.SOURCE.discover(reader, Config())
    assert [d["name"] for d in features.instances["device"]] == ["ens1"]


def test_cpu_reads_kvm_amd_parameters_only_where_the_module_is(tmp_path: Path, looked_up: list[str]) -> None:
    write(tmp_path, "proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sev\n\n")
    reader = HostReader(HostRoot.at(tmp_path))
    assert "security" not in cpu.SOURCE.labels(cpu.SOURCE.discover(reader, Config()), Config())
    module = str(tmp_path / "sys/module/kvm_amd")
    assert [p for p in looked_up if p.startswith(module)] == [f"{module}/parameters"]
    write(tmp_path, "sys/module/kvm_amd/parameters/sev", "Y\n")
    write(tmp_path, "sys/module/kvm_amd/parameters/sev_snp", "1\n")
    labels = cpu.SOURCE.labels(cpu.SOURCE.discover(HostReader(HostRoot.at(tmp_path)), Config()), Config())
    assert labels[NFD + "cpu-security.sev.enabled"] == "true"
    assert labels[NFD + "cpu-security.sev.snp.enabled"] == "true"
    assert NFD + "cpu-security.sev.es.enabled" not in labels


def test_an_empty_driver_root_is_not_searched_for_nvml(tmp_path: Path, looked_up: list[str]) -> None:
    root = tmp_path / "run/nvidia/driver"
    root.mkdir(parents=True)
    assert accelerators.nvml_driver_root(HostReader(HostRoot.at(tmp_path))) is None
    assert not any(p.startswith(f"{root}/") for p in looked_up)
    write(tmp_path, "run/nvidia/driver/usr/lib64/libnvidia-ml.so.1", "")
    assert accelerators.nvml_driver_root(HostReader(HostRoot.at(tmp_path))) == root


def test_a_file_two_sources_read_is_read_once_per_pass(tmp_path: Path, looked_up: list[str]) -> None:
    host = HostRoot.at(tmp_path)
    name = write(tmp_path, "sys/class/dmi/id/product_name", "DGX A100\n")
    cache = PassCache()
    first, second = HostReader(host, cache=cache), HostReader(host, cache=cache)
    assert first.read_shared(name) == second.read_shared(str(name)) == "DGX A100"
    assert looked_up.count(str(name)) == 1
    assert HostReader(host).read_shared(name) == "DGX A100"  # another pass reads it again
    assert looked_up.count(str(name)) == 2
    gone = tmp_path / "sys/class/dmi/id/sys_vendor"
    assert first.read_shared(gone) is None and second.read_shared(gone) is None
    assert looked_up.count(str(gone)) == 1 and first.problems == second.problems == []


def test_a_failed_shared_read_is_reported_to_each_source(tmp_path: Path) -> None:
    odd = tmp_path / "product_name"
    odd.mkdir()
    cache = PassCache()
    readers = [HostReader(HostRoot.at(tmp_path), cache=cache) for _ in range(2)]
    assert [r.read_shared(odd) for r in readers] == [None, None]
    assert [[p.message for p in r.problems] for r in readers] == [["is a directory, expected a file"]] * 2


def test_listing_without_a_recording_gives_the_same_names_and_a_recording_keeps_kinds(tmp_path: Path) -> None:
    (tmp_path / "devices/0000:07:00.0").mkdir(parents=True)
    (tmp_path / "bus").mkdir()
    (tmp_path / "bus/0000:07:00.0").symlink_to(tmp_path / "devices/0000:07:00.0")
    (tmp_path / "bus/attr").write_text("x")
    recording = Recording()
    plain = HostReader(HostRoot.at(tmp_path)).list_dir(tmp_path / "bus")
    recorded = HostReader(HostRoot.at(tmp_path), recording=recording).list_dir(tmp_path / "bus")
    assert plain == recorded == ["0000:07:00.0", "attr"]
    assert recording.dirs[tmp_path / "bus"] == [("0000:07:00.0", True), ("attr", False)]


def test_entries_tells_a_missing_directory_from_an_empty_one(tmp_path: Path) -> None:
    reader = HostReader(HostRoot.at(tmp_path))
    (tmp_path / "empty").mkdir()
    assert reader.entries(tmp_path / "gone") is None
    assert reader.entries(tmp_path / "empty") == []
    assert reader.list_dir(tmp_path / "gone") == []
    assert reader.problems == []
    assert reader.list_dir(tmp_path / "gone", required=True) == []
    assert [p.message for p in reader.problems] == ["missing directory"]


def test_remembered_parses_again_only_when_the_content_changes() -> None:
    calls: list[tuple[str, str]] = []

    def parse(path: str, text: str) -> frozenset[str]:
        calls.append((path, text))
        if text == "bad":
            raise ValueError(path)
        return frozenset(text.split())

    remembered = Remembered(parse, size=2)
    first = remembered("a", "x y")
    assert remembered("a", "".join(["x", " ", "y"])) is first  # an equal, fresh string: no parse
    assert remembered("b", "x y") == first and len(calls) == 2  # per path
    assert remembered("a", "x z") == {"x", "z"} and len(calls) == 3
    for _ in range(2):
        with pytest.raises(ValueError):
            remembered("a", "bad")  # a failed parse is not remembered: parsed (and raised) again
    assert len(calls) == 5
    remembered("c", "q")  # a third path: over size, the memory starts over
    assert remembered("b", "x y") == first and len(calls) == 7


def _cpu_result(*flags: str) -> SourceResult:
    return SourceResult("cpu", Features(flags={"cpuid": frozenset(flags)}))


def test_remembered_labels_follow_the_features_and_the_config() -> None:
    first = build_labels([_cpu_result("AVX2", "AVX512F")], Config(), SOURCES)
    assert {k for k in first.labels if "cpuid" in k} == {NFD + "cpu-cpuid.AVX2", NFD + "cpu-cpuid.AVX512F"}
    again = build_labels([_cpu_result("AVX2", "AVX512F")], Config(), SOURCES)  # equal, fresh objects
    assert again.labels == first.labels
    fewer = build_labels([_cpu_result("AVX2")], Config(), SOURCES)
    assert {k for k in fewer.labels if "cpuid" in k} == {NFD + "cpu-cpuid.AVX2"}
    narrowed = build_labels([_cpu_result("AVX2")], Config(cpuid_whitelist=("AVX512F",)), SOURCES)
    assert not any("cpuid" in k for k in narrowed.labels)
    whitelisted = build_labels([_cpu_result("AVX2")], Config(label_whitelist=re.compile("^nothing")), SOURCES)
    assert whitelisted.labels == {}


def test_a_dropped_label_is_reported_on_every_pass_not_only_the_first() -> None:
    bad = SourceResult("local", Features(attributes={"label": {NFD + "ok": "true", NFD + "bad": "x" * 70}}))
    for _ in range(2):
        labeling = build_labels([bad], Config(), SOURCES)
        assert labeling.labels == {NFD + "ok": "true"}
        assert [w.path for w in labeling.warnings] == [f"label {NFD}bad"]


def test_forget_makes_the_next_pass_a_first_one() -> None:
    calls: list[str] = []

    def parse(path: str, text: str) -> int:
        calls.append(text)
        return len(text)

    remembered = Remembered(parse)
    assert remembered("p", "abc") == remembered("p", "abc") == 3 and calls == ["abc"]
    forget()
    assert remembered("p", "abc") == 3 and calls == ["abc", "abc"]


def test_a_recording_names_every_absent_path_the_pass_looked_up(tmp_path: Path) -> None:
    recording = Recording()
    reader = HostReader(HostRoot.at(tmp_path), recording=recording)
    write(tmp_path, "present", "x")
    reader.read_value(tmp_path / "present")
    reader.read_value(tmp_path / "gone")
    reader.list_dir(tmp_path / "no-dir")
    reader.exists(tmp_path / "no-link")
    reader.is_char_device(tmp_path / "no-node")
    assert recording.absent == {tmp_path / n for n in ("gone", "no-dir", "no-link", "no-node")}
    assert set(recording.files) == {tmp_path / "present"}
