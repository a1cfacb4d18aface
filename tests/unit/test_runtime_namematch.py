"""namematch agrees with fnmatch and glob, which the hook no longer imports."""

from __future__ import annotations

import fnmatch
import glob
import os
import random
from pathlib import Path

import pytest

from sro.node.runtime.namematch import filter_names, glob_in, literal_prefix, match


def test_match_agrees_with_fnmatchcase_on_random_names() -> None:
    rng = random.Random(5)
    alphabet = "ab.*?/"
    for _ in range(20000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
        pattern = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        assert match(name, pattern) == fnmatch.fnmatchcase(name, pattern), (name, pattern)


def test_filter_names_agrees_with_fnmatch_filter_on_random_names() -> None:
    """filter_names passes over names without the pattern's literal prefix before matching: the
    same answers as fnmatch.filter, character classes included."""
    rng = random.Random(7)
    alphabet = "ab.*?[]!"
    for _ in range(3000):
        names = ["".join(rng.choice("ab.[]!") for _ in range(rng.randint(0, 6))) for _ in range(12)]
        pattern = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        assert filter_names(names, pattern) == fnmatch.filter(names, pattern), (names, pattern)
    assert literal_prefix("libcuda.so.*") == "libcuda.so." and literal_prefix("x[ab]*") == "x"
    assert literal_prefix("plain") == "plain" and literal_prefix("*.so") == ""


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("libcuda.so.1", "libcuda.so.*"),
        ("libcuda.so", "libcuda.so.*"),
        ("libcuda.so.535.1", "libcuda.so.*"),
        ("LIBCUDA.so.1", "libcuda.so.*"),
        ("libnvidia-ml.so.1", "libnvidia-ml.so.?"),
        ("libx.so.1", "lib[xy].so.*"),
        ("libz.so.1", "lib[!xy].so.*"),
        ("lib[.so", "lib[.so"),
        ("", "*"),
        ("a", ""),
    ],
)
def test_match_known_cases(name: str, pattern: str) -> None:
    assert match(name, pattern) == fnmatch.fnmatchcase(name, pattern)
    assert filter_names([name, "other"], pattern) == fnmatch.filter([name, "other"], pattern)


def test_glob_in_agrees_with_glob(tmp_path: Path) -> None:
    for rel in (
        "lib/firmware/nvidia/535.1/gsp_ga10x.bin",
        "lib/firmware/nvidia/535.1/gsp_tu10x.bin",
        "lib/firmware/nvidia/.hidden/gsp_x.bin",
        "lib/firmware/nvidia/535.1/.gsp_h.bin",
        "lib/firmware/nvidia/550/other.bin",
        "lib/firmware/nvidia/file-not-dir",
        "etc/vulkan/icd.d/x.json",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    os.symlink("535.1", tmp_path / "lib/firmware/nvidia/link")
    os.symlink("/nonexistent", tmp_path / "lib/firmware/nvidia/dangling")
    for pattern in (
        "lib/firmware/nvidia/*/gsp*.bin",
        "lib/firmware/nvidia/*",
        "lib/firmware/*/535.1/*",
        "lib/firmware/nvidia/.*/gsp*.bin",
        "lib/firmware/nvidia/535.1/.gsp*",
        "etc/vulkan/icd.d",
        "etc/vulkan/icd.d/",
        "etc/*/",
        "nothing/*",
        "lib/firmware/nvidia/dangling",
        "lib/firmware/nvidia/5[0-9]*/*",
        "**/vulkan",
    ):
        # (a doubled "/" in a pattern is kept by glob in its results and collapsed here: same files)
        assert sorted(glob_in(str(tmp_path), pattern)) == sorted(glob.glob(pattern, root_dir=tmp_path)), (
            pattern
        )
