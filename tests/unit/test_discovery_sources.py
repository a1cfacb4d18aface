"""Feature sources on small real trees, above all the odd ones: every failure names its path."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sro.host.reading import HostReader
from sro.host.root import HostRoot
from sro.node.discovery import cpu, kernel, local, memory, network, pci, storage, system, usb
from sro.node.discovery.commands import discover
from sro.node.discovery.config import Config, parse_config
from sro.node.discovery.sources import SOURCE_NAMES, SOURCES, scan

NFD = "feature.node.kubernetes.io/"


def write(root: Path, rel: str, content: str | bytes) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(content.encode() if isinstance(content, str) else content)
    return p


def pci_dev(root: Path, addr: str, cls: str = "0x030200", vendor: str = "0x10de", **extra: str) -> None:
    base = f"sys/bus/pci/devices/{addr}"
    for name, value in {"class": cls, "vendor": vendor, "device": "0x20b0", "subsystem_vendor": "0x10de",
                        "subsystem_device": "0x134f", **extra}.items():  # fmt: skip
        write(root, f"{base}/{name}", value + "\n")


def run(source: object, root: Path, config: Config | None = None) -> tuple[dict[str, str], HostReader]:
    reader = HostReader(HostRoot.at(root))
    features = source.discover(reader, config or Config())  # type: ignore[attr-defined]
    return source.labels(features, config or Config()), reader  # type: ignore[attr-defined]


def test_one_explicit_ordered_tuple_of_sources() -> None:
    assert SOURCE_NAMES == ("cpu", "kernel", "memory", "network", "pci", "storage", "system", "usb",
                            "accelerators", "custom", "local")  # fmt: skip
    assert len(set(SOURCE_NAMES)) == len(SOURCES)


def test_pci_labels_and_nfd_normalisation(tmp_path: Path) -> None:
    pci_dev(tmp_path, "0000:07:00.0", sriov_totalvfs="0x10")
    pci_dev(tmp_path, "0000:00:00.0", cls="0x060000", vendor="0x8086")
    labels, reader = run(pci.SOURCE, tmp_path)
    assert labels == {NFD + "pci-0302_10de.present": "true", NFD + "pci-0302_10de.sriov.capable": "true"}
    assert reader.problems == []
    fields = Config(pci_label_fields=("vendor", "device"), pci_class_whitelist=("06",))
    labels, _ = run(pci.SOURCE, tmp_path, fields)
    assert labels == {NFD + "pci-8086_20b0.present": "true"}


@pytest.mark.parametrize(
    ("attr", "content", "message"),
    [
        ("class", "garbage\n", "expected 6 hex digits"),
        ("vendor", "0x10de10de\n", "expected 4 hex digits"),
        ("vendor", b"\xff\xfe\n", "not UTF-8"),
        ("device", None, "missing"),
        ("subsystem_vendor", "dir", "is a directory"),
    ],
)
def test_pci_odd_entry_skips_that_device_only(
    tmp_path: Path, attr: str, content: str | bytes | None, message: str
) -> None:
    pci_dev(tmp_path, "0000:01:00.0")
    pci_dev(tmp_path, "0000:02:00.0", cls="0x120000", vendor="0x8086")
    bad = tmp_path / "sys/bus/pci/devices/0000:02:00.0" / attr
    bad.unlink()
    if content == "dir":
        bad.mkdir()
    elif content is not None:
        bad.write_bytes(content.encode() if isinstance(content, str) else content)
    labels, reader = run(pci.SOURCE, tmp_path)
    assert labels == {NFD + "pci-0302_10de.present": "true"}  # the good device still counts
    assert len(reader.problems) == 1
    assert reader.problems[0].path == str(bad)
    assert message in reader.problems[0].message


def test_usb_class_per_interface_and_whitelist(tmp_path: Path) -> None:
    base = "sys/bus/usb/devices"
    for rel, value in {"1-1/bDeviceClass": "00", "1-1/idVendor": "0403", "1-1/idProduct": "6010",
                       "1-1/1-1:1.0/bInterfaceClass": "ff", "1-1/1-1:1.1/bInterfaceClass": "03",
                       "usb1/bDeviceClass": "09", "usb1/idVendor": "1d6b", "usb1/idProduct": "0002",
                       "2-1/bDeviceClass": "zz", "2-1/idVendor": "1234", "2-1/idProduct": "5678"}.items():  # fmt: skip
        write(tmp_path, f"{base}/{rel}", value + "\n")
    labels, reader = run(usb.SOURCE, tmp_path)
    assert labels == {NFD + "usb-ff_0403_6010.present": "true"}
    assert [p.path for p in reader.problems] == [str(tmp_path / base / "2-1/bDeviceClass")]


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 avx512f avx512_vnni pni hypervisor sgx sgx_lc adx bogus_flag

processor\t: 1
vendor_id\t: GenuineIntel
"""


