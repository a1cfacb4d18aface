"""The operator benchmark reads the kubelet's wait to mount a pod's ConfigMaps and Secrets from the
kubelet's log: the first `MountVolume started` of a volume to its first `SetUp succeeded`, per pod,
ConfigMaps and Secrets only, across midnight, from where the log ended before the run."""

from __future__ import annotations

from pathlib import Path

from benchmarks.kubeletlog import log_end, mount_waits, pod_mount_waits

A = "d86d3ea8-4520-449f-aa4f-5b772923d200"
B = "9870a46e-ab26-4a1d-a906-631bd1d5a2cb"


def _line(when: str, what: str, plugin: str, uid: str, volume: str) -> str:
    where = (
        "reconciler.go:269] operationExecutor."
        if what == "MountVolume started"
        else "operation_generator.go:672] "
    )
    return (
        f'I1202 {when}   30283 {where}{what} for volume "{volume}" (UniqueName: '
        f'"kubernetes.io/{plugin}/{uid}-{volume}") pod "p" (UID: "{uid}")'
    )


LOG = [
    _line("00:31:43.815588", "MountVolume started", "configmap", A, "config"),
    _line("00:31:43.815655", "MountVolume.SetUp succeeded", "host-path", A, "dev"),
    "E1202 00:31:43.900000   30283 reflector.go:138] Failed to watch *v1.ConfigMap: forbidden",
    _line("00:31:44.306000", "MountVolume started", "configmap", A, "config"),  # a retry: the first counts
    _line("00:31:44.806809", "MountVolume.SetUp succeeded", "configmap", A, "config"),
    _line("23:59:59.900000", "MountVolume started", "secret", B, "token"),
    _line("00:00:00.100000", "MountVolume.SetUp succeeded", "secret", B, "token"),
    _line("00:00:00.200000", "MountVolume.SetUp succeeded", "secret", B, "token"),  # only the first
]


def test_a_lost_race_waits_from_the_first_start_to_the_first_success_and_host_paths_do_not_count() -> None:
    waits = mount_waits(LOG, [A, B, "other"])
    assert round(waits[A]["configmap/config"], 6) == 0.991221
    assert round(waits[B]["secret/token"], 6) == 0.2  # across midnight
    assert waits["other"] == {}


def test_only_what_the_run_wrote_is_read(tmp_path: Path) -> None:
    log = tmp_path / "kubelet.log"
    log.write_text("\n".join(LOG[:5]) + "\n")
    since = log_end(log)
    assert pod_mount_waits(log, 0, [A])[A] > 0.9
    with log.open("a") as f:
        f.write("\n".join(LOG[5:]) + "\n")
    later = pod_mount_waits(log, since, [A, B])
    assert later[A] == 0.0 and round(later[B], 6) == 0.2
    assert pod_mount_waits(tmp_path / "missing.log", 0, [A]) == {A: 0.0}
