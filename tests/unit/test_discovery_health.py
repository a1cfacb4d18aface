"""Discovery carries the device plugins' health reports into the NodeFeature: every pass, and
between passes within about a second of a report changing (without a rescan, unless a plugin came,
went or restarted: then its devices' labels are scanned again at once)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sro.devices import healthreport
from sro.devices.healthreport import DeviceFault, HealthReport
from sro.host.root import HostRoot
from sro.node.discovery.commands import ConfigLoader, Publishing, run_daemon
from sro.node.discovery.health import HealthWatch, health_dir, with_health
from sro.node.discovery.nodefeature import node_feature
from tests.unit.test_discovery_nodefeature import FakeNodeFeatures, Nodes, _host

pytestmark = pytest.mark.timeout(30)

REPORT = HealthReport(
    "simulated-gpu",
    "sro.dev/simulated-gpu",
    "n1",
    "boot-1",
    "2026-11-26T02:00:00Z",
    ("0", "1"),
    (DeviceFault("1", (79,), "simulated Xid 79"),),
    {"1": ("ml/train",)},
)


def test_with_health_merges_and_keeps_the_rest() -> None:
    doc = node_feature("n1", "ns", {}, {"a": "1"}, node_uid="u")
    merged = with_health(doc, [REPORT])
    assert merged["spec"]["labels"] == {"a": "1"} and merged["metadata"] == doc["metadata"]
    assert healthreport.reports_from_nodefeature(merged) == {"simulated-gpu": REPORT}
    assert "sro.dev/health" not in str(doc)  # the input is not changed
    assert with_health(doc, []) == doc


def test_watch_sees_a_changed_report(tmp_path: Path) -> None:
    host = HostRoot.at(tmp_path)
    d = health_dir(host)
    assert d == tmp_path / "var/lib/sro/health"
    watch = HealthWatch(d, poll=0.01)
    assert watch.reports() == [] and not watch.changed()
    stop = threading.Event()
    assert watch.wait(stop, 0.05) == "timeout"
    healthreport.write_report(d, REPORT)
    assert watch.changed() and watch.wait(stop, 5) == "changed"
    assert watch.reports() == [REPORT] and not watch.changed()
    stop.set()
    assert watch.wait(stop, None) == "stop"


@contextmanager
def running(host: HostRoot, api: FakeNodeFeatures) -> Iterator[None]:
    """The daemon on `host` for the block, its first pass published; a pass every 600 s, so none
    comes from the interval during a test, only from what the daemon watches. Stopped at the end."""
    stop = threading.Event()
    thread = threading.Thread(
        target=run_daemon,
        args=(host, ConfigLoader(None), "n1", lambda: Nodes()),
        kwargs={
            "oneshot": False,
            "stop": stop,
            "interval": 600.0,
            "publishing": Publishing(nodefeature_api=True, namespace="sro-system"),
            "nodefeature_factory": lambda: api,
        },
        daemon=True,
    )
    thread.start()
    try:
        wait_for(lambda: ("sro-system", "n1") in api.objects, 10)
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_oneshot_pass_publishes_the_reports(tmp_path: Path) -> None:
    host = _host(tmp_path)
    healthreport.write_report(health_dir(host), REPORT)
    (health_dir(host) / "broken.json").write_text("{not json")  # skipped, the rest published
    api = FakeNodeFeatures()
    rc = run_daemon(host, ConfigLoader(None), "n1", lambda: Nodes(), oneshot=True, stop=threading.Event(),
                    publishing=Publishing(nodefeature_api=True), nodefeature_factory=lambda: api)  # fmt: skip
    assert rc == 0
    doc = api.objects[("sro-system", "n1")]
    assert doc["spec"]["features"]["attributes"]["system.osrelease"]["elements"]["ID"] == "debian"
    assert healthreport.reports_from_nodefeature(doc) == {"simulated-gpu": REPORT}


def test_a_changed_report_is_republished_within_two_seconds(tmp_path: Path) -> None:
    host = _host(tmp_path)
    api = FakeNodeFeatures()
    with running(host, api):
        assert healthreport.reports_from_nodefeature(api.objects[("sro-system", "n1")]) == {}
        writes = api.writes
        t0 = time.monotonic()
        healthreport.write_report(health_dir(host), REPORT)
        while not healthreport.reports_from_nodefeature(api.objects[("sro-system", "n1")]):
            assert time.monotonic() - t0 < 2.5, "the report was not republished in time"
            time.sleep(0.02)
        assert api.writes == writes + 1
        doc = api.objects[("sro-system", "n1")]
        assert doc["spec"]["features"]["attributes"]["system.osrelease"]["elements"]["ID"] == "debian"
        # cleared: the fault leaves the NodeFeature the same way
        healed = HealthReport(**{**REPORT.__dict__, "faults": (), "updated": "2026-11-26T02:01:00Z"})
        healthreport.write_report(health_dir(host), healed)
        t0 = time.monotonic()
        while healthreport.reports_from_nodefeature(api.objects[("sro-system", "n1")])[
            "simulated-gpu"
        ].faults:
            assert time.monotonic() - t0 < 2.5
            time.sleep(0.02)


def _kernel(api: FakeNodeFeatures) -> str:
    """What the last pass read from proc/sys/kernel/osrelease: a file that tells whether a pass
    happened and, being under /proc, makes none itself when it changes (`inputs` watches none)."""
    doc = api.objects[("sro-system", "n1")]
    return str(doc["spec"]["features"]["attributes"]["kernel.version"]["elements"]["full"])


def _set_kernel(host: HostRoot, release: str) -> None:
    path = host.proc / "sys/kernel/osrelease"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(release + "\n")


def wait_for(check: Callable[[], bool], seconds: float = 2.5) -> None:
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < seconds, "not republished in time"
        time.sleep(0.02)


def test_a_plugin_that_starts_makes_a_rescan_a_changed_fault_does_not(tmp_path: Path) -> None:
    """The first report of a recipe means its devices just came up: the features are scanned again
    at once (the host changed here between the passes, and the NodeFeature shows it); a later change
    of the same recipe's report is carried with the features as they were."""
    host = _host(tmp_path)
    _set_kernel(host, "6.1.0")
    api = FakeNodeFeatures()
    with running(host, api):
        assert _kernel(api) == "6.1.0"
        _set_kernel(host, "6.8.0")
        healthreport.write_report(health_dir(host), REPORT)
        wait_for(lambda: bool(healthreport.reports_from_nodefeature(api.objects[("sro-system", "n1")])))
        assert _kernel(api) == "6.8.0"  # scanned again
        _set_kernel(host, "6.1.0")
        healed = HealthReport(**{**REPORT.__dict__, "faults": (), "updated": "2026-11-26T02:01:00Z"})
        healthreport.write_report(health_dir(host), healed)
        wait_for(lambda: not healthreport.reports_from_nodefeature(api.objects[("sro-system", "n1")])[
            "simulated-gpu"
        ].faults)  # fmt: skip
        assert _kernel(api) == "6.8.0"  # the same plugin's news: no rescan


