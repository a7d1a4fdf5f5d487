"""A throw-away certificate authority for the local control plane.

Every component talks TLS and authenticates with client certificates signed by
this CA, as on a real cluster, so RBAC and the Node authorizer are exercised
for real.  Keys are EC P-256 (fast to generate: a cold start regenerates
nothing, a first start generates everything in well under a second), except
the service-account signing key, which is RSA because that is what every
Kubernetes version accepts for token signing.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=3650)


@dataclass(frozen=True)
class CertSpec:
    """One leaf certificate: file stem, subject CN, organizations, SANs, usage."""

    name: str
    cn: str
    orgs: tuple[str, ...] = ()
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    server: bool = False
    client: bool = False


def leaf_specs(node_name: str, node_ip: str, service_ip: str = "10.0.0.1") -> list[CertSpec]:
    """The certificates the local cluster needs (pure; unit-tested).

    The API server and the kubelet serve on the node's address, where pods and
    the API server reach them: it is in their certificates, because the API
    server checks the kubelet's (``--kubelet-certificate-authority``) and
    clients check the API server's.
    """
    api_dns = (
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    )
    return [
        CertSpec(
            "apiserver",
            "kube-apiserver",
            dns=api_dns,
            ips=("127.0.0.1", service_ip, node_ip),
            server=True,
        ),
        CertSpec(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            orgs=("system:masters",),
            client=True,
        ),
        CertSpec("admin", "kinetic-admin", orgs=("system:masters",), client=True),
        CertSpec("controller-manager", "system:kube-controller-manager", client=True),
        CertSpec("scheduler", "system:kube-scheduler", client=True),
        CertSpec("node", f"system:node:{node_name}", orgs=("system:nodes",), client=True),
        CertSpec(
            "node-serving",
            f"system:node:{node_name}",
            dns=("localhost", node_name),
            ips=("127.0.0.1", node_ip),
            server=True,
        ),
        # The user the default RBAC binds to system:node-proxier.
        CertSpec("kube-proxy", "system:kube-proxy", client=True),
        CertSpec(
            "controller-manager-serving",
            "kube-controller-manager",
            dns=("localhost",),
            ips=("127.0.0.1",),
            server=True,
        ),
        CertSpec(
            "scheduler-serving",
            "kube-scheduler",
            dns=("localhost",),
            ips=("127.0.0.1",),
            server=True,
        ),
    ]


def _write(path: Path, data: bytes, private: bool = False) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    if private:
        os.chmod(tmp, 0o600)
    tmp.replace(path)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


class PKI:
    """Files under ``<state>/pki``: ``ca.crt``, ``<name>.crt/.key``, ``sa.key/.pub``."""

    def __init__(self, directory: Path):
        self.dir = directory

    def crt(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def ca_crt(self) -> Path:
        return self.crt("ca")

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def complete(self, specs: list[CertSpec]) -> bool:
        files = [self.ca_crt, self.key("ca"), self.sa_key, self.sa_pub]
        for s in specs:
            files += [self.crt(s.name), self.key(s.name)]
        return all(f.exists() for f in files)

    def ensure(self, node_name: str, node_ip: str, service_ip: str = "10.0.0.1") -> bool:
        """Create whatever is missing or names other addresses. Returns True if the CA
        had to be (re)created.

        A new CA invalidates every leaf, so then all leaves are regenerated too.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        specs = leaf_specs(node_name, node_ip, service_ip)
        new_ca = not (self.ca_crt.exists() and self.key("ca").exists())
        if new_ca:
            self._make_ca()
        ca_key = serialization.load_pem_private_key(self.key("ca").read_bytes(), None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"{self.key('ca')}: not an EC or RSA key; delete {self.dir} to remake")
        ca_cert = x509.load_pem_x509_certificate(self.ca_crt.read_bytes())
        for spec in specs:
            if new_ca or not self._matches(spec):
                self._make_leaf(spec, ca_cert, ca_key)
        if new_ca or not (self.sa_key.exists() and self.sa_pub.exists()):
            sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            _write(self.sa_key, _key_pem(sa), private=True)
            _write(
                self.sa_pub,
                sa.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                ),
            )
        return new_ca

    def _matches(self, spec: CertSpec) -> bool:
        """The leaf exists and carries exactly the spec's addresses and names."""
        if not (self.crt(spec.name).exists() and self.key(spec.name).exists()):
            return False
        cert = x509.load_pem_x509_certificate(self.crt(spec.name).read_bytes())
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return not (spec.dns or spec.ips)
        ips = {str(i) for i in san.get_values_for_type(x509.IPAddress)}
        dns = set(san.get_values_for_type(x509.DNSName))
        return ips == set(spec.ips) and dns == set(spec.dns)

    def _make_ca(self) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        name = _name("kinetic-local-ca")
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        _write(self.key("ca"), _key_pem(key), private=True)
        _write(self.ca_crt, cert.public_bytes(serialization.Encoding.PEM))

    def _make_leaf(
        self,
        spec: CertSpec,
        ca_cert: x509.Certificate,
        ca_key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    ) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usages = []
        if spec.server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if spec.client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(spec.cn, spec.orgs))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    cast(ec.EllipticCurvePublicKey | rsa.RSAPublicKey, ca_cert.public_key())
                ),
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in spec.dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in spec.ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write(self.key(spec.name), _key_pem(key), private=True)
        _write(self.crt(spec.name), cert.public_bytes(serialization.Encoding.PEM))


def kubeconfig_yaml(server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    """A kubeconfig referring to the cert files by absolute path (no embedded secrets to rotate)."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: kinetic-local
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {user}
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: kinetic-local
  context:
    cluster: kinetic-local
    user: {user}
current-context: kinetic-local
"""
