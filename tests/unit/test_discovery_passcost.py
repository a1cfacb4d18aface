"""What makes a discovery pass cheap must not change what it reads (issue 26: pass <= 2x the read floor).

The reader reads with raw os.read calls and takes string paths; the kernel config, modules and
os-release parses are remembered for the same content (sro.node.discovery.remembered); label
checks are memoised. Each of these is checked here for the answer staying exactly what it was.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from sro.host.reading import HostReader, Recording
from sro.host.root import HostRoot
from sro.node.discovery import cpu, kernel, system
from sro.node.discovery.features import is_hex


def test_a_file_larger_than_one_read_comes_back_whole_and_the_limit_holds(tmp_path: Path) -> None:
    data = bytes(range(256)) * 1000  # 256,000 bytes: four raw reads
    (tmp_path / "big").write_bytes(data)
    recording = Recording()
    reader = HostReader(HostRoot.at(tmp_path), recording=recording)
    assert reader.read_bytes(str(tmp_path / "big")) == data
    assert recording.files == {tmp_path / "big": data}  # recorded under a Path even when read by str
    assert reader.read_bytes(tmp_path / "big", limit=len(data)) == data
    assert reader.read_bytes(tmp_path / "big", limit=len(data) - 1) is None
    assert [p.message for p in reader.problems] == [f"larger than {len(data) - 1} bytes, ignored"]


def test_string_and_path_reads_report_alike(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    reader = HostReader(HostRoot.at(tmp_path))
    for path in (tmp_path / "d", str(tmp_path / "d")):
        assert reader.read_value(path) is None
    for path in (tmp_path / "gone", str(tmp_path / "gone")):
        assert reader.read_value(path, required=True) is None
    assert [(p.path, p.message) for p in reader.problems] == [
        (str(tmp_path / "d"), "is a directory, expected a file"),
        (str(tmp_path / "d"), "is a directory, expected a file"),
        (str(tmp_path / "gone"), "missing"),
        (str(tmp_path / "gone"), "missing"),
    ]


def test_kconfig_is_parsed_again_only_for_other_bytes_and_callers_cannot_change_it() -> None:
    one = gzip.compress(b'CONFIG_A=y\nCONFIG_B="x"\n# CONFIG_C is not set\n')
    first = kernel._parsed_kconfig("/proc/config.gz", (True, one))
    assert first == {"A": "y", "B": "x"}
    with pytest.raises(TypeError):
        first["A"] = "changed by a caller"  # type: ignore[index]  # shared: read-only
    assert kernel._parsed_kconfig("/proc/config.gz", (True, bytes(one))) is first  # equal bytes, same parse
    assert kernel._parsed_kconfig("/proc/config.gz", (False, b"CONFIG_A=m\n")) == {"A": "m"}
    assert kernel._parsed_kconfig("/proc/config.gz", (True, one)) == {"A": "y", "B": "x"}


def test_os_release_parse_is_a_fresh_dict_each_time() -> None:
    text = 'ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n'
    first = system.parse_os_release(text)
    assert first == {"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"}
    first["ID"] = "changed"
    assert system.parse_os_release(text)["ID"] == "debian"


def test_is_hex_answers_as_the_character_loop_did() -> None:
    for value in ("", "0", "10de", "10DE", "0x10", "1-2", "abcdef0123", " 10de", "10de\n", "g", "a b"):
        expected = bool(value) and all(c in "0123456789abcdef" for c in value)
        assert is_hex(value) is expected, value
    assert is_hex("10de", 4) and not is_hex("10de", 6)


def test_builtin_modules_parse_is_the_per_line_rule_and_a_frozenset() -> None:
    text = "kernel/fs/ext4/ext4.ko\n\nkernel/drivers/nvme.ko\nplain\n  spaced/x.ko  \n"
    expected = set()
    for line in text.splitlines():
        name = Path(line.strip()).name.removesuffix(".ko")
        if name:
            expected.add(name)
    parsed = kernel._parsed_builtin("modules.builtin", text)
    assert parsed == frozenset(expected) == {"ext4", "nvme", "plain", "x"}
    assert kernel._parsed_builtin("modules.builtin", "".join(text)) is parsed  # remembered, and immutable


def test_loaded_modules_are_the_first_word_of_each_line() -> None:
    text = "nvidia 56000 1 - Live 0x0\n\nnvme_core 200704 2 nvme, Live 0x0\n"
    assert kernel._parsed_modules("/proc/modules", text) == {"nvidia", "nvme_core"}


def test_cpuinfo_parse_reads_the_first_block_as_the_line_loop_did() -> None:
    block = "processor\t: {n}\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse4_2 avx\n"
    text = "\n\n" + "\n".join(block.format(n=n) for n in range(64))  # leading blank lines, 64 CPUs
    expected: dict[str, str] = {}
    for line in text.splitlines():  # the rule: skip leading blank lines, stop at the next one
        if not line.strip():
            if expected:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            expected.setdefault(key.strip(), value.strip())
    assert (
        cpu.parse_cpuinfo(text)
        == expected
        == {"processor": "0", "vendor_id": "GenuineIntel", "flags": "fpu sse4_2 avx"}
    )


def test_cpuid_names_are_derived_once_per_flags_line() -> None:
    first = cpu._cpuid("cpu", (True, "fpu sse4_2 xsave"))
    assert first == (frozenset({"X87", "SSE42", "XSAVE", "OSXSAVE"}), frozenset({"fpu", "sse4_2", "xsave"}))
    assert cpu._cpuid("cpu", (True, " ".join(["fpu", "sse4_2", "xsave"]))) is first
    assert cpu._cpuid("cpu", (False, "fp asimd sha3")) == (
        frozenset({"FP", "ASIMD", "SHA3"}),
        frozenset({"fp", "asimd", "sha3"}),
    )


@pytest.mark.parametrize(
    "text",
    [
        'CONFIG_A=y\nCONFIG_B="x y"\n# CONFIG_C is not set\nCONFIG_NOEQ\nCONFIG_D=a=b\n CONFIG_E=y\n',
        'CONFIG_=z\nCONFIG_F=\nCONFIG_A=y\nCONFIG_A=m\nCONFIG_G="q\nCONFIG_CONFIG_H=y',
        "",
        "\n\nCONFIG_X=1\n\n",
        "CONFIG_A=y\r\nCONFIG_B=m\r\n",  # CRLF: the line rule
        "CONFIG_A=y\x0cCONFIG_B=m\x1eCONFIG_C=\x0by",  # other line breaks
        'CONFIG_NAME="caf\u00e9"\u2028CONFIG_B=y\n',  # not ASCII
    ],
)
def test_kconfig_parse_is_the_line_rule(text: str) -> None:
    assert kernel.parse_kconfig(text) == kernel._parse_kconfig_lines(text)


def test_kconfig_parse_of_this_machines_config_is_the_line_rule() -> None:
    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode("utf-8", "replace")
    except OSError:
        pytest.skip("no /proc/config.gz here")
    assert kernel.parse_kconfig(text) == kernel._parse_kconfig_lines(text)
    assert len(kernel.parse_kconfig(text)) > 100