def test_a_report_written_again_saying_the_same_is_a_restarted_plugin(tmp_path: Path) -> None:
    """A running plugin writes only what changed; one that starts writes at once, over the report its
    predecessor left when it stopped: the same words written again mean a plugin (re)started."""
    d = tmp_path / "health"
    watch = HealthWatch(d, poll=0.01)
    healthreport.write_report(d, REPORT)
    assert watch.reports() == [REPORT] and watch.restarted == frozenset()
    assert watch.reports() == [REPORT] and watch.restarted == frozenset()  # read again, not written
    again = HealthReport(**{**REPORT.__dict__, "updated": "2026-11-26T03:00:00Z"})
    healthreport.write_report(d, again)
    watch.reports()
    assert watch.restarted == {"simulated-gpu"}
    healed = HealthReport(**{**REPORT.__dict__, "faults": (), "updated": "2026-11-26T03:01:00Z"})
    healthreport.write_report(d, healed)
    watch.reports()
    assert watch.restarted == frozenset()  # news from the running plugin


def test_a_plugin_that_restarts_over_its_predecessors_report_makes_a_rescan(tmp_path: Path) -> None:
    """The report a stopped plugin left stays (a SpecialResource deleted and made again): the new
    plugin's first report, saying the same, still scans the features again at once."""
    host = _host(tmp_path)
    _set_kernel(host, "6.1.0")
    healthreport.write_report(health_dir(host), REPORT)  # left by the plugin before
    api = FakeNodeFeatures()
    with running(host, api):
        assert _kernel(api) == "6.1.0"
        _set_kernel(host, "6.8.0")
        healthreport.write_report(
            health_dir(host), HealthReport(**{**REPORT.__dict__, "updated": "2026-11-26T03:00:00Z"})
        )
        wait_for(lambda: _kernel(api) == "6.8.0")  # scanned again