def test_cpu_flags_map_to_nfd_names_with_default_blacklist(tmp_path: Path) -> None:
    write(tmp_path, "proc/cpuinfo", CPUINFO)
    write(tmp_path, "sys/bus/cpu/devices/cpu0/topology/thread_siblings_list", "0-1\n")
    labels, reader = run(cpu.SOURCE, tmp_path)
    cpuid = {k.removeprefix(NFD + "cpu-cpuid.") for k in labels if "cpuid" in k}
    assert cpuid == {
        "AVX",
        "AVX2",
        "AVX512F",
        "AVX512VNNI",
        "HYPERVISOR",
        "X87",
    }  # SSE*, SGX*, ADX blacklisted
    assert labels[NFD + "cpu-model.vendor_id"] == "Intel"
    assert labels[NFD + "cpu-model.family"] == "6" and labels[NFD + "cpu-model.id"] == "85"
    assert labels[NFD + "cpu-hardware_multithreading"] == "true"
    assert labels[NFD + "cpu-security.sgx.enabled"] == "true"
    assert reader.problems == []
    whitelisted, _ = run(cpu.SOURCE, tmp_path, Config(cpuid_whitelist=("SSE42", "AVX")))
    assert {k for k in whitelisted if "cpuid" in k} == {NFD + "cpu-cpuid.SSE42", NFD + "cpu-cpuid.AVX"}


def test_cpu_garbage_cpuinfo_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    write(tmp_path, "proc/cpuinfo", "\x00\x01 garbage without colons\n")
    labels, reader = run(cpu.SOURCE, tmp_path)
    assert not any("cpuid" in k for k in labels)
    assert reader.problems and reader.problems[0].path == str(tmp_path / "proc/cpuinfo")
    write(tmp_path, "sys/devices/system/cpu/cpuidle/current_driver", "intel_idle\n")
    write(tmp_path, "sys/module/intel_idle/parameters/max_cstate", "lots\n")
    _, reader = run(cpu.SOURCE, tmp_path)
    assert any(p.path.endswith("max_cstate") for p in reader.problems)


def test_kernel_version_config_and_modules(tmp_path: Path) -> None:
    rel = "6.1.0-18-amd64"
    write(tmp_path, "proc/sys/kernel/osrelease", rel + "\n")
    write(tmp_path, f"boot/config-{rel}", "CONFIG_NO_HZ=y\n# CONFIG_PREEMPT is not set\nCONFIG_NO_HZ_IDLE=m\n"
                                          'CONFIG_LOCALVERSION="-x"\n')  # fmt: skip
    write(tmp_path, "proc/modules", "nvidia 123 0 - Live 0x0\n")
    write(tmp_path, f"lib/modules/{rel}/modules.builtin", "kernel/drivers/nvme/host/nvme.ko\n")
    reader = HostReader(HostRoot.at(tmp_path))
    features = kernel.SOURCE.discover(
        reader, Config(kernel_config_opts=("NO_HZ", "NO_HZ_IDLE", "PREEMPT", "LOCALVERSION"))
    )
    labels = kernel.SOURCE.labels(
        features, Config(kernel_config_opts=("NO_HZ", "NO_HZ_IDLE", "PREEMPT", "LOCALVERSION"))
    )
    assert labels == {
        NFD + "kernel-version.full": rel, NFD + "kernel-version.major": "6", NFD + "kernel-version.minor": "1",
        NFD + "kernel-version.revision": "0", NFD + "kernel-config.NO_HZ": "true",
        NFD + "kernel-config.NO_HZ_IDLE": "true", NFD + "kernel-config.LOCALVERSION": "-x",
    }  # fmt: skip
    assert features.flags["loadedmodule"] == {"nvidia"}
    assert features.flags["enabledmodule"] == {"nvidia", "nvme"}


