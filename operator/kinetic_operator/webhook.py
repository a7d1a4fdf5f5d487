"""The admission webhook's HTTPS server, and the configuration that points the API server at it.

Kopf serves the webhook; this module adds four things to its server:

* the self-signed certificate is built with `cryptography` (Kopf's own
  self-signing needs `certbuilder`), a new one at every start;
* the ValidatingWebhookConfiguration ``kinetic.dev`` — shipped by the Helm
  chart, empty — is patched with our webhooks, where to reach this server
  and its certificate as the CA bundle. In a cluster that is the chart's
  Service (``KINETIC_WEBHOOK_SERVICE``, "namespace/name"): an API server
  resolves no cluster DNS names, but it finds a Service's endpoints.
  Elsewhere (an operator run by hand) it is this server's URL. Kopf's own
  "managed" mode is not used: it would also create a
  MutatingWebhookConfiguration, and it needs permission to create
  configurations, which the operator is not given; patching the one named
  configuration is all it may do;
* each review goes through `reviews.serve_review`: bounded in size (a review
  declaring more than ``KINETIC_WEBHOOK_MAX_REVIEW_BYTES`` is denied by name,
  unread), in number (the `review_gate.ReviewGate`: a few at once, the rest
  wait briefly, then are denied as busy), decoded once off the event loop by
  the depth-bounded `deepjson.loads_bounded`. A review too large or too many
  is denied, never answered with an error: the API server, with
  failurePolicy Ignore, takes an error as "admit";
* optionally, clients must present a certificate signed by a CA given to the
  operator (``KINETIC_WEBHOOK_CLIENT_CAFILE``; the chart's ``webhook.clientCA``),
  and name one of ``KINETIC_WEBHOOK_CLIENT_NAMES``: an API server configured
  with an AdmissionConfiguration's kubeConfigFile presents one, and no Pod
  that can reach the port can judge-bomb it. Only that CA is trusted for
  clients (Kopf's default context would also trust the system's public CAs).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import logging
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import aiohttp.web
import kopf
from kinetic.model.resources import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION

from kinetic_operator.review_gate import ReviewGate, gate_limits
from kinetic_operator.reviews import serve_review
from kinetic_operator.settings import OperatorSettings

if TYPE_CHECKING:
    from kinetic_operator.kube import Kube

log = logging.getLogger("kinetic.operator")

# Name of the ValidatingWebhookConfiguration the chart ships and the operator patches.
WEBHOOK_CONFIG = "kinetic.dev"
CERT_DAYS = 3650
TIMEOUT_SECONDS = 10


Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


@dataclass(frozen=True)
class Hook:
    """One validating webhook: a Kopf handler id and the resource it judges."""

    id: str
    plural: str
    operations: tuple[Operation, ...] = ("CREATE", "UPDATE")


JOB_HOOK = Hook("kinetic-job-spec", JOB_PLURAL)
BATCH_HOOK = Hook("kinetic-batch-spec", BATCH_PLURAL)
HOOKS = (JOB_HOOK, BATCH_HOOK)


def webhook_entries(
    client_config: dict[str, Any],
    hooks: Collection[Hook] = HOOKS,
    *,
    service: str | None = None,
    port: int | None = None,
) -> list[dict]:
    """The configuration's ``webhooks``: one per hook, at ``/<id>``, failing open.

    Each is reached through ``service`` ("namespace/name", on ``port``) when
    one is named, else at Kopf's URL. Fail open (failurePolicy Ignore): with
    the operator down, objects are still admitted and the operator applies
    the same checks when it returns. sideEffects None: the API server also
    asks about dry runs.
    """
    entries = []
    for hook in hooks:
        config = _client_config(client_config, hook, service, port)
        entries.append(
            {
                "name": f"{hook.id}.{WEBHOOK_CONFIG}",
                "clientConfig": config,
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "resources": [hook.plural],
                        "operations": list(hook.operations),
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": "Ignore",
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": TIMEOUT_SECONDS,
                "admissionReviewVersions": ["v1", "v1beta1"],
            }
        )
    return entries


def _client_config(
    kopf_config: dict[str, Any], hook: Hook, service: str | None, port: int | None
) -> dict[str, Any]:
    """Where the API server sends ``hook``'s reviews, and the CA it trusts there."""
    config: dict[str, Any]
    if service:
        namespace, _, name = service.partition("/")
        if not namespace or not name:
            raise ValueError(f"KINETIC_WEBHOOK_SERVICE={service!r}: expected namespace/name")
        config = {"service": {"namespace": namespace, "name": name, "path": f"/{hook.id}"}}
        if port:
            config["service"]["port"] = port
    else:
        config = {"url": f"{str(kopf_config.get('url', '')).rstrip('/')}/{hook.id}"}
    if kopf_config.get("caBundle"):
        config["caBundle"] = kopf_config["caBundle"]
    return config


