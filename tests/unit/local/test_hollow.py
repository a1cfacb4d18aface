"""Hollow nodes as data: the config file, each node's labels, port and probe address, the failure
rules and the rules server's answers, the capacity estimate, and the hollow kubelet's command line."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sro.api.names import STATE_NAMES
from sro.api.specparsing import parse_spec
from sro.local.hollow import hollow_argv
from sro.local.hollowconfig import (
    DEFAULT_CONFIG,
    HOLLOW_LABEL,
    PROBE_HOST,
    HollowConfigError,
    allocate_ports,
    answer,
    cert_spec,
    check_capacity,
    default_config,
    hosts_file,
    kubelet_may_set,
    node_index,
    parse_config,
    probe,
    probe_address,
    quantity_patch,
)
from sro.local.rulesserver import Rules, make_server

NFD = "feature.node.kubernetes.io/"


def test_the_default_config_gives_several_kernels_and_oses_as_nfd_labels() -> None:
    config = default_config()
    kernels = {config.node_labels(i)[f"{NFD}kernel-version.full"] for i in range(6)}
    oses = {config.node_labels(i)[f"{NFD}system-os_release.ID"] for i in range(6)}
    assert len(kernels) == 3 and oses == {"debian", "ubuntu"}
    labels = config.node_labels(2)
    assert labels[f"{NFD}kernel-version.major"] == "5" and labels[f"{NFD}kernel-version.minor"] == "15"
    assert labels[f"{NFD}system-os_release.VERSION_ID"] == "22.04"
    assert labels[f"{NFD}system-os_release.VERSION_ID.major"] == "22"
    assert labels[f"{NFD}system-os_release.VERSION_ID.minor"] == "04"
    assert labels[HOLLOW_LABEL] == "true"
    assert config.capacity == {"sro.dev/simulated-gpu": "8"}
    assert config.taints == ("sro.dev/hollow=true:NoExecute",)
    assert config.failures == ()
    assert config.node_name(4) == "hollow-4"


def test_failure_rules_name_nodes_by_name_or_pattern() -> None:
    config = parse_config(
        DEFAULT_CONFIG.replace(
            "failures: []",
            "failures:\n  - {node: hollow-2, state: driver}\n  - {node: 'hollow-1?', state: driver-validation}",
        )
    )
    assert config.fails("hollow-2", "driver") and not config.fails("hollow-2", "runtime")
    assert not config.fails("hollow-3", "driver")
    assert config.fails("hollow-12", "driver-validation") and not config.fails(
        "hollow-1", "driver-validation"
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("failures:\n  - {state: driver}\n", r"failures\[0\]\.node: a failure rule must name a node"),
        ("failures:\n  - {node: '', state: driver}\n", r"must name a node"),
        ("failures:\n  - {node: a, state: drivers}\n", r"failures\[0\]\.state: 'drivers' is not a state"),
        ("failures:\n  - {node: a, state: driver, when: later}\n", r"unknown field\(s\) when"),
        ("labels: {node-role.kubernetes.io/gpu: ''}\n", r"may not register labels under node-role"),
        ("labels: {a: {b: c}}\n", r"labels\.a: expected a string value"),
        ("taints: [gpu]\n", r"taints\[0\]: 'gpu' is not key\[=value\]:"),
        ("capacity: {gpu: '8'}\n", r"capacity\.gpu: an extended resource needs a domain"),
        ("capacity: {sro.dev/gpu: eight}\n", r"expected a whole number"),
        ("systems: []\n", r"systems: expected a non-empty list"),
        ("systems:\n  - {kernel: 6.1.0}\n", r"systems\[0\]\.osId: required"),
        ("namePrefix: Hollow_Nodes\n", r"namePrefix: 'Hollow_Nodes' must be a DNS label"),
        ("nodes: 3\n", r"unknown field\(s\) nodes"),
        ("[1, 2]\n", r"expected a mapping at the top"),
        ("a: [\n", r"not valid YAML"),
    ],
)
def test_bad_configs_are_refused_naming_the_field(text: str, error: str) -> None:
    with pytest.raises(HollowConfigError, match=error):
        parse_config(text)


def test_the_kubelets_own_label_rule() -> None:
    assert kubelet_may_set(f"{NFD}kernel-version.full")  # a subdomain of node.kubernetes.io
    assert kubelet_may_set("node.kubernetes.io/instance-type") and kubelet_may_set("sro.dev/hollow")
    assert not kubelet_may_set("node-role.kubernetes.io/worker")
    assert not kubelet_may_set("kubernetes.io/role") and not kubelet_may_set("example.k8s.io/x")


def test_probe_addresses_are_unique_loopback_addresses_and_invertible() -> None:
    addresses = [probe_address(i) for i in range(600)]
    assert len(set(addresses)) == 600 and all(a.startswith("127.77.") for a in addresses)
    assert [node_index(a) for a in addresses] == list(range(600))
    assert node_index("127.0.0.1") is None and node_index("127.77.0.0") is None
    assert node_index("10.77.0.1") is None and node_index("localhost") is None
    with pytest.raises(HollowConfigError):
        probe_address(-1)


def test_ports_skip_those_in_use_and_stay_below_the_ephemeral_range() -> None:
    assert allocate_ports(4, 12000, {12001, 12003}) == [12000, 12002, 12004, 12005]
    assert allocate_ports(0, 12000, set()) == []
    with pytest.raises(HollowConfigError, match="no 3 free ports"):
        allocate_ports(3, 32766, set())


def test_a_nodes_hosts_file_names_the_probe_host_once() -> None:
    base = "127.0.0.1 localhost\n127.77.0.9 sro-hollow-rules\n::1 localhost ip6-localhost\n"
    text = hosts_file(base, "127.77.0.3")
    assert text.count(PROBE_HOST) == 1 and f"127.77.0.3\t{PROBE_HOST}" in text
    assert "127.0.0.1 localhost" in text and "::1 localhost" in text


def test_too_many_hollow_nodes_are_refused_with_the_estimate() -> None:
    check_capacity(300, 0, cpus=2, mem_available_mib=22_000)
    with pytest.raises(HollowConfigError, match=r"301 hollow nodes will not fit.*at most 300 here"):
        check_capacity(301, 0, cpus=2, mem_available_mib=22_000)
    with pytest.raises(HollowConfigError, match=r"about 25 MiB.*at most 40 here.*benchmarks scale"):
        check_capacity(100, 0, cpus=2, mem_available_mib=3048)
    check_capacity(100, 90, cpus=2, mem_available_mib=2500)  # those running are already paid for


def test_capacity_is_a_json_patch_of_status_capacity() -> None:
    assert quantity_patch({"sro.dev/simulated-gpu": "8"}) == [
        {"op": "add", "path": "/status/capacity/sro.dev~1simulated-gpu", "value": "8"}
    ]


def test_the_rules_answer_per_node_and_state() -> None:
    config = parse_config(DEFAULT_CONFIG.replace("failures: []", "failures: [{node: hollow-1, state: driver}, {node: hollow-1, state: driver-validation}]"))  # fmt: skip
    assert answer(config, "hollow-0", "/healthy/driver")[0] == 200
    assert answer(config, "hollow-1", "/healthy/driver")[0] == 503
    # validation pods: 503 ends the container (done, Succeeded); a failing one keeps running into its deadline
    assert answer(config, "hollow-0", "/running/driver-validation")[0] == 503
    assert answer(config, "hollow-1", "/running/driver-validation")[0] == 200
    assert answer(config, None, "/healthy/driver")[0] == 403
    assert answer(config, "hollow-0", "/healthy/nothing")[0] == 404
    assert answer(config, "hollow-0", "/")[0] == 404


def test_probes_for_a_spec_are_accepted_by_it() -> None:
    spec: dict[str, object] = {"recipe": "simulated-gpu"}
    fields = {"driver": "driver", "driver-validation": "driverValidation", "runtime": "runtime"}
    for state, fld in fields.items():
        spec[fld] = probe(state, 10390)
    parsed = parse_spec("hollow", spec)
    assert parsed.state("driver").readiness_probe["httpGet"]["path"] == "/healthy/driver"
    assert parsed.state("driver").liveness_probe["failureThreshold"] == 1
    assert parsed.state("driver-validation").liveness_probe["httpGet"]["path"] == "/running/driver-validation"
    assert not parsed.state("driver-validation").readiness_probe


def test_hollow_kubelet_runs_in_its_own_mount_namespace_with_a_private_tmp() -> None:
    argv = hollow_argv(
        Path("/k/kubemark"),
        "hollow-3",
        Path("/c/kc"),
        12003,
        Path("/h/hosts"),
        {"b": "2", "a": "1"},
        ("sro.dev/hollow=true:NoSchedule",),
    )
    assert argv[:3] == ("/usr/bin/unshare", "--mount", "--propagation=private")
    script = argv[5]
    assert "mount -t tmpfs" in script and " /tmp " in script and '"$0" /etc/hosts' in script
    assert argv[6] == "/h/hosts" and argv[7] == "/k/kubemark"
    for flag in ("--morph=kubelet", "--name=hollow-3", "--kubelet-port=12003", "--kubelet-read-only-port=0"):
        assert flag in argv
    assert "--node-labels=a=1,b=2" in argv
    assert "--register-with-taints=sro.dev/hollow=true:NoSchedule" in argv


# ---- the rules server, in this process ----------------------------------------------------------
@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    path = tmp_path / "config.yaml"
    path.write_text(DEFAULT_CONFIG.replace("failures: []", "failures: [{node: hollow-1, state: runtime}]"))
    srv = make_server(Rules(path), 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1], path
    srv.shutdown()
    srv.server_close()


def _get(address: str, port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{address}:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_the_server_knows_the_node_by_the_address_the_probe_reached(server: tuple[int, Path]) -> None:
    port, path = server
    assert _get(probe_address(0), port, "/healthy/runtime") == 200
    assert _get(probe_address(1), port, "/healthy/runtime") == 503
    assert _get("127.0.0.1", port, "/healthy/runtime") == 403
    # a rule added while it runs is read at once; a broken edit keeps the last good rules
    doc = yaml.safe_load(path.read_text())
    doc["failures"] = [{"node": "hollow-0", "state": "runtime"}]
    path.write_text(yaml.safe_dump(doc))
    assert _get(probe_address(0), port, "/healthy/runtime") == 503
    assert _get(probe_address(1), port, "/healthy/runtime") == 200
    path.write_text("failures: [{state: runtime}]\n")
    assert _get(probe_address(0), port, "/healthy/runtime") == 503


def test_every_state_has_a_probe_path() -> None:
    config = default_config()
    for state in STATE_NAMES:
        assert answer(config, "hollow-0", f"/healthy/{state}")[0] == 200


def test_each_hollow_node_gets_a_node_certificate_from_the_cluster_ca(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    from sro.local.pki import ensure_pki

    ensure_pki(tmp_path, ())  # the cluster's CA
    ca = (tmp_path / "ca.crt").read_bytes()
    (tmp_path / "hollow").mkdir()
    made = ensure_pki(tmp_path, (cert_spec("hollow-0"), cert_spec("hollow-1")))
    assert made == ["hollow/hollow-0", "hollow/hollow-1"]
    assert (tmp_path / "ca.crt").read_bytes() == ca, "the CA is kept"
    cert = x509.load_pem_x509_certificate((tmp_path / "hollow" / "hollow-1.crt").read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:hollow-1"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert cert.issuer == x509.load_pem_x509_certificate(ca).subject
    assert ensure_pki(tmp_path, (cert_spec("hollow-0"),)) == []  # kept while valid
