"""The simulated NVML state file: rendered from an inventory, parsed back and compared with it
(structural, no golden), readings and faults, counters carried across writers, the file I/O."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sro.devices import driverstate, simnvml_state, simreadings, simulated_nvidia
from sro.devices import fields as f
from sro.devices.driverstate import Fault, Load
from sro.devices.model import DeviceUUID, Inventory
from sro.devices.simnvml_format import StateFormatError, decode, encode, line, parse, records
from tests.simnvml import WRITER_DOC


@pytest.fixture
def inv() -> Inventory:
    return simulated_nvidia.parse(WRITER_DOC)


def _render(
    inv: Inventory, faults: dict[DeviceUUID, Fault] | None = None, loads: dict[DeviceUUID, Load] | None = None
) -> str:
    text, _ = simnvml_state.next_text(inv, faults or {}, loads or {}, simreadings.SimState(), None, 1.0)
    return text


def test_encode_decode_round_trip() -> None:
    for value in ("NVIDIA A100-SXM4-40GB (simulated)", "100%", "a=b", "ünï\tcode\n", ""):
        enc = encode(value)
        assert " " not in enc and all(0x21 <= ord(c) <= 0x7E for c in enc)
        assert decode(enc) == value
    assert encode("A B%") == "A%20B%25"
    assert parse(line("gpu", name="x y", n=3)) == parse("gpu name=x%20y n=3")
    with pytest.raises(StateFormatError, match="line 2"):
        parse("simnvml version=1\ngpu index\n")


def test_render_reads_back_as_the_inventory(inv: Inventory) -> None:
    text = _render(inv)
    assert text.isascii() and text.endswith("\n")
    kinds = [r.kind for r in parse(text)]
    # the design's order: header, gpu lines, readings, nvlinks, MIG devices, faults
    assert kinds == sorted(kinds, key=["simnvml", "gpu", "reading", "nvlink", "mig", "fault"].index)
    (head,) = records(text, "simnvml")
    assert head["version"] == "1" and head["driver"] == "550.90.07"
    assert head["cuda"] == "12040" and head["nvml"] == "12.550.90.07" and int(head["generation"]) >= 1

    gpus = records(text, "gpu")
    assert [int(g["index"]) for g in gpus] == [d.index for d in inv.devices]
    for g, d in zip(gpus, inv.devices, strict=True):
        assert g["uuid"] == d.uuid and int(g["minor"]) == d.minor
        assert g["bus"] == d.pci_bus_id.upper().replace("0000:", "00000000:", 1)
        assert g["name"] == d.product and g["name"].endswith(" (simulated)")
        assert int(g["memory"]) == d.memory_mib and g["cc"] == d.compute_capability
        assert int(g["numa"]) == d.numa_node and g["mig"] == str(int(d.mig_enabled)) and g["lost"] == "0"
        assert len(g["serial"]) == 13 and g["serial"].isdigit()
    assert gpus[0]["bus"] == "00000000:3B:00.0" and gpus[0]["arch"] == "hopper" and gpus[0]["pcie_gen"] == "5"
    assert gpus[0]["power_limit"] == "700000" and gpus[1]["arch"] == "ampere" and gpus[1]["pcie_gen"] == "4"
    assert len({g["serial"] for g in gpus}) == len(gpus)

    assert [int(r["index"]) for r in records(text, "reading")] == [d.index for d in inv.devices]

    by_bus = {simnvml_state.nvml_bus_id(d.pci_bus_id): d.uuid for d in inv.devices}
    for d in inv.devices:
        links = [x for x in records(text, "nvlink") if int(x["index"]) == d.index]
        assert [int(x["link"]) for x in links] == list(range(len(links)))
        peers: dict[str, int] = {}
        for x in links:
            peers[by_bus[x["peer_bus"]]] = peers.get(by_bus[x["peer_bus"]], 0) + 1
            assert x["active"] == "1"
        assert peers == dict(d.nvlinks)
    assert len(records(text, "nvlink")) == 2 * (3 + 2)

    migs = records(text, "mig")
    want = [(d.index, m) for d in inv.devices for m in d.mig_devices]
    assert len(migs) == len(want) == 2
    for x, (parent, m) in zip(migs, want, strict=True):
        assert (int(x["parent"]), int(x["index"]), x["uuid"], x["profile"]) == (
            parent,
            m.index,
            m.uuid,
            m.profile,
        )
        assert (int(x["gi"]), int(x["ci"]), int(x["memory"])) == (m.gi_id, m.ci_id, m.memory_mib)
        assert m.device_node == f"/dev/nvidia-caps/nvidia-cap{x['cap_minor']}"
    assert migs[1]["gi"] == "5" and migs[1]["ci"] == "2"
    assert records(text, "fault") == []


def test_faults_lost_gpu_and_mig_fault(inv: Inventory) -> None:
    mig = inv.devices[1].mig_devices[1]
    faults = {
        inv.devices[2].uuid: Fault(79, since=1700000000.25),
        mig.uuid: Fault(48, since=1700000001.5),
        DeviceUUID("GPU-not-here"): Fault(79, since=1700000002.0),  # not on this inventory: left out
    }
    text = _render(inv, faults)
    assert [g["lost"] for g in records(text, "gpu")] == ["0", "0", "1", "0"]
    assert [r["index"] for r in records(text, "reading")] == ["0", "1", "3"]  # the lost GPU answers nothing
    assert records(text, "fault") == [
        {"index": "2", "mig": "-1", "xid": "79", "seq": "1700000000250000"},
        {"index": "1", "mig": "1", "xid": "48", "seq": "1700000001500000"},
    ]
    reading1 = records(text, "reading")[1]
    assert reading1["ecc_dbe_vol"] == reading1["ecc_dbe_agg"] == reading1["remap_unc"] == "1"
    # GPU 0's links to the lost GPU 2 are down, those to GPU 1 up
    links0 = [(x["peer_bus"], x["active"]) for x in records(text, "nvlink") if x["index"] == "0"]
    assert links0.count(("00000000:12:00.0", "0")) == 2 and links0.count(("00000000:11:00.0", "1")) == 3


def test_fault_seqs_are_unique_in_injection_order(inv: Inventory) -> None:
    same = 1700000000.0
    faults = {inv.devices[0].uuid: Fault(79, same), inv.devices[1].uuid: Fault(48, same)}
    seqs = [s for *_, s in simnvml_state.fault_seqs(inv, faults)]
    assert seqs == [1700000000000000, 1700000000000001]


def test_readings_follow_the_load(inv: Inventory) -> None:
    d = inv.devices[0]
    idle = records(_render(inv), "reading")[0]
    busy = records(_render(inv, loads={d.uuid: Load(util=80.0, memory_mib=40000)}), "reading")[0]
    assert idle["util"] == "0" and idle["fb_used"] == "0" and idle["sm_clock"] == "210"
    assert 77 <= int(busy["util"]) <= 83 and abs(int(busy["fb_used"]) - 40000) <= 0.005 * d.memory_mib
    assert busy["sm_clock"] == "1980" and int(busy["power"]) > int(idle["power"]) > 0
    assert int(busy["temp"]) > int(idle["temp"])


def test_optional_readings_are_written_when_the_model_gives_them(
    inv: Inventory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx"):
        monkeypatch.setitem(simnvml_state.OPTIONAL_READINGS, key, (f"TEST_{key}",))
    values = {f.GPU_UTIL: 5.0, "TEST_pcie_tx": 1234.0, "TEST_pcie_rx": 99.0, "TEST_nvlink_tx": 500.0}
    step = simreadings.Step(simreadings.SimState(), {d.uuid: values for d in inv.devices}, {})
    text = simnvml_state.render(inv, {}, step, 7)
    assert records(text, "simnvml")[0]["generation"] == "7"
    r = records(text, "reading")[0]
    assert (r["pcie_tx"], r["pcie_rx"], r["util"]) == ("1234", "99", "5")
    links0 = [x for x in records(text, "nvlink") if x["index"] == "0"]
    assert {x["tx"] for x in links0} == {"100"} and {x["rx"] for x in links0} == {"0"}  # 500 KiB over 5 links


def test_counters_carry_over_between_writers(inv: Inventory) -> None:
    """One-shot writers (`sro simulate fault`) and the holding driver take turns: a fault counts
    once, a cleared fault's count stays, energy and generation never go back."""
    gpu = inv.devices[0].uuid
    faults = {gpu: Fault(48, since=1700000000.0)}
    first, _ = simnvml_state.next_text(inv, faults, {}, simreadings.SimState(), None, 0.0)
    # a second writer with nothing in memory starts from the file
    second, _ = simnvml_state.next_text(inv, faults, {}, simreadings.SimState(), first, 0.0)
    assert records(second, "reading")[0]["ecc_dbe_vol"] == "1"
    cleared, _ = simnvml_state.next_text(inv, {}, {}, simreadings.SimState(), second, 0.0)
    assert records(cleared, "reading")[0]["ecc_dbe_vol"] == "1"
    again = {gpu: Fault(48, since=1700000099.0)}  # injected again: counts again
    third, _ = simnvml_state.next_text(inv, again, {}, simreadings.SimState(), cleared, 0.0)
    assert records(third, "reading")[0]["ecc_dbe_vol"] == "2"
    gens = [int(records(t, "simnvml")[0]["generation"]) for t in (first, second, cleared, third)]
    assert gens == sorted(set(gens))

    # a holding writer with energy in memory, behind a file another writer wrote: neither goes back
    text, memory = simnvml_state.next_text(inv, {}, {}, simreadings.SimState(), None, 10.0)
    energy = int(records(text, "reading")[0]["energy"])
    assert energy > 0
    text2, _ = simnvml_state.next_text(inv, {}, {}, simreadings.SimState(), text, 0.0)
    assert int(records(text2, "reading")[0]["energy"]) == energy
    text3, _ = simnvml_state.next_text(inv, {}, {}, memory, text2, 1.0)
    assert int(records(text3, "reading")[0]["energy"]) > energy
    assert int(records(text3, "simnvml")[0]["generation"]) > int(records(text2, "simnvml")[0]["generation"])


