"""containerd in the local cluster: its version read from `containerd --version`, CDI asked for exactly
where the binary reads it (>= 1.7), a config both 1.6 and 1.7 accept, `up` restarting a containerd
that read another config, and setup-host's trixie apt source derived from the machine's own."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from sro.api.names import RUNTIME_LAUNCHER
from sro.local import containerdversion, supervisor
from sro.local.cluster import LocalCluster
from sro.local.components import CDI_SPEC_DIRS, NodeFacts, components, containerd_config
from sro.local.containerdversion import ContainerdVersion, parse
from sro.local.layout import PAUSE_IMAGE, RUNTIME_HANDLER, Layout

SETUP_HOST = Path(__file__).resolve().parents[3] / "scripts" / "setup-host"
CRI = "io.containerd.grpc.v1.cri"


def test_versions_of_debian_and_upstream_builds() -> None:
    bookworm = parse("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n")
    trixie = parse("containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1\n")
    upstream = parse(
        "containerd github.com/containerd/containerd v1.7.24 88bf19b2105c8b17560993bee28a01ddc2f97182"
    )
    assert bookworm == ContainerdVersion(1, 6, 20, "1.6.20~ds1") and not bookworm.reads_cdi
    assert trixie == ContainerdVersion(1, 7, 24, "1.7.24~ds1") and trixie.reads_cdi
    assert upstream is not None and (upstream.major, upstream.minor, upstream.patch) == (1, 7, 24)
    assert str(upstream) == "1.7.24" and upstream.reads_cdi
    two = parse("containerd containerd.io 2.0.0 207ad711eabd375a01713109a8a197d197ff6542")
    assert two is not None and two.reads_cdi
    assert parse("containerd github.com/containerd/containerd 1.7 x") == ContainerdVersion(1, 7, 0, "1.7")
    for junk in ("", "runc version 1.1.5", "containerd: command not found", "containerd x y"):
        assert parse(junk) is None, junk


def _fake_containerd(path: Path, version: str) -> None:
    path.write_text(f"#!/bin/sh\necho 'containerd github.com/containerd/containerd {version} {version}-1'\n")
    path.chmod(0o755)


def test_installed_asks_the_binary_again_once_it_is_replaced(tmp_path: Path) -> None:
    binary = tmp_path / "containerd"
    assert containerdversion.installed(binary) is None  # missing
    _fake_containerd(binary, "1.6.20~ds1")
    first = containerdversion.installed(binary)
    assert first is not None and str(first) == "1.6.20~ds1"
    # a package upgrade renames a new file over the old one: a new inode
    new = tmp_path / "containerd.dpkg-new"
    _fake_containerd(new, "1.7.24~ds1")
    new.rename(binary)
    second = containerdversion.installed(binary)
    assert second is not None and str(second) == "1.7.24~ds1" and second.reads_cdi
    binary.write_text("#!/bin/sh\nexit 3\n")  # a broken one says no version
    assert containerdversion.installed(binary) is None


def _cri(text: str) -> dict[str, Any]:
    doc = tomllib.loads(text)  # the hand-written TOML parses
    assert doc["version"] == 2  # 1.6 and 1.7 both read version 2
    cri: dict[str, Any] = doc["plugins"][CRI]
    return cri


def test_cdi_is_asked_for_only_where_containerd_reads_it(tmp_path: Path) -> None:
    layout = Layout(state=tmp_path)
    with_cdi, without = _cri(containerd_config(layout, cdi=True)), _cri(containerd_config(layout))
    assert with_cdi["enable_cdi"] is True
    assert with_cdi["cdi_spec_dirs"] == list(CDI_SPEC_DIRS) == ["/etc/cdi", "/var/run/cdi"]
    assert "enable_cdi" not in without and "cdi_spec_dirs" not in without
    for cri in (with_cdi, without):  # the rest is the same for both versions
        assert cri["sandbox_image"] == PAUSE_IMAGE and cri["restrict_oom_score_adj"] is True
        handler = cri["containerd"]["runtimes"][RUNTIME_HANDLER]  # the hook path stays
        assert handler["runtime_type"] == "io.containerd.runc.v2"
        assert handler["options"] == {"SystemdCgroup": False, "BinaryName": RUNTIME_LAUNCHER}
        # keys 1.7 deprecates (and 2.0 drops) are not used
        assert "systemd_cgroup" not in cri and "registry" not in cri
        assert all(
            "runtime_engine" not in r and "runtime_root" not in r
            for r in cri["containerd"]["runtimes"].values()
        )
    # components() passes the flag through to the file containerd is started with
    node = NodeFacts("node-a", "10.1.2.3")
    for cdi in (True, False):
        ctrd = next(c for c in components(layout, node, Path("/bin-dir"), cdi=cdi) if c.name == "containerd")
        assert ctrd.files[layout.config / "containerd.toml"] == containerd_config(layout, cdi)


@pytest.fixture
def running_containerd(tmp_path: Path) -> Any:
    layout = Layout(state=tmp_path / "state", containerd_state=tmp_path / "containerd")
    layout.run.mkdir(parents=True)
    proc = subprocess.Popen(["/bin/sleep", "60"])  # stands in for the running daemon
    layout.pidfile("containerd").write_text(f"{proc.pid} {supervisor._start_time(proc.pid)}\n")
    try:
        yield LocalCluster(layout, NodeFacts("node-a", "10.1.2.3"))
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("version", ["1.6.20~ds1", "1.7.24~ds1"])
def test_up_restarts_a_containerd_that_read_another_config(
    running_containerd: LocalCluster, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = running_containerd
    monkeypatch.setattr(containerdversion, "installed", lambda *a: parse(f"containerd x {version}"))
    conf = cluster.layout.config / "containerd.toml"
    conf.parent.mkdir(parents=True)
    cdi = version.startswith("1.7")
    conf.write_text(containerd_config(cluster.layout, cdi))  # what it was started with
    assert not cluster._containerd_reconfigured()
    # the binary was upgraded (or downgraded) since: the config `up` writes now asks for other things
    conf.write_text(containerd_config(cluster.layout, not cdi))
    assert cluster._containerd_reconfigured()
    conf.unlink()
    assert cluster._containerd_reconfigured()  # no record of what it read: start it on a known one
    cluster.layout.pidfile("containerd").unlink()
    assert not cluster._containerd_reconfigured()  # not running: `up` starts it on the new config anyway


def _trixie_source(tmp_path: Path, *texts: str) -> str:
    files = []
    for i, text in enumerate(texts):
        f = tmp_path / f"{i}.sources"
        f.write_text(text)
        files.append(str(f))
    out = subprocess.run(
        [str(SETUP_HOST), "--trixie-source", *files], capture_output=True, text=True, check=True
    )
    return out.stdout


MAIN = """Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
SECURITY = """Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def test_setup_host_derives_trixie_from_the_machines_own_bookworm_entry(tmp_path: Path) -> None:
    src = MAIN.replace("Types: deb", "Types: deb-src")
    disabled = MAIN.replace("mirror.example", "disabled.example") + "Enabled: no\n"
    out = _trixie_source(tmp_path, SECURITY + "\n" + src, disabled + "\n" + MAIN + "\n" + MAIN)
    body = [line for line in out.splitlines() if not line.startswith("#")]
    assert body == [
        "Types: deb",
        "URIs: http://mirror.example/debian",  # the same archive, never a name of ours
        "Suites: trixie",
        "Components: main",
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
    ]
    assert "snapshot" not in out  # comments are not copied
    # a snapshot archive's own option comes along (its Release files are past Valid-Until)
    snap = MAIN.replace("Components:", "Check-Valid-Until: no\nComponents:")
    assert "Check-Valid-Until: no" in _trixie_source(tmp_path, snap)
    assert _trixie_source(tmp_path, SECURITY, src) == ""  # no bookworm entry: nothing


def test_the_pin_lets_only_containerd_come_from_trixie() -> None:
    out = subprocess.run([str(SETUP_HOST), "--trixie-pin"], capture_output=True, text=True, check=True).stdout
    stanzas = [
        dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith("#"))
        for block in out.strip().split("\n\n")
    ]
    assert stanzas == [
        {"Package": "*", "Pin": "release n=trixie", "Pin-Priority": "50"},  # < 100: never on its own
        {"Package": "containerd", "Pin": "release n=trixie", "Pin-Priority": "500"},
    ]
    # the archive comes from the machine, never written in the script
    assert "URIs:" not in SETUP_HOST.read_text()