def test_kernel_config_gz_first_and_bad_gzip_named(tmp_path: Path) -> None:
    write(tmp_path, "proc/sys/kernel/osrelease", "5.4.0\n")
    write(tmp_path, "proc/config.gz", gzip.compress(b"CONFIG_PREEMPT=y\n"))
    write(tmp_path, "boot/config-5.4.0", "CONFIG_NO_HZ=y\n")
    labels, _ = run(kernel.SOURCE, tmp_path)
    assert labels.get(NFD + "kernel-config.PREEMPT") == "true" and NFD + "kernel-config.NO_HZ" not in labels
    write(tmp_path, "proc/config.gz", b"not gzip at all")
    labels, reader = run(kernel.SOURCE, tmp_path)
    assert labels.get(NFD + "kernel-config.NO_HZ") == "true"  # falls through to /boot
    assert reader.problems[0].path == str(tmp_path / "proc/config.gz")
    assert kernel.parse_version("5.10") == {"full": "5.10", "major": "5", "minor": "10"}
    assert kernel.parse_version("6.8.0+rt") == {"full": "6.8.0_rt"}  # NFD's regexp does not match: full only


def test_memory_storage_network_system(tmp_path: Path) -> None:
    for n in ("node0", "node1", "possible"):
        (tmp_path / "sys/devices/system/node" / n).mkdir(parents=True)
    write(tmp_path, "sys/bus/nd/devices/dax0.0/devtype", "nd_dax\n")
    write(tmp_path, "proc/swaps", "Filename Type Size Used Priority\n/swap file 1 0 -2\n")
    labels, _ = run(memory.SOURCE, tmp_path)
    assert labels == {NFD + "memory-numa": "true", NFD + "memory-nv.present": "true",
                      NFD + "memory-nv.dax": "true", NFD + "memory-swap.enabled": "true"}  # fmt: skip
    write(tmp_path, "sys/block/sda/queue/rotational", "1\n")
    write(tmp_path, "sys/block/nvme0n1/queue/rotational", "0\n")
    write(tmp_path, "sys/block/odd/queue/rotational", "maybe\n")
    labels, reader = run(storage.SOURCE, tmp_path)
    assert labels == {NFD + "storage-nonrotationaldisk": "true"}
    assert [p.path for p in reader.problems] == [str(tmp_path / "sys/block/odd/queue/rotational")]
    write(tmp_path, "sys/class/net/ens1/device/sriov_totalvfs", "8\n")
    write(tmp_path, "sys/class/net/ens1/device/sriov_numvfs", "0\n")
    write(tmp_path, "sys/class/net/veth0/address", "x\n")  # virtual: no device link
    labels, _ = run(network.SOURCE, tmp_path)
    assert labels == {NFD + "network-sriov.capable": "true"}
    write(tmp_path, "usr/lib/os-release", 'ID="rhcos"\nVERSION_ID="4.14"\nOSTREE_VERSION=\'414.92.2023\'\n')
    labels, _ = run(system.SOURCE, tmp_path)
    assert labels == {
        NFD + "system-os_release.ID": "rhcos", NFD + "system-os_release.VERSION_ID": "4.14",
        NFD + "system-os_release.VERSION_ID.major": "4", NFD + "system-os_release.VERSION_ID.minor": "14",
        NFD + "system-os_release.OSTREE_VERSION": "414.92.2023",
    }  # fmt: skip


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_local_feature_file_directives() -> None:
    text = (
        "# a comment\nplain\nwith-value=42\nexample.com/vendor-thing=yes\n"
        "# +no-label\nfeature-only=1\nlabelled-again=1\n# +no-feature\nlabel-only=2\n"
        "kubernetes.io/hostname=evil\n=empty\n"
        "# +expiry-time=2025-12-31T23:59:59Z\nexpired=true\n"
        "# +expiry-time=2027-01-01T00:00:00Z\nfresh=true\n# +expiry-time=yesterday\nbad-expiry=true\n"
    )
    parsed = local.parse_feature_file(text, NOW)
    assert parsed.labels == {
        NFD + "plain": "true", NFD + "with-value": "42", "example.com/vendor-thing": "yes",
        NFD + "labelled-again": "1", NFD + "label-only": "2", NFD + "fresh": "true",
    }  # fmt: skip
    assert NFD + "feature-only" in parsed.features and NFD + "label-only" not in parsed.features
    assert any("kubernetes.io" in p for p in parsed.problems)
    assert any("line 16" in p and "expiry" in p for p in parsed.problems)


def test_local_source_skips_hidden_and_big_files(tmp_path: Path) -> None:
    d = tmp_path / "etc/kubernetes/node-feature-discovery/features.d"
    write(d, "a", "one\n")
    write(d, ".hidden", "secret\n")
    write(d, "big", "x=" + "y" * (local.MAX_FILE_SIZE + 1))
    labels, reader = run(local.SOURCE, tmp_path)
    assert labels == {NFD + "one": "true"}
    assert [p.path for p in reader.problems] == [str(d / "big")]