def test_a_damaged_previous_file_is_a_fresh_start(inv: Inventory) -> None:
    text, _ = simnvml_state.next_text(inv, {}, {}, simreadings.SimState(), "gpu index\x00 garbage", 0.0)
    assert len(records(text, "gpu")) == len(inv.devices)


def test_nvidia_numbers() -> None:
    assert simnvml_state.nvml_bus_id("0000:3b:00.0") == "00000000:3B:00.0"
    assert simnvml_state.cuda_version("550.90.07") == 12040
    assert simnvml_state.cuda_version("535.183.01") == 12020
    assert simnvml_state.cuda_version("570.86.15") == 12080
    assert simnvml_state.cuda_version("999.1") == 13000 and simnvml_state.cuda_version("1.0") == 11040
    assert simnvml_state.cuda_version("sim") == simnvml_state.DEFAULT_CUDA
    assert simnvml_state.nvml_version("550.90.07") == "12.550.90.07"
    assert [simnvml_state.architecture(cc) for cc in ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "x")] == [
        "volta",
        "turing",
        "ampere",
        "ampere",
        "ada",
        "hopper",
        "unknown",
    ]
    minors = {simnvml_state.mig_cap_minor(g, gi, ci) for g in range(8) for gi in range(15) for ci in range(8)}
    assert len(minors) == 8 * 15 * 8 and min(minors) == 4  # gpu0/gi0/ci0, after config 1, monitor 2, gi0 3
    with pytest.raises(ValueError, match="gi 15"):
        simnvml_state.mig_cap_minor(0, 15, 0)


