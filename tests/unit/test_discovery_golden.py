"""Every fake host tree (and each config next to it) against its golden label file.

`SRO_UPDATE_GOLDEN=1 pytest tests/unit/test_discovery_golden.py` rewrites the goldens; review the diff.
Besides the exact labels, every key and value is checked against NFD's documented label formats.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sro.host.capture import write_tree
from sro.host.reading import Recording
from sro.host.root import HostRoot
from sro.node.discovery.commands import discover
from sro.node.discovery.config import Config, parse_config
from tests.golden_files import update_goldens

HOSTS = Path(__file__).resolve().parent.parent / "hosts"
SCENARIOS = sorted(p.parent.name for p in HOSTS.glob("*/root"))
CASES = [(s, None) for s in SCENARIOS] + [
    (conf.parent.name, conf.name) for s in SCENARIOS for conf in sorted((HOSTS / s).glob("*.conf"))
]

# NFD's documented label names (docs/usage/features.md), per source; `local` and accelerator labels
# are free-form and checked only for Kubernetes validity.
NFD_FORMATS = {
    "cpu": r"cpu-(cpuid\.[A-Z0-9_]+|hardware_multithreading|model\.(vendor_id|family|id)"
    r"|pstate\.(status|turbo|scaling_governor)|cstate\.enabled"
    r"|security\.(sgx\.enabled|sev\.enabled|sev\.es\.enabled|sev\.snp\.enabled|tdx\.enabled|tdx\.protected))",
    "kernel": r"kernel-(config\.[A-Z0-9_]+|selinux\.enabled|version\.(full|major|minor|revision))",
    "memory": r"memory-(numa|nv\.present|nv\.dax|swap\.enabled)",
    "network": r"network-sriov\.(capable|configured)",
    "pci": r"pci-[0-9a-f]{4}(_[0-9a-f]{4})*\.(present|sriov\.capable)",
    "storage": r"storage-nonrotationaldisk",
    "system": r"system-os_release\.(ID|VERSION_ID|VERSION_ID\.major|VERSION_ID\.minor|OSTREE_VERSION)",
    "usb": r"usb-[0-9a-f]{2}(_[0-9a-f]{4})*(_[A-Za-z0-9]+)?\.present",
}
BOOLEAN = re.compile(
    r"\.(present|capable|configured|enabled|protected)$|cpuid\.|-numa$|nonrotationaldisk$|multithreading$"
)
NUMERIC = re.compile(r"(model\.(family|id)|version\.(major|minor|revision)|VERSION_ID\.(major|minor))$")


def render(labels: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(labels.items()))


@pytest.mark.parametrize(("scenario", "conf"), CASES, ids=[f"{s}-{c or 'defaults'}" for s, c in CASES])
def test_golden_labels(scenario: str, conf: str | None) -> None:
    base = HOSTS / scenario
    config = parse_config((base / conf).read_text(), conf) if conf else Config()
    assert config.problems == ()
    labeling = discover(HostRoot.at(base / "root"), config)
    assert labeling.problems == ()
    golden = base / ("expected-labels.txt" if conf is None else f"expected-labels.{Path(conf).stem}.txt")
    text = render(dict(labeling.labels))
    if update_goldens():
        golden.write_text(text)
    assert text == golden.read_text(), f"labels differ from {golden} (SRO_UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_labels_follow_nfd_formats(scenario: str) -> None:
    labels = discover(HostRoot.at(HOSTS / scenario / "root"), Config()).labels
    assert labels
    for key, value in labels.items():
        if not key.startswith("feature.node.kubernetes.io/"):
            continue
        name = key.removeprefix("feature.node.kubernetes.io/")
        source = name.split("-", 1)[0]
        if source not in NFD_FORMATS:
            continue  # a local feature file's own name
        assert re.fullmatch(NFD_FORMATS[source], name), f"{key} is not an NFD {source} label"
        if BOOLEAN.search(name):
            assert value in ("true", "false"), key
        if NUMERIC.search(name):
            assert value.isdigit(), key


def test_scenarios_cover_the_required_hardware() -> None:
    gpu = discover(HostRoot.at(HOSTS / "nvidia-8gpu" / "root"), Config()).labels
    assert gpu["feature.node.kubernetes.io/pci-0302_10de.present"] == "true"
    assert gpu["feature.node.kubernetes.io/memory-numa"] == "true"
    assert gpu["feature.node.kubernetes.io/network-sriov.configured"] == "true"
    op = parse_config((HOSTS / "nvidia-8gpu" / "gpu-operator.conf").read_text())
    gpu_op = discover(HostRoot.at(HOSTS / "nvidia-8gpu" / "root"), op).labels
    assert gpu_op["feature.node.kubernetes.io/pci-10de.present"] == "true"  # what gpu-operator selects on
    assert gpu_op["feature.node.kubernetes.io/pci-15b3.sriov.capable"] == "true"
    fpga = discover(HostRoot.at(HOSTS / "fpga-solarflare" / "root"), Config()).labels
    assert fpga["feature.node.kubernetes.io/pci-1200_8086.present"] == "true"
    net = parse_config((HOSTS / "fpga-solarflare" / "network.conf").read_text())
    assert (
        discover(HostRoot.at(HOSTS / "fpga-solarflare" / "root"), net).labels[
            "feature.node.kubernetes.io/pci-1924_0b03.sriov.capable"
        ]
        == "true"
    )
    cpu = discover(HostRoot.at(HOSTS / "cpu-only" / "root"), Config()).labels
    assert not any(k.startswith("feature.node.kubernetes.io/pci-03") and "10de" in k for k in cpu)
    assert "this-machine" in SCENARIOS


def test_capture_round_trip(tmp_path: Path) -> None:
    """What capture-host writes reproduces the labels of the host it captured (here: a fake one)."""
    host = HostRoot.at(HOSTS / "nvidia-8gpu" / "root")
    recording = Recording()
    live = discover(host, Config(), recording)
    write_tree(recording, host, tmp_path)
    again = discover(HostRoot.at(tmp_path), Config())
    assert again.labels == live.labels
    # only what discovery reads is captured: sysfs files no source opens are left out
    assert not list(tmp_path.rglob("address")) and list((HOSTS / "nvidia-8gpu" / "root").rglob("address"))
