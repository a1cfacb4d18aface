"""Kubernetes binaries built from Debian's own `kubernetes` source package, cached per version.

Debian 12 ships only kubectl as a binary, but its source package carries the whole tree with vendor/,
and Debian's Go builds it (about 7 minutes on 2 cores, kubemark included). The result is cached under
`<cache>/kubernetes/<source version>-go<go version>/` with a manifest of checksums, so the build happens
once per machine and a corrupted cache is detected (and rebuilt) instead of run.

The 1.20 tree vendors modern-go/reflect2 1.0.1, which crashes ("fatal error: fault" in
UnsafeMapType.UnsafeIterate) when built with Go 1.18 or later: json-iterator then takes the API
server down on any pretty-printed response. Debian packages the fixed versions; their source replaces
the vendored copies before the build, and the packages' versions are part of the cache key.

One build runs at a time per cache (a file lock); the work directory of a build that was killed is
removed by the next one. A cache made before a binary was added to the list (`ADDED_BINARIES`:
kubemark, for hollow nodes) is completed by building only that binary into it: the binaries a running
cluster uses stay in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sro.console.progress import Progress
from sro.local.layout import ADDED_BINARIES, KUBE_BINARIES, KUBERNETES_SOURCE_PACKAGE, Layout


class BuildError(RuntimeError):
    pass


def _run(
    argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, log: Path | None = None
) -> str:
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if log is not None:
        with log.open("a") as f:
            f.write(f"$ {' '.join(argv)}\n{out.stdout}{out.stderr}\n")
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise BuildError(f"`{' '.join(argv)}` failed (exit {out.returncode}):\n{tail}")
    return out.stdout


def source_version() -> str:
    """The version of Debian's kubernetes source package (needs deb-src lines; see scripts/setup-host)."""
    out = subprocess.run(["apt-cache", "showsrc", KUBERNETES_SOURCE_PACKAGE], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise BuildError(
        "apt knows no source package 'kubernetes': add deb-src lines and update "
        "(run `./scripts/setup-host`, which derives them from /etc/apt/sources.list.d)"
    )


def go_version() -> str:
    if shutil.which("go") is None:
        raise BuildError("Go is missing: apt-get install golang-go (or run ./scripts/setup-host)")
    return _run(["go", "env", "GOVERSION"]).strip()


# Vendored Go modules of the 1.20 tree that break under Go >= 1.18, and the Debian package whose
# source (under /usr/share/gocode/src/<import path>) replaces each before the build.
VENDOR_FIXES: tuple[tuple[str, str], ...] = (
    ("github.com/modern-go/reflect2", "golang-github-modern-go-reflect2-dev"),  # 1.0.2: Go 1.18 maps
    ("github.com/json-iterator/go", "golang-github-json-iterator-go-dev"),  # 1.1.12: uses reflect2 1.0.2
)
GOCODE = Path("/usr/share/gocode/src")


def _package_version(package: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise BuildError(
            f"the Debian package {package} is missing (its source replaces a vendored module that "
            f"crashes under Go >= 1.18): apt-get install {package} (or run ./scripts/setup-host)"
        )
    return out.stdout.strip()


# Source fixes of our own, each (file, text, replacement, why); their tag is recorded per binary in
# the manifest, so a cached binary built without a fix is rebuilt on its own.
SOURCE_FIXES: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "kubelet": (
        (
            # kubernetes#28748, fixed upstream in 1.22 (`crierror.IsNotFound`): a container that
            # exits on SIGTERM is removed at once by the kubelet's own clean-up of a deleted pod
            # (the PLEG's ContainerDied), so the stop still in flight gets NotFound from containerd,
            # the pod's kill counts as failed and waits for the next full sync (up to a minute)
            # before the pod object goes: every DaemonSet pod deleted, every namespace, every
            # uninstall waited for it here, where a current kubelet does not
            "pkg/kubelet/kuberuntime/kuberuntime_container.go",
            "\terr := m.runtimeService.StopContainer(containerID.ID, gracePeriod)\n\tif err != nil {\n",
            "\terr := m.runtimeService.StopContainer(containerID.ID, gracePeriod)\n"
            '\tif err != nil && grpcstatus.Code(err).String() == "NotFound" {\n'
            "\t\terr = nil // already removed once it exited: it is stopped\n"
            "\t}\n"
            "\tif err != nil {\n",
            "a container already gone counts as stopped, as upstream kubelets since 1.22 take it",
        ),
        (
            # The same clean-up removes a deleted pod's containers before the pod's kill has stopped
            # its sandbox, so the ContainerRemoved event that removes a stopped sandbox finds it still
            # READY and leaves it to the container GC, once a minute; 1.20 keeps the pod object until
            # its sandboxes are gone from the runtime: a DaemonSet pod deleted, and so every
            # SpecialResource's teardown and every uninstall, waited 30-60 s for it here. Kubelets
            # since 1.22 (the pod lifecycle rework) ask only that nothing of the pod runs; a stopped
            # sandbox holds nothing (its network is torn down) and the GC still removes it
            "pkg/kubelet/kubelet_pods.go",
            "\t// pod's sandboxes should be deleted\n"
            "\tif len(runtimeStatus.SandboxStatuses) > 0 {\n"
            "\t\tvar sandboxStr string\n"
            "\t\tfor _, sandbox := range runtimeStatus.SandboxStatuses {\n"
            '\t\t\tsandboxStr += fmt.Sprintf("%+v ", *sandbox)\n'
            "\t\t}\n",
            "\t// pod's sandboxes should be stopped (sro: the GC removes them later)\n"
            "\tvar sandboxStr string\n"
            "\tfor _, sandbox := range runtimeStatus.SandboxStatuses {\n"
            "\t\tif sandbox.State == runtimeapi.PodSandboxState_SANDBOX_READY {\n"
            '\t\t\tsandboxStr += fmt.Sprintf("%+v ", *sandbox)\n'
            "\t\t}\n"
            "\t}\n"
            '\tif sandboxStr != "" {\n',
            "a deleted pod goes once its sandbox is stopped, not removed, as upstream kubelets since 1.22",
        ),
        (
            # Its containers likewise: 1.20 keeps the pod object until they are removed, so the PLEG's
            # clean-up removes a deleted pod's exited containers at once — before the status manager
            # has their exit codes, and the pod's last status said "ContainerStatusUnknown ... 137"
            # for a container that had exited 0. Since 1.22 an exited container is enough (the GC
            # removes it later): the pod goes with its containers' real exit codes
            "pkg/kubelet/kubelet_pods.go",
            "\tif len(runtimeStatus.ContainerStatuses) > 0 {\n"
            "\t\tvar statusStr string\n"
            "\t\tfor _, status := range runtimeStatus.ContainerStatuses {\n"
            '\t\t\tstatusStr += fmt.Sprintf("%+v ", *status)\n'
            "\t\t}\n",
            "\tvar statusStr string\n"
            "\tfor _, status := range runtimeStatus.ContainerStatuses {\n"
            "\t\tif status.State != kubecontainer.ContainerStateExited && "
            "status.State != kubecontainer.ContainerStateCreated {\n"
            '\t\t\tstatusStr += fmt.Sprintf("%+v ", *status)\n'
            "\t\t}\n"
            "\t}\n"
            '\tif statusStr != "" {\n',
            "a deleted pod goes once its containers have exited, not been removed, as since 1.22",
        ),
        (
            # ... and that clean-up waits for the status the kubelet recorded (exit codes and all) to
            # say nothing runs, instead of a status generated on the spot from the runtime's view
            "pkg/kubelet/kubelet.go",
            "\t\t\tapiPodStatus := kl.generateAPIPodStatus(syncedPod, podStatus)\n"
            "\t\t\t// When an evicted or deleted pod has already synced, all containers can be removed.\n"
            "\t\t\tremoveAll = eviction.PodIsEvicted(syncedPod.Status) || "
            "(syncedPod.DeletionTimestamp != nil && notRunning(apiPodStatus.ContainerStatuses))\n",
            "\t\t\tapiPodStatus, recorded := kl.statusManager.GetPodStatus(podID)\n"
            "\t\t\t// sro: removed only once the recorded status has every container's end\n"
            "\t\t\tremoveAll = eviction.PodIsEvicted(syncedPod.Status) || "
            "(syncedPod.DeletionTimestamp != nil && recorded && notRunning(apiPodStatus.ContainerStatuses))\n",
            "a deleted pod's containers are removed after their exit codes are recorded",
        ),
        # kubernetes#96731, fixed upstream in 1.21 (#97126): every probe worker slept a random part
        # of its period before its first probe, meant for the burst after a kubelet restart but done
        # for every new container too, and a container that started between two ticks waited for the
        # next one: a pod with a 2 s readiness probe turned Ready 0-2 s (at random) after its ready
        # file, every DaemonSet state and every plain stage of the operator bench alike. Upstream
        # since: the jitter only within one period of the kubelet's start, and a readiness probe
        # run at once when the status shows its container running without a result yet
        (
            "pkg/kubelet/prober/prober_manager.go",
            '\t"sync"\n\n',
            '\t"sync"\n\t"time"\n\n',
            "probes: the manager knows when the kubelet started (1/9)",
        ),
        (
            "pkg/kubelet/prober/prober_manager.go",
            "\tprober *prober\n}\n",
            "\tprober *prober\n\n\t// when this kubelet started (sro: first probes jitter only within a period of it)\n"
            "\tstart time.Time\n}\n",
            "probes: the manager knows when the kubelet started (2/9)",
        ),
        (
            "pkg/kubelet/prober/prober_manager.go",
            "\t\tworkers:          make(map[probeKey]*worker),\n",
            "\t\tworkers:          make(map[probeKey]*worker),\n\t\tstart:            time.Now(),\n",
            "probes: the manager knows when the kubelet started (3/9)",
        ),
        (
            "pkg/kubelet/prober/prober_manager.go",
            "\t\t\t\t_, exists := m.getWorker(podUID, c.Name, readiness)\n\t\t\t\tready = !exists\n",
            "\t\t\t\tw, exists := m.getWorker(podUID, c.Name, readiness)\n\t\t\t\tready = !exists\n"
            "\t\t\t\tif exists { // sro: probe it now, as upstream since 1.21\n"
            "\t\t\t\t\tselect {\n\t\t\t\t\tcase w.manualTriggerCh <- struct{}{}:\n"
            "\t\t\t\t\tdefault: // one is pending already\n\t\t\t\t\t}\n\t\t\t\t}\n",
            "probes: a running container without a readiness result is probed at once (4/9)",
        ),
        (
            "pkg/kubelet/prober/worker.go",
            "\tstopCh chan struct{}\n",
            "\tstopCh chan struct{}\n\n\t// Channel for a probe now (sro: as upstream since 1.21)\n\tmanualTriggerCh chan struct{}\n",
            "probes: a worker can be asked for a probe now (5/9)",
        ),
        (
            "pkg/kubelet/prober/worker.go",
            "\t\tstopCh:       make(chan struct{}, 1), // Buffer so stop() can be non-blocking.\n",
            "\t\tstopCh:       make(chan struct{}, 1), // Buffer so stop() can be non-blocking.\n"
            "\t\tmanualTriggerCh: make(chan struct{}, 1),\n",
            "probes: a worker can be asked for a probe now (6/9)",
        ),
        (
            "pkg/kubelet/prober/worker.go",
            "\ttime.Sleep(time.Duration(rand.Float64() * float64(probeTickerPeriod)))\n",
            "\tif probeTickerPeriod > time.Since(w.probeManager.start) { // sro: only after a restart\n"
            "\t\ttime.Sleep(time.Duration(rand.Float64() * float64(probeTickerPeriod)))\n\t}\n",
            "probes: the first probe jitters only just after the kubelet started (7/9)",
        ),
        (
            "pkg/kubelet/prober/worker.go",
            "\t\tcase <-probeTicker.C:\n",
            "\t\tcase <-probeTicker.C:\n\t\tcase <-w.manualTriggerCh:\n"
            # the trigger is sent while the kubelet generates the status that shows the container
            # running, a moment before the status manager holds it (which the probe reads): without
            # this wait the probe mostly found it not running yet, and waited a period after all
            "\t\t\tfor i := 0; i < 40 && !w.runningInStatus(); i++ { // sro: at most 2 s\n"
            "\t\t\t\ttime.Sleep(50 * time.Millisecond)\n\t\t\t}\n",
            "probes: the worker takes a probe asked for now (8/9)",
        ),
        (
            "pkg/kubelet/prober/worker.go",
            "func (w *worker) doProbe() (keepGoing bool) {\n",
            "// sro: whether the status manager shows the container running (what doProbe needs to probe)\n"
            "func (w *worker) runningInStatus() bool {\n"
            "\tstatus, ok := w.probeManager.statusManager.GetPodStatus(w.pod.UID)\n"
            "\tif !ok {\n\t\treturn false\n\t}\n"
            "\tc, ok := podutil.GetContainerStatus(status.ContainerStatuses, w.container.Name)\n"
            "\treturn ok && c.State.Running != nil\n}\n\n"
            "func (w *worker) doProbe() (keepGoing bool) {\n",
            "probes: a worker can tell that its container runs (9/9)",
        ),
        # A deleted pod's object goes (the status manager's delete) only when a sync finds its
        # resources reclaimed. Its last status (containers exited) usually comes before the volume
        # manager has unmounted its volumes, and nothing syncs it again until the status manager's
        # 10 s batch: a deleted DaemonSet pod, an evicted workload, a SpecialResource's teardown, an
        # uninstall or a drain each waited 0-10 s (at random) for it here. Kubelets since 1.22 (the
        # pod lifecycle rework: syncTerminatedPod waits for the unmount, then TerminatePod forces a
        # sync) delete it as soon as the volumes are gone; here a pod being deleted is looked at
        # every second until it can go
        (
            "pkg/kubelet/status/status_manager.go",
            "\tsyncTicker := time.Tick(syncPeriod)\n",
            "\tsyncTicker := time.Tick(syncPeriod)\n"
            "\t// sro: a deleted pod goes within a second of its resources being reclaimed (as since 1.22)\n"
            "\tdeletableTicker := time.Tick(time.Second)\n",
            "deleted pods: a second ticker (1/3)",
        ),
        (
            "pkg/kubelet/status/status_manager.go",
            "\t\t\tcase <-syncTicker:\n",
            "\t\t\tcase <-deletableTicker:\n\t\t\t\tm.syncDeletable()\n\t\t\tcase <-syncTicker:\n",
            "deleted pods: looked at every second (2/3)",
        ),
        (
            "pkg/kubelet/status/status_manager.go",
            "// syncBatch syncs pods statuses with the apiserver.\n",
            "// syncDeletable syncs (and so deletes) the pods being deleted whose resources are reclaimed\n"
            "// (sro: what kubelets since 1.22 do at once when a terminated pod's volumes are unmounted).\n"
            "func (m *manager) syncDeletable() {\n"
            "\tvar deletable []podStatusSyncRequest\n"
            "\tfunc() {\n"
            "\t\tm.podStatusesLock.RLock()\n"
            "\t\tdefer m.podStatusesLock.RUnlock()\n"
            "\t\tfor uid, status := range m.podStatuses {\n"
            "\t\t\tif pod, ok := m.podManager.GetPodByUID(uid); ok && m.canBeDeleted(pod, status.status) {\n"
            "\t\t\t\tdeletable = append(deletable, podStatusSyncRequest{uid, status})\n"
            "\t\t\t}\n"
            "\t\t}\n"
            "\t}()\n"
            "\tfor _, update := range deletable {\n"
            "\t\tm.syncPod(update.podUID, update.status)\n"
            "\t}\n"
            "}\n\n"
            "// syncBatch syncs pods statuses with the apiserver.\n",
            "deleted pods: the pods a sync would delete, synced (3/3)",
        ),
    ),
    "kube-apiserver": (
        (
            # kubernetes#99804, fixed upstream in 1.21 by kube-openapi#230: built with Go >= 1.16,
            # reflect.Zero shares one zero value, so this DeepEqual of two reflect.Values became true
            # for every zero value and the validator took "" (or 0, false) for null: a custom resource
            # with an empty string where its schema says string was refused ("must be of type
            # string: null"), which real clusters accept
            "vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go",
            "\tif data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {\n",
            "\tif data == nil {\n",
            "custom resources accept zero values (empty strings) as upstream does",
        ),
    ),
    "kubemark": (
        (
            "pkg/kubemark/hollow_kubelet.go",
            "HostUtil:             hostutil.NewFakeHostUtil(nil),",
            "HostUtil:             hostutil.NewHostUtil(),",
            # the fake one says no path exists, so a pod with a hostPath volume of type Directory,
            # File, Socket or CharDevice (every node agent's) never leaves ContainerCreating; the
            # real one reads the hollow node's view of this machine (its own /tmp aside)
            "hostPath type checks against the machine's filesystem",
        ),
        (
            # the hollow kubelet asks this in-process fake directly (not over the fake CRI socket)
            "staging/src/k8s.io/cri-api/pkg/apis/testing/fake_image_service.go",
            "\treturn r.Images[image.Image], nil\n",
            "\tif _, ok := r.Images[image.Image]; !ok {\n"
            "\t\treturn r.makeFakeImage(image), nil\n"
            "\t}\n"
            "\treturn r.Images[image.Image], nil\n",
            # the fake runtime runs every container but has no images, so a pod whose pull policy is
            # Never (every localhost/ image here, sro's own included) fails ErrImageNeverPull: every
            # image is present, as on a node whose images were preloaded
            "every image present (pull policy Never works)",
        ),
    ),
}


def fix_tag(binary: str) -> str:
    fixes = SOURCE_FIXES.get(binary, ())
    return hashlib.sha256(repr(fixes).encode()).hexdigest()[:8] if fixes else ""


def apply_source_fixes(src: Path, names: tuple[str, ...]) -> list[str]:
    """Apply SOURCE_FIXES of the binaries being built; returns what was done."""
    done = []
    for name in names:
        for rel, old, new, why in SOURCE_FIXES.get(name, ()):
            path = src / rel
            text = path.read_text()
            if text.count(old) != 1:
                raise BuildError(f"{rel}: cannot apply the {name} fix ({why}): the source changed")
            path.write_text(text.replace(old, new))
            done.append(f"{name}: {why} ({rel})")
    return done


def vendor_fix_tag() -> str:
    """A short digest of the replacement packages' versions: a new version means a new cache."""
    versions = ",".join(f"{pkg}={_package_version(pkg)}" for _, pkg in VENDOR_FIXES)
    return hashlib.sha256(versions.encode()).hexdigest()[:8]


def cache_key() -> str:
    return f"{source_version()}-{go_version()}-vendorfix-{vendor_fix_tag()}".replace("/", "_")


def replace_vendored(
    src: Path, gocode: Path = GOCODE, fixes: tuple[tuple[str, str], ...] = VENDOR_FIXES
) -> list[str]:
    """Put the Debian packages' sources in place of the broken vendored modules; returns what changed.

    Only the package's non-test sources (.go, assembly) travel, as `go mod vendor` would copy them;
    the vendored LICENSE stays when the package ships none (Debian keeps it in its copyright file).
    """
    done = []
    for import_path, package in fixes:
        fixed = gocode / import_path
        if not fixed.is_dir():
            raise BuildError(f"{fixed} is missing: apt-get install {package} (or run ./scripts/setup-host)")
        target = src / "vendor" / import_path
        if not target.is_dir():
            raise BuildError(f"the source tree has no vendor/{import_path} to replace")
        license = target / "LICENSE"
        license_text = license.read_bytes() if license.is_file() else None
        shutil.rmtree(target)
        target.mkdir(parents=True)
        for f in fixed.iterdir():
            if f.is_file() and (f.name == "LICENSE" or f.suffix in (".go", ".s")) and "_test." not in f.name:
                shutil.copy2(f, target / f.name)
        if license_text is not None and not license.exists():
            license.write_bytes(license_text)
        done.append(f"{import_path} <- {package} {_package_version(package)}")
    return done


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(cache_dir: Path, names: tuple[str, ...] = KUBE_BINARIES, fixes: bool = True) -> str | None:
    """None when the cache is complete and intact (for `names`), else what is wrong with it; with
    `fixes`, a binary built without the current source fixes is wrong too."""
    manifest = cache_dir / "manifest.json"
    if not manifest.exists():
        return "no manifest"
    try:
        doc = json.loads(manifest.read_text())
        sums = doc["sha256"]
    except (ValueError, KeyError) as e:
        return f"manifest unreadable: {e}"
    built_with = doc.get("fixes", {})
    for name in (*names, "pause.c"):
        path = cache_dir / ("bin" if name != "pause.c" else "src") / name
        if not path.exists():
            return f"{path} missing"
        if _sha256(path) != sums.get(name):
            return f"{path} corrupted (checksum differs from the manifest)"
        if fixes and built_with.get(name, "") != fix_tag(name):
            return f"{path} built without the current source fixes"
    return None


def fixes_current(cache_dir: Path) -> bool:
    """Whether every binary of the cache was built with the current source fixes: the manifest
    alone, no checksums (cheap enough for every `sro local up` of a running cluster; `verify`
    hashes the binaries when a build is considered)."""
    try:
        built_with = json.loads((cache_dir / "manifest.json").read_text()).get("fixes", {})
    except (OSError, ValueError, AttributeError):
        return False
    return all(built_with.get(name, "") == fix_tag(name) for name in KUBE_BINARIES)


def to_build_alone(cache_dir: Path) -> tuple[str, ...]:
    """The binaries an otherwise intact cache must have built on their own: added ones it lacks (or
    holds broken), and any built without the current source fixes (a new fix rebuilds only its
    binary). Empty when the cache is complete, or broken in a way only a whole rebuild mends."""
    core = tuple(b for b in KUBE_BINARIES if b not in ADDED_BINARIES)
    if verify(cache_dir, core, fixes=False) is not None:
        return ()
    return tuple(b for b in KUBE_BINARIES if verify(cache_dir, (b,)) is not None)


def ensure_kubernetes(layout: Layout, progress: Progress) -> Path:
    """The directory holding the Kubernetes binaries, building them first if the cache lacks them."""
    key = cache_key()
    cache_dir = layout.kube_cache(key)
    if verify(cache_dir) is None:
        return cache_dir / "bin"
    with _build_lock(cache_dir.parent, progress):
        problem = verify(cache_dir)  # another `up` may have built it while we waited
        if problem is None:
            return cache_dir / "bin"
        added = to_build_alone(cache_dir)
        if added:
            progress(
                f"Kubernetes cache {cache_dir} needs {', '.join(added)} built (missing, or without the current source fixes); building only that"
            )
            build_into(cache_dir, added, progress)
            return cache_dir / "bin"
        if cache_dir.exists():
            progress(f"Kubernetes cache {cache_dir} is unusable ({problem}); rebuilding")
            shutil.rmtree(cache_dir)
        build(cache_dir, progress)
    return cache_dir / "bin"


@contextlib.contextmanager
def _build_lock(cache_root: Path, progress: Progress) -> Iterator[None]:
    """One build at a time per cache: a second `up` waits instead of building the same tree again."""
    cache_root.mkdir(parents=True, exist_ok=True)
    with (cache_root / ".build.lock").open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"Another Kubernetes build is running in {cache_root}; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield  # the lock goes with the file's close


def remove_stale_builds(cache_root: Path) -> list[Path]:
    """Work directories of builds that were killed (their temp dir outlives them); call under the lock."""
    stale = sorted(p for p in cache_root.glob("build-*") if p.is_dir())
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


def _compile(work: Path, names: tuple[str, ...], log: Path, progress: Progress, about: str) -> Path:
    """Fetch, unpack, fix and build `names` in `work`; returns the unpacked source tree."""
    progress("Downloading Debian's kubernetes source package")
    _run(["apt-get", "source", "--download-only", KUBERNETES_SOURCE_PACKAGE], cwd=work, log=log)
    dsc = next(work.glob("*.dsc"))
    progress("Unpacking the source")
    _run(["dpkg-source", "--no-check", "-x", str(dsc), "src"], cwd=work, log=log)
    src = work / "src"
    for line in replace_vendored(src):
        progress(f"Vendored {line}")
    for line in apply_source_fixes(src, names):
        progress(f"Fixed {line}")
    # GOPATH mode, as Debian's own rules build it.
    gopath = src / ".go"
    (gopath / "src" / "k8s.io").mkdir(parents=True)
    (gopath / "src" / "k8s.io" / "kubernetes").symlink_to("../../..")
    env = dict(os.environ, GOPATH=str(gopath), CGO_ENABLED="0", GO111MODULE="off", GOFLAGS="-mod=vendor")
    env["GOCACHE"] = str(work / "gocache")
    progress(f"Building {', '.join(names)} with Go ({about} on 2 cores; log: {log})")
    what = " ".join(f"cmd/{b}" for b in names)
    _run(["make", f"WHAT={what}"], cwd=gopath / "src" / "k8s.io" / "kubernetes", env=env, log=log)
    return src


def _built(src: Path) -> Path:
    return src / "_output" / "local" / "bin" / "linux" / "amd64"


def build(cache_dir: Path, progress: Progress) -> None:
    """Build into a temp dir next to the cache and move the result in; the caller holds the lock."""
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    for p in remove_stale_builds(cache_dir.parent):
        progress(f"Removed {p}, left by a build that did not finish")
    log = cache_dir.parent / "build.log"
    log.write_text("")
    with tempfile.TemporaryDirectory(dir=cache_dir.parent, prefix="build-") as tmp:
        work = Path(tmp)
        src = _compile(work, KUBE_BINARIES, log, progress, "about 7 minutes")
        out = _built(src)
        staging = work / "result"
        (staging / "bin").mkdir(parents=True)
        (staging / "src").mkdir()
        for name in KUBE_BINARIES:
            shutil.copy2(out / name, staging / "bin" / name)
        shutil.copy2(src / "build" / "pause" / "linux" / "pause.c", staging / "src" / "pause.c")
        sums = {name: _sha256(staging / "bin" / name) for name in KUBE_BINARIES}
        sums["pause.c"] = _sha256(staging / "src" / "pause.c")
        fixes = {name: fix_tag(name) for name in KUBE_BINARIES if fix_tag(name)}
        (staging / "manifest.json").write_text(json.dumps({"sha256": sums, "fixes": fixes}, indent=1))
        staging.rename(cache_dir)  # atomic: a crash mid-build leaves no half cache behind
    progress(f"Kubernetes binaries cached in {cache_dir}")


def build_into(cache_dir: Path, names: tuple[str, ...], progress: Progress) -> None:
    """Build only `names` and add them to an intact cache; the caller holds the lock.

    Each binary lands under a temporary name and is renamed into place, and the manifest is replaced
    last (atomically), so a crash leaves the cache as it was or complete, never half-listed."""
    for p in remove_stale_builds(cache_dir.parent):
        progress(f"Removed {p}, left by a build that did not finish")
    log = cache_dir.parent / "build.log"
    with log.open("a") as f:
        f.write(f"==== adding {', '.join(names)} to {cache_dir}\n")
    with tempfile.TemporaryDirectory(dir=cache_dir.parent, prefix="build-") as tmp:
        out = _built(_compile(Path(tmp), names, log, progress, "about 3 minutes"))
        manifest = cache_dir / "manifest.json"
        doc = json.loads(manifest.read_text())
        sums, fixes = doc["sha256"], doc.get("fixes", {})
        for name in names:
            part = cache_dir / "bin" / f".{name}.part"
            shutil.copy2(out / name, part)
            sums[name] = _sha256(part)
            fixes[name] = fix_tag(name)
            part.rename(cache_dir / "bin" / name)
        tmp_manifest = cache_dir / ".manifest.json.part"
        tmp_manifest.write_text(json.dumps({"sha256": sums, "fixes": fixes}, indent=1))
        tmp_manifest.rename(manifest)
    progress(f"Added {', '.join(names)} to {cache_dir}")