def _tree(root: Path, inv: Inventory) -> None:
    doc = driverstate.inventory_to_doc(inv, 195, 255)
    driverstate.write_atomic(root / "devices.json", json.dumps(doc))


def test_state_writer_files(tmp_path: Path, inv: Inventory) -> None:
    _tree(tmp_path, inv)
    assert not simnvml_state.enabled(tmp_path)
    path = simnvml_state.write_state(tmp_path)
    assert path == tmp_path / "run/sro-simnvml/state" and simnvml_state.enabled(tmp_path)
    assert [g["uuid"] for g in records(path.read_text(), "gpu")] == [d.uuid for d in inv.devices]

    writer = simnvml_state.StateWriter(tmp_path, clock=iter([0.0, 2.0, 4.0]).__next__)
    writer.write()
    gen = int(records(path.read_text(), "simnvml")[0]["generation"])
    (tmp_path / "loads.json").write_text("not json")  # a damaged load file is ignored
    driverstate.set_fault(tmp_path, inv.devices[3].uuid, 79)
    writer.write()
    text = path.read_text()
    assert (
        records(text, "gpu")[3]["lost"] == "1" and int(records(text, "simnvml")[0]["generation"]) == gen + 1
    )
    (tmp_path / "faults.json").write_text("not json")  # a damaged fault file: the last good state stays
    with pytest.raises(driverstate.DriverStateError):
        writer.write()
    assert path.read_text() == text


def test_nvlink_traffic_carries_over_between_writers(inv: Inventory) -> None:
    assert simnvml_state.OPTIONAL_READINGS["nvlink_tx"], "the readings model gives NVLink traffic"
    busy = {d.uuid: Load(util=80.0, memory_mib=None) for d in inv.devices}

    def tx(text: str) -> int:
        return sum(int(x["tx"]) for x in records(text, "nvlink") if x["index"] == "0")

    t1, memory = simnvml_state.next_text(inv, {}, busy, simreadings.SimState(), None, 0.0)
    t2, memory = simnvml_state.next_text(inv, {}, busy, memory, t1, 2.0)
    assert tx(t2) > 0
    t3, _ = simnvml_state.next_text(inv, {}, busy, simreadings.SimState(), t2, 0.0)  # a one-shot writer
    assert tx(t3) == tx(t2)
    t4, _ = simnvml_state.next_text(inv, {}, busy, memory, t3, 1.0)  # the holding writer goes on
    assert tx(t4) > tx(t3)
