"""The webhook server over real TLS: client certificates when required, the certificate files
watched, the listening socket's bounded receive buffer."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kinetic.model.limits import MAX_REVIEW_BYTES
from kinetic_operator.review_gate import ReviewGate, gate_limits
from kinetic_operator.webhook import (
    RECEIVE_BUFFER_BYTES,
    WebhookServer,
    client_auth_context,
    files_changed,
    listening_socket,
    self_signed_certificate,
)

REVIEW = {
    "kind": "AdmissionReview",
    "apiVersion": "admission.k8s.io/v1",
    "request": {
        "uid": "u-tls",
        "resource": {"group": "kinetic.dev", "version": "v1alpha1", "resource": "kineticjobs"},
        "userInfo": {"username": "kube-apiserver"},
        "operation": "CREATE",
        "object": {"kind": "KineticJob", "metadata": {"name": "j"}},
    },
}


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def authority(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def client_certificate(
    tmp: Path, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], name: str
) -> tuple[str, str]:
    """A client certificate for ``name`` signed by ``ca``: (certificate file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca[1], hashes.SHA256())
    )
    crt, pem = tmp / f"{name}.crt", tmp / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(_pem(key))
    return str(crt), str(pem)


@asynccontextmanager
async def serving(
    tmp: Path, client_ca: str | None = None, client_names: tuple[str, ...] = ()
) -> AsyncIterator[tuple[int, list[dict]]]:
    """Our webhook server on a free local port, with its certificate in files (so it
    publishes nothing), judging with a handler that admits everything it is given."""
    cert, key = self_signed_certificate(["127.0.0.1"])
    (tmp / "tls.crt").write_bytes(cert)
    (tmp / "tls.key").write_bytes(key)
    seen: list[dict] = []

    async def admit(data: dict, **_: Any) -> dict:
        seen.append(data)
        return {
            "apiVersion": data["apiVersion"],
            "kind": "AdmissionReview",
            "response": {"uid": data["request"]["uid"], "allowed": True},
        }

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = WebhookServer(
        addr="127.0.0.1",
        port=port,
        host="127.0.0.1",
        certfile=str(tmp / "tls.crt"),
        pkeyfile=str(tmp / "tls.key"),
        context=client_auth_context(client_ca),
        kube=lambda: pytest.fail("nothing is published"),  # type: ignore[arg-type,return-value]
        gate=ReviewGate(gate_limits(MAX_REVIEW_BYTES, reviews=2, wait_seconds=1)),
        max_review_bytes=MAX_REVIEW_BYTES,
        publish=False,
        client_names=client_names,
    )
    configs = server(admit)
    config = await configs.__anext__()
    assert config["url"] == f"https://127.0.0.1:{port}"
    try:
        yield port, seen
    finally:
        await configs.aclose()
        server.decoders.shutdown()


def post(port: int, cert: tuple[str, str] | None = None) -> tuple[int, str]:
    """POST the review from a client with ``cert`` (or none); (HTTP status, body)."""
    import http.client

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        conn.request("POST", "/kinetic-job-spec", body=json.dumps(REVIEW).encode())
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


@pytest.mark.asyncio
async def test_without_a_client_ca_any_client_is_served(tmp_path: Path) -> None:
    async with serving(tmp_path) as (port, seen):
        status, body = await asyncio.to_thread(post, port)
    assert status == 200 and json.loads(body)["response"]["allowed"] is True and len(seen) == 1


@pytest.mark.asyncio
async def test_with_a_client_ca_only_clients_it_signed_get_in(tmp_path: Path) -> None:
    ca, other = authority("webhook-clients"), authority("someone-else")
    (tmp_path / "ca.crt").write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    apiserver = client_certificate(tmp_path, ca, "kube-apiserver-webhooks")
    stranger = client_certificate(tmp_path, other, "kube-apiserver-webhooks-too")
    async with serving(tmp_path, client_ca=str(tmp_path / "ca.crt")) as (port, seen):
        status, _ = await asyncio.to_thread(post, port, apiserver)
        assert status == 200 and len(seen) == 1
        for cert in (None, stranger):  # no certificate, or one from another CA
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                await asyncio.to_thread(post, port, cert)
        assert len(seen) == 1  # neither was read, let alone judged


@pytest.mark.asyncio
async def test_with_client_names_the_certificate_must_claim_one(tmp_path: Path) -> None:
    ca = authority("webhook-clients")
    (tmp_path / "ca.crt").write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    apiserver = client_certificate(tmp_path, ca, "kube-apiserver-webhooks")
    kubelet = client_certificate(tmp_path, ca, "system:node:worker-1")  # same CA, other name
    names = ("kube-apiserver-webhooks",)
    async with serving(tmp_path, str(tmp_path / "ca.crt"), names) as (port, seen):
        assert (await asyncio.to_thread(post, port, apiserver))[0] == 200
        status, body = await asyncio.to_thread(post, port, kubelet)
    assert status == 403 and "system:node:worker-1" in body and len(seen) == 1


def test_a_client_ca_trusts_that_ca_only(tmp_path: Path) -> None:
    """Not the system's public CAs, which Kopf's default context would also trust."""
    ca = authority("webhook-clients")
    (tmp_path / "ca.crt").write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    context = client_auth_context(str(tmp_path / "ca.crt"))
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "webhook-clients"),),)
    ]
    assert client_auth_context(None) is None and client_auth_context("") is None


def test_the_listening_socket_bounds_what_a_connection_may_send_unread() -> None:
    sock = listening_socket("127.0.0.1", 0)
    try:
        # Linux doubles the value asked for (its bookkeeping), and never autotunes it after.
        got = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        assert RECEIVE_BUFFER_BYTES <= got <= 2 * RECEIVE_BUFFER_BYTES
    finally:
        sock.close()


@pytest.mark.asyncio
async def test_the_certificate_files_are_watched_for_a_change(tmp_path: Path) -> None:
    cert = tmp_path / "tls.crt"
    cert.write_text("one")
    watching = asyncio.create_task(files_changed([str(cert), None], 0.01))
    await asyncio.sleep(0.05)
    assert not watching.done()
    cert.write_text("two")
    await asyncio.wait_for(watching, timeout=5)
