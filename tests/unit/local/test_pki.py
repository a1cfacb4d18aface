"""Certificates: every identity signed by our CA with the names RBAC and TLS expect; idempotent."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sro.local.pki import cert_specs, ensure_pki

SPECS = cert_specs("node-a", "10.1.2.3", "10.96.0.1")


def _load(pki: Path, name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate((pki / f"{name}.crt").read_bytes())


def test_every_certificate_is_signed_by_the_ca(tmp_path: Path) -> None:
    ensure_pki(tmp_path, SPECS)
    ca = _load(tmp_path, "ca")
    ca_key = ca.public_key()
    assert isinstance(ca_key, ec.EllipticCurvePublicKey)
    for spec in SPECS:
        cert = _load(tmp_path, spec.name)
        assert cert.issuer == ca.subject
        ca_key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))  # type: ignore[arg-type]
        assert (tmp_path / f"{spec.name}.key").stat().st_mode & 0o077 == 0, "private keys must be private"


def test_identities_follow_kubernetes_conventions(tmp_path: Path) -> None:
    ensure_pki(tmp_path, SPECS)
    admin = _load(tmp_path, "admin").subject
    assert admin.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    kubelet = _load(tmp_path, "kubelet-client").subject
    assert kubelet.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:node-a"
    assert kubelet.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"


def test_apiserver_certificate_covers_service_ip_and_node_ip(tmp_path: Path) -> None:
    ensure_pki(tmp_path, SPECS)
    san = _load(tmp_path, "apiserver").extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = set(san.get_values_for_type(x509.IPAddress))
    assert {ipaddress.ip_address("10.96.0.1"), ipaddress.ip_address("10.1.2.3")} <= ips
    assert "kubernetes.default.svc" in san.get_values_for_type(x509.DNSName)


def test_second_run_keeps_everything_and_a_new_node_ip_reissues_only_what_names_it(tmp_path: Path) -> None:
    assert "ca" in ensure_pki(tmp_path, SPECS)
    before = (tmp_path / "ca.crt").read_bytes()
    assert ensure_pki(tmp_path, SPECS) == []
    remade = ensure_pki(tmp_path, cert_specs("node-a", "10.9.9.9", "10.96.0.1"))
    assert sorted(remade) == ["apiserver", "kubelet"]
    assert (tmp_path / "ca.crt").read_bytes() == before


def test_corrupted_certificate_is_reissued(tmp_path: Path) -> None:
    ensure_pki(tmp_path, SPECS)
    (tmp_path / "admin.crt").write_text("garbage")
    assert ensure_pki(tmp_path, SPECS) == ["admin"]
