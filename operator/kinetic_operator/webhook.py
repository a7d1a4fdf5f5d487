"""The admission webhook's HTTPS server: Kopf's, with a certificate made by `cryptography`.

Kopf serves the webhook and keeps the ValidatingWebhookConfiguration
(`WEBHOOK_CONFIG`) pointing at it, with the server's self-signed certificate
as the CA bundle, so no cert-manager or Secret is needed. Kopf's own
self-signing needs `certbuilder`; we already depend on `cryptography`, so
only the certificate-building step is replaced. A new certificate is made at
every start, and Kopf re-patches the configuration with it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Collection
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf

from kinetic_operator.settings import OperatorSettings

# Name of the ValidatingWebhookConfiguration Kopf creates and patches (RBAC names it too).
WEBHOOK_CONFIG = "kinetic.dev"
CERT_DAYS = 3650


class WebhookServer(kopf.WebhookServer):
    """Kopf's webhook server, reached through a Service when one is named.

    The self-signed certificate is built differently; with ``service`` set
    ("namespace/name"), the configuration names that Service (and the
    listening port) instead of a URL: an API server resolves no cluster DNS,
    but it finds a Service's endpoints.
    """

    def __init__(self, *args: Any, service: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.service = service

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for config in super().__call__(fn):
            yield service_client_config(config, self.service, self.port)

    @staticmethod
    def build_certificate(
        hostnames: Collection[str], password: str | None = None
    ) -> tuple[bytes, bytes]:
        return self_signed_certificate(hostnames, password)


def self_signed_certificate(
    hostnames: Collection[str], password: str | None = None
) -> tuple[bytes, bytes]:
    """(certificate, key) as PEM; every hostname a SAN, the first DNS name the CN."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    sans: list[x509.GeneralName] = []
    names: list[str] = []
    for host in dict.fromkeys(h for h in hostnames if h):
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            sans.append(x509.DNSName(host))
            names.append(host)
        else:
            if not ip.is_unspecified:
                sans.append(x509.IPAddress(ip))
                names.append(str(ip))
    if not sans:
        raise ValueError(f"no usable host name for the webhook certificate among {hostnames}")
    dns = [n for n in names if not _is_ip(n)]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns or names)[0][:64])])
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def service_client_config(
    config: dict[str, Any], service: str | None, port: int | None
) -> dict[str, Any]:
    """Kopf's URL client config -> one naming the Service (same CA bundle), if one is given."""
    if not service:
        return config
    namespace, _, name = service.partition("/")
    if not namespace or not name:
        raise ValueError(f"KINETIC_WEBHOOK_SERVICE={service!r}: expected namespace/name")
    out: dict[str, Any] = {"service": {"namespace": namespace, "name": name, "path": ""}}
    if port:
        out["service"]["port"] = port
    if config.get("caBundle"):
        out["caBundle"] = config["caBundle"]
    return out


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def configure_admission(settings: kopf.OperatorSettings, ours: OperatorSettings) -> None:
    """Serve the webhook and let Kopf manage its configuration, if enabled."""
    if not ours.webhook_enabled:
        return
    settings.admission.server = WebhookServer(
        addr=ours.webhook_addr or None,
        port=ours.webhook_port,
        host=ours.webhook_host or None,
        service=ours.webhook_service or None,
    )
    settings.admission.managed = WEBHOOK_CONFIG