def publish_webhooks(
    kube: Callable[[], Kube],
    client_config: dict[str, Any],
    service: str | None = None,
    port: int | None = None,
) -> bool:
    """Point the chart's ValidatingWebhookConfiguration at this server; False if it could not.

    A failure is logged, never fatal: the operator still applies every
    check to what it reconciles, so a missing configuration only means
    bad objects are refused later (FAILED) instead of at admission. That
    includes failing to reach the API at all, which is why ``kube`` is
    asked for the operator's API wrapper only here, inside the ``try``.
    """
    try:
        entries = webhook_entries(client_config, service=service, port=port)
        kube().patch_webhook_configuration(WEBHOOK_CONFIG, entries)
    except Exception as exc:  # noqa: BLE001 — logged; the operator-side checks remain
        log.error(
            "Could not patch ValidatingWebhookConfiguration %s (install it with the Helm chart; "
            "the operator may only patch it): %s. Bad objects will be failed by the operator "
            "instead of refused at admission.",
            WEBHOOK_CONFIG,
            exc,
        )
        return False
    log.info(
        "ValidatingWebhookConfiguration %s points at %s",
        WEBHOOK_CONFIG,
        f"Service {service}" if service else client_config.get("url"),
    )
    return True


class WebhookServer(kopf.WebhookServer):
    """Kopf's webhook server, with our certificate, configuration and bounded reviews.

    ``service`` ("namespace/name") names the Service the API server reaches
    it through; without one, the configuration carries Kopf's URL. With
    ``publish`` False (the chart ships the configuration and the certificate)
    nothing is patched: the server only serves. ``kube`` gives the operator's
    API wrapper (the one in Kopf's memo) when the configuration is patched.
    ``gate`` and ``max_review_bytes`` bound the reviews in flight and each
    review's size; ``client_names``, when given, the client certificates taken.
    """

    def __init__(
        self,
        *args: Any,
        kube: Callable[[], Kube],
        gate: ReviewGate,
        max_review_bytes: int,
        service: str | None = None,
        publish: bool = True,
        client_names: Collection[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.kube = kube
        self.service = service
        self.publish = publish
        self.gate = gate
        self.max_review_bytes = max_review_bytes
        self.client_names = tuple(client_names)
        self.decoders = ThreadPoolExecutor(
            max_workers=gate.limits.reviews, thread_name_prefix="kinetic-review"
        )

    @staticmethod
    def build_certificate(
        hostnames: Collection[str], password: str | None = None
    ) -> tuple[bytes, bytes]:
        return self_signed_certificate(hostnames, password)

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        """Kopf's serving loop (`kopf.WebhookServer.__call__`: serve, hand Kopf the client
        configuration, serve anew when the certificate files change), on a listening socket
        of our own (`listening_socket`) so that its receive buffer is bounded."""

        async def serve(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
            return await self._serve(fn, request)

        while True:
            cadata, context = self._build_ssl()
            app = aiohttp.web.Application()
            app.add_routes([aiohttp.web.post("/{id:.*}", serve)])
            runner = aiohttp.web.AppRunner(
                app, handle_signals=False, shutdown_timeout=SHUTDOWN_SECONDS
            )
            await runner.setup()
            try:
                port = self.port or self._allocate_free_port()
                sock = listening_socket(self.addr, port)
                await aiohttp.web.SockSite(runner, sock, ssl_context=context).start()
                host = self.host or self._get_accessible_addr(self.addr)
                client_config = kopf.WebhookClientConfig(
                    url=self._build_url("https", host, port, "")
                )
                if cadata is not None:
                    client_config["caBundle"] = base64.b64encode(cadata).decode("ascii")
                if self.publish:
                    await asyncio.to_thread(
                        publish_webhooks, self.kube, dict(client_config), self.service, port
                    )
                yield client_config
                await files_changed([self.certfile, self.pkeyfile], self.file_check_interval)
                log.info("The webhook's certificate files changed: serving them.")
            finally:
                await runner.cleanup()

    async def _serve(  # type: ignore[override]  # Kopf's is static; ours needs the gate
        self, fn: Any, request: aiohttp.web.Request
    ) -> aiohttp.web.StreamResponse:
        """One review, bounded in size, number and decoding (`reviews.serve_review`)."""
        return await serve_review(
            fn,
            request,
            gate=self.gate,
            limit=self.max_review_bytes,
            decoders=self.decoders,
            client_names=self.client_names,
        )


# How long a stopping server waits for the requests in flight: as long as a stopping
# replica keeps answering (`elected.DRAIN_SECONDS`). aiohttp's default, 60 s, is past the
# Pod's grace period (30 s), so clients that never finish could keep it up until killed.
SHUTDOWN_SECONDS = 5.0

# What one connection may have in flight towards the webhook before it reads it: Linux
# otherwise grows a socket's receive buffer up to 6 MiB, so a client POSTing a large body
# could park that much kernel memory per connection, and the kernel's work on it was done
# inside the event loop's own network calls. 256 KiB still carries the largest review in
# a few round trips.
RECEIVE_BUFFER_BYTES = 256 << 10


def listening_socket(addr: str | None, port: int) -> socket.socket:
    """The webhook's listening socket on ``addr`` (any address when empty), with the receive
    buffer every connection accepted on it inherits (`RECEIVE_BUFFER_BYTES`)."""
    host = addr or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


async def files_changed(paths: Collection[str | os.PathLike[str] | None], interval: float) -> None:
    """Return once the contents of ``paths`` differ from now (a Secret mounted as files
    changes no timestamp that could be watched, so they are read again every ``interval``)."""
    named = [p for p in paths if p]

    def digest() -> str:
        hasher = hashlib.sha256()
        for path in named:
            with open(path, "rb") as f:
                hasher.update(f.read())
        return hasher.hexdigest()

    first = await asyncio.to_thread(digest)
    while True:
        await asyncio.sleep(interval)
        if named and await asyncio.to_thread(digest) != first:
            return


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


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def client_auth_context(cafile: str | None) -> ssl.SSLContext | None:
    """The server's TLS context when clients must present a certificate signed by
    ``cafile``: that CA only (None without one: Kopf's default context, no client check).

    Kopf's default context is made for clients' use of the system's trust store,
    which would accept a client certificate from any public CA.
    """
    if not cafile:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cafile=cafile)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def configure_admission(
    settings: kopf.OperatorSettings, ours: OperatorSettings, kube: Callable[[], Kube]
) -> None:
    """Serve the webhook, if enabled. With the chart's certificate, that is all (the chart
    ships the configuration); without one, a self-signed certificate, and the server
    patches the configuration itself, through ``kube``. Kopf manages none either way."""
    if not ours.webhook_enabled:
        return
    shipped = bool(ours.webhook_certfile and ours.webhook_keyfile)
    limits = gate_limits(
        ours.webhook_max_review_bytes, ours.webhook_reviews, ours.webhook_wait_seconds
    )
    settings.admission.server = WebhookServer(
        addr=ours.webhook_addr or None,
        port=ours.webhook_port,
        host=ours.webhook_host or None,
        certfile=ours.webhook_certfile if shipped else None,
        pkeyfile=ours.webhook_keyfile if shipped else None,
        context=client_auth_context(ours.webhook_client_cafile),
        kube=kube,
        gate=ReviewGate(limits),
        max_review_bytes=ours.webhook_max_review_bytes,
        service=ours.webhook_service or None,
        publish=not shipped,
        client_names=ours.webhook_client_names,
    )
    settings.admission.managed = None
