"""The Kubernetes build cache is trusted only when complete and matching its manifest."""

from __future__ import annotations

import json
from pathlib import Path

from sro.local import kubebuild
from sro.local.layout import KUBE_BINARIES


def _cache(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    (tmp_path / "src").mkdir()
    sums = {}
    for name in KUBE_BINARIES:
        (tmp_path / "bin" / name).write_bytes(name.encode() * 10)
        sums[name] = kubebuild._sha256(tmp_path / "bin" / name)
    (tmp_path / "src" / "pause.c").write_text("int main(){}")
    sums["pause.c"] = kubebuild._sha256(tmp_path / "src" / "pause.c")
    (tmp_path / "manifest.json").write_text(json.dumps({"sha256": sums}))
    return tmp_path


def test_complete_cache_verifies(tmp_path: Path) -> None:
    assert kubebuild.verify(_cache(tmp_path)) is None


def test_missing_truncated_or_unlisted_files_are_named(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    (cache / "bin" / "kubelet").write_bytes(b"")
    assert "kubelet" in (kubebuild.verify(cache) or "")
    (cache / "bin" / "kubelet").unlink()
    assert "kubelet missing" in (kubebuild.verify(cache) or "")
    (cache / "manifest.json").write_text("{")
    assert "manifest unreadable" in (kubebuild.verify(cache) or "")
    (cache / "manifest.json").unlink()
    assert kubebuild.verify(cache) == "no manifest"
