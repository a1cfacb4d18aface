"""The Kubernetes build cache is trusted only when complete and matching its manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sro.local import kubebuild
from sro.local.layout import ADDED_BINARIES, KUBE_BINARIES


def _cache(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    (tmp_path / "src").mkdir()
    sums = {}
    for name in KUBE_BINARIES:
        (tmp_path / "bin" / name).write_bytes(name.encode() * 10)
        sums[name] = kubebuild._sha256(tmp_path / "bin" / name)
    (tmp_path / "src" / "pause.c").write_text("int main(){}")
    sums["pause.c"] = kubebuild._sha256(tmp_path / "src" / "pause.c")
    fixes = {name: kubebuild.fix_tag(name) for name in KUBE_BINARIES if kubebuild.fix_tag(name)}
    (tmp_path / "manifest.json").write_text(json.dumps({"sha256": sums, "fixes": fixes}))
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


# ---- the vendored modules replaced by Debian's fixed packages ----------------------------------
FIXES = (("github.com/modern-go/reflect2", "golang-github-modern-go-reflect2-dev"),)


def _gocode(tmp_path: Path) -> Path:
    pkg = tmp_path / "gocode" / "github.com" / "modern-go" / "reflect2"
    pkg.mkdir(parents=True)
    for name in ("reflect2.go", "go_above_118.go", "reflect2_amd64.s", "reflect2_test.go", "go.mod"):
        (pkg / name).write_text(f"fixed {name}\n")
    (pkg / "testdata").mkdir()
    return tmp_path / "gocode"


def _source(tmp_path: Path) -> Path:
    vendored = tmp_path / "src" / "vendor" / "github.com" / "modern-go" / "reflect2"
    vendored.mkdir(parents=True)
    (vendored / "reflect2.go").write_text("broken\n")
    (vendored / "unsafe_old.go").write_text("gone in the fixed version\n")
    (vendored / "LICENSE").write_text("Apache-2.0\n")
    return tmp_path / "src"


def test_replace_vendored_copies_sources_and_assembly_not_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubebuild, "_package_version", lambda package: "1.0.2-1")
    src = _source(tmp_path)
    done = kubebuild.replace_vendored(src, _gocode(tmp_path), FIXES)
    assert done == ["github.com/modern-go/reflect2 <- golang-github-modern-go-reflect2-dev 1.0.2-1"]
    target = src / "vendor" / "github.com" / "modern-go" / "reflect2"
    assert sorted(p.name for p in target.iterdir()) == [
        "LICENSE",  # kept: Debian ships the license in its copyright file, not in gocode
        "go_above_118.go",
        "reflect2.go",
        "reflect2_amd64.s",
    ]
    assert (target / "reflect2.go").read_text() == "fixed reflect2.go\n"
    assert (target / "LICENSE").read_text() == "Apache-2.0\n"


def test_replace_vendored_names_the_missing_package(tmp_path: Path) -> None:
    with pytest.raises(kubebuild.BuildError, match="apt-get install golang-github-modern-go-reflect2-dev"):
        kubebuild.replace_vendored(_source(tmp_path), tmp_path / "no-gocode", FIXES)
    with pytest.raises(kubebuild.BuildError, match=r"no vendor/github\.com/modern-go/reflect2"):
        kubebuild.replace_vendored(tmp_path / "empty", _gocode(tmp_path), FIXES)


def test_a_missing_replacement_package_is_a_build_error_naming_apt_get() -> None:
    with pytest.raises(kubebuild.BuildError, match="apt-get install sro-no-such-package"):
        kubebuild._package_version("sro-no-such-package")


def test_cache_key_changes_with_the_replacement_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubebuild, "source_version", lambda: "1.20.5+really1.20.2-1.1+deb12u1")
    monkeypatch.setattr(kubebuild, "go_version", lambda: "go1.19.8")
    versions = {
        "golang-github-modern-go-reflect2-dev": "1.0.2-2",
        "golang-github-json-iterator-go-dev": "1.1.12-1",
    }
    monkeypatch.setattr(kubebuild, "_package_version", lambda package: versions[package])
    key = kubebuild.cache_key()
    assert key.startswith("1.20.5+really1.20.2-1.1+deb12u1-go1.19.8-vendorfix-") and "/" not in key
    assert kubebuild.cache_key() == key, "the key is stable"
    versions["golang-github-json-iterator-go-dev"] = "1.1.12-2"
    assert kubebuild.cache_key() != key, "a new package version means a rebuild"


def test_a_killed_builds_work_dir_is_removed(tmp_path: Path) -> None:
    (tmp_path / "build-abc123" / "src").mkdir(parents=True)
    (tmp_path / "1.20-go1.19").mkdir()  # a cache, not a work dir
    (tmp_path / "build.log").write_text("")
    assert kubebuild.remove_stale_builds(tmp_path) == [tmp_path / "build-abc123"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.20-go1.19", "build.log"]


def test_a_second_build_waits_for_the_first(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    # another process holds the lock for a moment, as a running `up` would
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.flock(f, fcntl.LOCK_EX); "
         "print('locked', flush=True); time.sleep(0.5)", str(tmp_path / ".build.lock")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        said: list[str] = []
        t0 = time.monotonic()
        with kubebuild._build_lock(tmp_path, said.append):
            waited = time.monotonic() - t0
        assert waited > 0.2 and said and "waiting" in said[0]
    finally:
        holder.kill()
        holder.communicate()


# ---- binaries added after a cache was made: built into it, never a whole rebuild ------------------
def test_a_cache_without_an_added_binary_is_completed_not_rebuilt(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert kubebuild.to_build_alone(cache) == ()
    sums = json.loads((cache / "manifest.json").read_text())
    for name in ADDED_BINARIES:
        (cache / "bin" / name).unlink()
        del sums["sha256"][name]
    (cache / "manifest.json").write_text(json.dumps(sums))
    assert "kubemark missing" in (kubebuild.verify(cache) or "")
    assert kubebuild.to_build_alone(cache) == ADDED_BINARIES
    # a broken added binary is rebuilt on its own too
    (cache / "bin" / "kubemark").write_bytes(b"half")
    assert kubebuild.to_build_alone(cache) == ("kubemark",)


def test_a_broken_core_binary_means_a_whole_rebuild(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    (cache / "bin" / "kubemark").unlink()
    (cache / "bin" / "kubelet").write_bytes(b"")
    assert kubebuild.to_build_alone(cache) == ()


def test_a_binary_built_without_the_current_source_fix_is_rebuilt_on_its_own(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    doc = json.loads((cache / "manifest.json").read_text())
    del doc["fixes"]["kubemark"]  # a cache of the first kubemark build
    (cache / "manifest.json").write_text(json.dumps(doc))
    assert "without the current source fixes" in (kubebuild.verify(cache) or "")
    assert kubebuild.to_build_alone(cache) == ("kubemark",)


def test_a_core_binary_built_without_a_new_fix_is_rebuilt_alone(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    doc = json.loads((cache / "manifest.json").read_text())
    del doc["fixes"]["kube-apiserver"]  # a cache built before the apiserver's fix
    (cache / "manifest.json").write_text(json.dumps(doc))
    assert "without the current source fixes" in (kubebuild.verify(cache) or "")
    assert kubebuild.to_build_alone(cache) == ("kube-apiserver",)


def test_source_fixes_apply_to_the_source_or_refuse_a_changed_one(tmp_path: Path) -> None:
    for rel, old, _new, _why in kubebuild.SOURCE_FIXES["kubemark"]:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"func f() {{\n{old}\n}}\n")
    assert kubebuild.apply_source_fixes(tmp_path, ("kube-proxy",)) == []
    assert len(kubebuild.apply_source_fixes(tmp_path, ("kubemark",))) == len(
        kubebuild.SOURCE_FIXES["kubemark"]
    )
    for rel, _old, new, _why in kubebuild.SOURCE_FIXES["kubemark"]:
        assert new in (tmp_path / rel).read_text()
    (rel, old, _new, _why) = kubebuild.SOURCE_FIXES["kubemark"][0]
    (tmp_path / rel).write_text("func f() {}\n")  # upstream moved on
    with pytest.raises(kubebuild.BuildError, match="the source changed"):
        kubebuild.apply_source_fixes(tmp_path, ("kubemark",))


def test_the_apiserver_takes_zero_values_for_values_not_null(tmp_path: Path) -> None:
    # the vendored validator's line as Debian's 1.20 source has it (kubernetes#99804)
    (rel, old, _new, _why) = kubebuild.SOURCE_FIXES["kube-apiserver"][0]
    assert rel.endswith("kube-openapi/pkg/validation/validate/type.go")
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    path.write_text(f"func (t *typeValidator) Validate(data interface{{}}) *Result {{\n{old}\t}}\n}}\n")
    assert len(kubebuild.apply_source_fixes(tmp_path, ("kube-apiserver",))) == 1
    fixed = path.read_text()
    assert "\tif data == nil {\n" in fixed and "reflect.Zero" not in fixed
    assert kubebuild.fix_tag("kube-apiserver") and kubebuild.fix_tag("kube-proxy") == ""


def test_the_kubelet_fixes_apply_to_the_lines_as_debians_source_has_them(tmp_path: Path) -> None:
    """Each kubelet fix's text, as Debian's 1.20 source has it, is replaced once: a container already
    gone counts as stopped (kubernetes#28748), and a deleted pod goes once its containers have exited
    and its sandbox is stopped, its containers removed only after their exit codes are recorded (the
    pod lifecycle of 1.22), its object deleted within a second of its resources being reclaimed
    (also 1.22), and a new container's first probe is not held back (kubernetes#96731)."""
    fixes = kubebuild.SOURCE_FIXES["kubelet"]
    by_file: dict[str, str] = {}
    for rel, old, _new, _why in fixes:
        by_file[rel] = by_file.get(rel, "func f() {\n") + old + "\t\treturn false\n\t}\n"
    for rel, text in by_file.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text + "}\n")
    assert len(kubebuild.apply_source_fixes(tmp_path, ("kubelet",))) == len(fixes) == 16
    kill = (tmp_path / "pkg/kubelet/kuberuntime/kuberuntime_container.go").read_text()
    assert 'grpcstatus.Code(err).String() == "NotFound"' in kill and kill.count("if err != nil {") == 1
    reclaimed = (tmp_path / "pkg/kubelet/kubelet_pods.go").read_text()
    assert "runtimeapi.PodSandboxState_SANDBOX_READY" in reclaimed
    assert "status.State != kubecontainer.ContainerStateExited" in reclaimed
    assert "len(runtimeStatus" not in reclaimed
    cleanup = (tmp_path / "pkg/kubelet/kubelet.go").read_text()
    assert "kl.statusManager.GetPodStatus(podID)" in cleanup and "generateAPIPodStatus" not in cleanup
    worker = (tmp_path / "pkg/kubelet/prober/worker.go").read_text()
    assert "if probeTickerPeriod > time.Since(w.probeManager.start) {" in worker
    assert "case <-w.manualTriggerCh:" in worker and "func (w *worker) runningInStatus() bool {" in worker
    manager = (tmp_path / "pkg/kubelet/prober/prober_manager.go").read_text()
    assert "case w.manualTriggerCh <- struct{}{}:" in manager and "start:            time.Now()," in manager
    status = (tmp_path / "pkg/kubelet/status/status_manager.go").read_text()
    assert "deletableTicker := time.Tick(time.Second)" in status
    assert "case <-deletableTicker:\n\t\t\t\tm.syncDeletable()\n\t\t\tcase <-syncTicker:" in status
    assert "func (m *manager) syncDeletable() {" in status and "m.canBeDeleted(pod, status.status)" in status
    assert kubebuild.fix_tag("kubelet")


def test_whether_the_cache_carries_the_current_fixes_is_read_from_the_manifest(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert kubebuild.fixes_current(cache)
    doc = json.loads((cache / "manifest.json").read_text())
    del doc["fixes"]["kube-apiserver"]
    (cache / "manifest.json").write_text(json.dumps(doc))
    assert not kubebuild.fixes_current(cache)
    (cache / "manifest.json").unlink()
    assert not kubebuild.fixes_current(cache)