def test_one_failed_source_costs_only_itself(tmp_path: Path) -> None:
    class Broken:
        name = "cpu"

        def discover(self, reader: HostReader, config: Config) -> object:
            raise RuntimeError("boom")

        def labels(self, features: object, config: Config) -> dict[str, str]:
            return {}

    write(tmp_path, "etc/os-release", "ID=debian\n")
    results = scan(HostRoot.at(tmp_path), Config(), (Broken(), system.SOURCE))  # type: ignore[arg-type]
    assert results[0].degraded and "boom" in results[0].problems[0].message
    assert results[1].features.attributes["osrelease"]["ID"] == "debian"


def test_disabled_sources_are_not_read(tmp_path: Path) -> None:
    write(tmp_path, "proc/cpuinfo", CPUINFO)
    write(tmp_path, "etc/os-release", "ID=debian\n")
    config = parse_config("core:\n  featureSources: [all, -cpu]\n  labelSources: [system]\n")
    labeling = discover(HostRoot.at(tmp_path), config)
    assert set(labeling.labels) == {NFD + "system-os_release.ID"}
    assert not any(p.path.endswith("cpuinfo") for p in labeling.problems)


def test_odd_files_fifo_eio_and_garbage_modalias(tmp_path: Path) -> None:
    import os

    pci_dev(tmp_path, "0000:01:00.0", modalias="pci:v000010DEd000020B0sv000010DEsd0000134Fbc03sc02i00")
    pci_dev(tmp_path, "0000:02:00.0", modalias="\x01garbage")
    pci_dev(tmp_path, "0000:03:00.0", cls="0x120000", vendor="0x8086")
    eio = tmp_path / "sys/bus/pci/devices/0000:03:00.0/device"
    eio.unlink()
    eio.symlink_to("/proc/self/mem")  # a real file whose read fails (EIO), even for root
    fifo_dir = tmp_path / "etc/kubernetes/node-feature-discovery/features.d"
    fifo_dir.mkdir(parents=True)
    os.mkfifo(fifo_dir / "a-fifo")  # must not block the pass
    write(fifo_dir, "ok", "fine\n")
    labeling = discover(HostRoot.at(tmp_path), parse_config("core: {featureSources: [pci, local]}"))
    assert labeling.labels == {NFD + "pci-0302_10de.present": "true", NFD + "fine": "true"}
    problems = {p.path: p.message for p in labeling.problems}
    assert "EIO" in problems[str(eio)]
    assert "not a regular file" in problems[str(fifo_dir / "a-fifo")]
    warnings = {p.path: p.message for p in labeling.warnings}
    assert "not a PCI modalias" in warnings[str(tmp_path / "sys/bus/pci/devices/0000:02:00.0/modalias")]
    assert labeling.degraded == {"pci", "local", "custom"}


def test_x86_64_levels_are_cumulative_and_need_every_feature() -> None:
    from sro.node.discovery.cpu import X86_64_LEVELS, x86_64_levels

    v2, v3, v4 = (req for _, req in X86_64_LEVELS)
    assert x86_64_levels(v2 | v3 | v4) == {"X86_64_V2", "X86_64_V3", "X86_64_V4"}
    assert x86_64_levels(v2 | (v3 - {"MOVBE"}) | v4) == {"X86_64_V2"}, "a level needs the one below it"
    assert x86_64_levels(v3 | v4) == set()


def test_kconfig_keeps_y_and_m_apart_and_labels_both_true() -> None:
    from sro.node.discovery.config import Config
    from sro.node.discovery.features import Features
    from sro.node.discovery.kernel import SOURCE, parse_kconfig

    raw = parse_kconfig('CONFIG_NO_HZ=y\nCONFIG_PREEMPT=m\nCONFIG_LSM="landlock"\n# CONFIG_X is not set\n')
    assert raw == {"NO_HZ": "y", "PREEMPT": "m", "LSM": "landlock"}
    labels = SOURCE.labels(
        Features(attributes={"config": raw}), Config(kernel_config_opts=("NO_HZ", "PREEMPT", "LSM"))
    )
    assert {k.rsplit("/", 1)[1]: v for k, v in labels.items()} == {
        "kernel-config.NO_HZ": "true",
        "kernel-config.PREEMPT": "true",
        "kernel-config.LSM": "landlock",
    }
