"""The local cluster's certificates: one generated CA signs every serving and client certificate.

Identities follow Kubernetes' conventions (CN = user, O = groups), so RBAC treats each component as
it would on a kubeadm cluster: the admin is in system:masters, the kubelet is system:node:<name> in
system:nodes (NodeRestriction applies), and so on. Existing valid files are kept, so `up` is
idempotent and a restarted cluster keeps trusting the same CA.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class CertSpec:
    name: str  # file stem: <name>.crt / <name>.key
    common_name: str
    groups: tuple[str, ...] = ()
    server: bool = False
    client: bool = True
    dns_names: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()


def cert_specs(node_name: str, node_ip: str, service_ip: str) -> tuple[CertSpec, ...]:
    """Every certificate the cluster needs (pure)."""
    api_dns = (
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    )
    return (
        CertSpec(
            "apiserver",
            "kube-apiserver",
            server=True,
            client=False,
            dns_names=(*api_dns, "localhost", node_name),
            ips=("127.0.0.1", node_ip, service_ip),
        ),
        CertSpec("apiserver-kubelet-client", "kube-apiserver-kubelet-client", groups=("system:masters",)),
        CertSpec("admin", "sro-admin", groups=("system:masters",)),
        # client identity and the serving certificate of their /healthz, both from our CA
        CertSpec("controller-manager", "system:kube-controller-manager", server=True, ips=("127.0.0.1",)),
        CertSpec("scheduler", "system:kube-scheduler", server=True, ips=("127.0.0.1",)),
        CertSpec("kube-proxy", "system:kube-proxy", groups=("system:node-proxier",)),
        CertSpec("kubelet-client", f"system:node:{node_name}", groups=("system:nodes",)),
        CertSpec(
            "kubelet",
            f"system:node:{node_name}",
            server=True,
            client=False,
            dns_names=(node_name,),
            ips=(node_ip,),
        ),
        CertSpec("etcd", "etcd", server=True, client=True, dns_names=("localhost",), ips=("127.0.0.1",)),
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _load_ca(pki: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def _valid(path: Path, ca: x509.Certificate | None = None) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return False
    now = datetime.datetime.now(datetime.UTC)
    if not (cert.not_valid_before_utc <= now < cert.not_valid_after_utc - datetime.timedelta(days=1)):
        return False
    return ca is None or cert.issuer == ca.subject


def _make_ca(pki: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sro-local-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY * 5)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(pki / "ca.key", key)
    (pki / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _issue(pki: Path, spec: CertSpec, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in spec.groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, spec.common_name))
    usages = [
        u
        for u, on in (
            (ExtendedKeyUsageOID.SERVER_AUTH, spec.server),
            (ExtendedKeyUsageOID.CLIENT_AUTH, spec.client),
        )
        if on
    ]
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in spec.dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in spec.ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    _write_key(pki / f"{spec.name}.key", key)
    (pki / f"{spec.name}.crt").write_bytes(
        builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    )


def _san_matches(path: Path, spec: CertSpec) -> bool:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return not (spec.dns_names or spec.ips)
    have_ips = {str(i) for i in san.get_values_for_type(x509.IPAddress)}
    return set(spec.dns_names) <= set(san.get_values_for_type(x509.DNSName)) and set(spec.ips) <= have_ips


def ensure_pki(pki: Path, specs: tuple[CertSpec, ...]) -> list[str]:
    """Create the CA, the service-account key pair and every certificate that is missing, expiring,
    not signed by our CA, or lacks a needed address (the node IP may change). Returns what was made."""
    pki.mkdir(parents=True, exist_ok=True)
    made = []
    if not (_valid(pki / "ca.crt") and (pki / "ca.key").exists()):
        _make_ca(pki)
        made.append("ca")
    ca, ca_key = _load_ca(pki)
    for spec in specs:
        crt = pki / f"{spec.name}.crt"
        if _valid(crt, ca) and (pki / f"{spec.name}.key").exists() and _san_matches(crt, spec):
            continue
        _issue(pki, spec, ca, ca_key)
        made.append(spec.name)
    if not (pki / "sa.key").exists():
        sa = ec.generate_private_key(ec.SECP256R1())
        _write_key(pki / "sa.key", sa)
        (pki / "sa.pub").write_bytes(
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        made.append("service-account key")
    return made
