"""The admission webhook's HTTPS server, and the configuration that points the API server at it.

Kopf serves the webhook; this module adds three things to its server:

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
* admission reviews are decoded with `deepjson.loads_bounded`, so an object
  nested thousands of levels deep is judged (and refused) instead of
  crashing the request, which would let it through (the webhook fails open);
* a review is read up to `MAX_REVIEW_BYTES`, above anything the API server
  sends for an object it can store (etcd takes 1.5 MiB per object, and an
  UPDATE carries the old object and the new one). aiohttp's own limit of
  1 MiB answered a larger review with an error, which the API server, with
  failurePolicy Ignore, took as "admit": an UPDATE of a 640 KB object
  slipped a forbidden image past the policy that way. A review larger still
  is denied by name (`oversized_denial`), never left to fail open.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

import aiohttp.web
import kopf
from kinetic.model.resources import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION

from kinetic_operator import deepjson
from kinetic_operator.settings import OperatorSettings

if TYPE_CHECKING:
    from kinetic_operator.kube import Kube

log = logging.getLogger("kinetic.operator")

# Name of the ValidatingWebhookConfiguration the chart ships and the operator patches.
WEBHOOK_CONFIG = "kinetic.dev"
CERT_DAYS = 3650
TIMEOUT_SECONDS = 10
# An UPDATE's review holds two objects of at most 1.5 MiB each (etcd's limit), plus
# the request's own fields: 8 MiB leaves room for all of it, and is the most one
# review costs the operator to hold.
MAX_REVIEW_BYTES = 8 << 20
_HEAD_BYTES = 64 * 1024  # where a review's uid is (the API server writes it first)
_REQUEST_UID = re.compile(rb'"request"\s*:\s*\{\s*"uid"\s*:\s*"([^"\\]{1,128})"')
_ANY_UID = re.compile(rb'"uid"\s*:\s*"([^"\\]{1,128})"')
_API_VERSION = re.compile(rb'"apiVersion"\s*:\s*"(admission\.k8s\.io/v1(?:beta1)?)"')


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
    """Kopf's webhook server, with our certificate, configuration and safe decoding.

    ``service`` ("namespace/name") names the Service the API server reaches
    it through; without one, the configuration carries Kopf's URL. With
    ``publish`` False (the chart ships the configuration and the certificate)
    nothing is patched: the server only serves. ``kube`` gives the operator's
    API wrapper (the one in Kopf's memo) when the configuration is patched.
    """

    def __init__(
        self,
        *args: Any,
        kube: Callable[[], Kube],
        service: str | None = None,
        publish: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.kube = kube
        self.service = service
        self.publish = publish

    @staticmethod
    def build_certificate(
        hostnames: Collection[str], password: str | None = None
    ) -> tuple[bytes, bytes]:
        return self_signed_certificate(hostnames, password)

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for client_config in super().__call__(fn):
            if self.publish:
                await asyncio.to_thread(
                    publish_webhooks, self.kube, dict(client_config), self.service, self.port
                )
            yield client_config

    @staticmethod
    async def _serve(fn: Any, request: aiohttp.web.Request) -> aiohttp.web.Response:
        """Kopf's request handling, on a body read up to `MAX_REVIEW_BYTES` and cut where
        it is nested too deep to handle; a larger body is denied."""
        body, size = await read_review(request, MAX_REVIEW_BYTES)
        if size > MAX_REVIEW_BYTES:
            denial = oversized_denial(body, size, MAX_REVIEW_BYTES)
            if denial is None:  # not a review the API server sent: nothing to answer
                raise aiohttp.web.HTTPRequestEntityTooLarge(MAX_REVIEW_BYTES, size)
            log.warning("Denied an admission review of %d bytes: too large to judge", size)
            return aiohttp.web.json_response(denial)
        doc = deepjson.loads_bounded(body.decode("utf-8", "replace"))
        decoded = cast(aiohttp.web.Request, _Decoded(request, json.dumps(doc)))
        return await kopf.WebhookServer._serve(fn, decoded)


async def read_review(request: aiohttp.web.Request, limit: int) -> tuple[bytes, int]:
    """The request's body if it holds at most ``limit`` bytes, else its head; and its size.

    Read from the stream, not through aiohttp's ``client_max_size``, whose
    error would fail the review open. The size of a body over the limit is
    its Content-Length when given (the rest is never read), else what was
    read before giving up: ``limit + 1`` or more.
    """
    declared = request.content_length
    if declared is not None and declared > limit:
        return await request.content.read(_HEAD_BYTES), declared
    pieces: list[bytes] = []
    size = 0
    while True:
        piece = await request.content.read(1 << 16)
        if not piece:
            return b"".join(pieces), size
        size += len(piece)
        if size > limit:
            return b"".join(pieces)[:_HEAD_BYTES] if pieces else piece[:_HEAD_BYTES], size
        pieces.append(piece)


def oversized_denial(head: bytes, size: int, limit: int) -> dict[str, Any] | None:
    """The AdmissionReview response denying a review too large to judge, or None when its
    uid cannot be found in ``head`` (without it the API server would not take the answer)."""
    found = _REQUEST_UID.search(head) or _ANY_UID.search(head)
    if found is None:
        return None
    version = _API_VERSION.search(head)
    message = (
        f"the admission review for this request is {size:,} bytes, more than the "
        f"{limit:,} the Kinetic webhook reads (etcd stores at most 1.5 MiB per object, and "
        "an update carries the old object and the new one), so it cannot be checked and is "
        "refused: make the object smaller, e.g. upload large inputs to storage "
        "(spec.inputs.count with uriPrefix) instead of listing them inline"
    )
    return {
        "apiVersion": version.group(1).decode() if version else "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": found.group(1).decode(),
            "allowed": False,
            "status": {"code": 413, "reason": "RequestEntityTooLarge", "message": message},
        },
    }


class _Decoded:
    """An aiohttp request whose body is replaced by a safely re-encoded one."""

    def __init__(self, request: aiohttp.web.Request, text: str) -> None:
        self._request, self._text = request, text

    async def text(self) -> str:
        return self._text

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


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


def configure_admission(
    settings: kopf.OperatorSettings, ours: OperatorSettings, kube: Callable[[], Kube]
) -> None:
    """Serve the webhook, if enabled. With the chart's certificate, that is all (the chart
    ships the configuration); without one, a self-signed certificate, and the server
    patches the configuration itself, through ``kube``. Kopf manages none either way."""
    if not ours.webhook_enabled:
        return
    shipped = bool(ours.webhook_certfile and ours.webhook_keyfile)
    settings.admission.server = WebhookServer(
        addr=ours.webhook_addr or None,
        port=ours.webhook_port,
        host=ours.webhook_host or None,
        certfile=ours.webhook_certfile if shipped else None,
        pkeyfile=ours.webhook_keyfile if shipped else None,
        kube=kube,
        service=ours.webhook_service or None,
        publish=not shipped,
    )
    settings.admission.managed = None
