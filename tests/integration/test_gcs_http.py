"""kinetic.storage.gcs_http's credentials on the real fake-gcs-server.

fake-gcs-server takes any request, so what a Pod on GKE sends is observed
on the way: storage calls pass through a recording relay to the real
emulator, and the access token comes from a stand-in for the GKE metadata
server (the local cluster has none). The storage contract itself runs in
test_storage.py against both backends.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kinetic import storage
from kinetic.storage.gcs_http import LeanGcs, MetadataToken

pytestmark = pytest.mark.integration


@dataclass
class Seen:
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    token_status: int = 200
    tokens_issued: int = 0


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def metadata() -> Iterator[tuple[str, Seen]]:
    """A metadata server that hands out tokens tok-1, tok-2, ... valid for an hour."""
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.requests.append(("GET", self.path, dict(self.headers)))
            if self.headers.get("Metadata-Flavor") != "Google" or seen.token_status != 200:
                self.send_response(seen.token_status if seen.token_status != 200 else 403)
                self.end_headers()
                return
            seen.tokens_issued += 1
            body = json.dumps({"access_token": f"tok-{seen.tokens_issued}", "expires_in": 3600})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server, host = serve(Handler)
    yield host, seen
    server.shutdown()


@pytest.fixture
def relay(gcs_server: str) -> Iterator[tuple[str, Seen]]:
    """A recording relay to the real fake-gcs-server."""
    seen = Seen()
    target = urllib.parse.urlsplit(gcs_server if "://" in gcs_server else f"http://{gcs_server}")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            seen.requests.append((self.command, self.path, dict(self.headers)))
            conn = http.client.HTTPConnection(target.netloc, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            conn.request(self.command, self.path, body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = do_DELETE = relay

        def log_message(self, *args: Any) -> None:
            pass

    server, host = serve(Handler)
    yield f"http://{host}", seen
    server.shutdown()


def test_a_pod_on_gke_sends_the_metadata_servers_token_and_fetches_it_once(
    gcs_bucket: str,
    metadata: tuple[str, Seen],
    relay: tuple[str, Seen],
) -> None:
    (meta_host, meta_seen), (endpoint, relay_seen) = metadata, relay
    lean = LeanGcs(endpoint, MetadataToken(meta_host))
    uri = f"{gcs_bucket}/gke/{uuid.uuid4().hex[:8]}/result.pkl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(storage._BACKENDS, "gs", lean)
        gen = storage.write_if_generation(uri, b"value", 0)
        assert storage.read_if_exists(uri) == (b"value", gen)
        assert storage.list_prefix(uri) == [uri]
        assert storage.delete(uri)
    assert meta_seen.tokens_issued == 1
    assert [r[2].get("Metadata-Flavor") for r in meta_seen.requests] == ["Google"]
    assert len(relay_seen.requests) == 4
    assert {r[2].get("Authorization") for r in relay_seen.requests} == {"Bearer tok-1"}


def test_a_token_is_fetched_again_a_minute_before_it_expires(
    gcs_bucket: str,
    metadata: tuple[str, Seen],
    relay: tuple[str, Seen],
) -> None:
    (meta_host, meta_seen), (endpoint, relay_seen) = metadata, relay
    now = [1000.0]
    lean = LeanGcs(endpoint, MetadataToken(meta_host, clock=lambda: now[0]))
    uri = f"{gcs_bucket}/gke/{uuid.uuid4().hex[:8]}/x"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(storage._BACKENDS, "gs", lean)
        storage.write_bytes(uri, b"1")
        now[0] += 3600 - 61
        storage.write_bytes(uri, b"2")
        now[0] += 2
        storage.write_bytes(uri, b"3")
    assert meta_seen.tokens_issued == 2
    assert [r[2].get("Authorization") for r in relay_seen.requests] == [
        "Bearer tok-1",
        "Bearer tok-1",
        "Bearer tok-2",
    ]


def test_without_a_metadata_server_a_pod_takes_the_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Off GKE (no metadata server, no key file, no emulator), the first gs:// call picks
    google-cloud-storage, which knows every form of Application Default Credentials."""
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{closed_port()}")
    monkeypatch.setitem(storage._BACKENDS, "gs", storage._LeanOnFirstUse())
    chosen = storage._BACKENDS["gs"].resolve()  # type: ignore[union-attr]
    assert isinstance(chosen, storage._GcsBackend)
    assert storage._BACKENDS["gs"] is chosen


def test_with_a_metadata_server_a_pod_takes_the_lean_client_and_keeps_its_token(
    monkeypatch: pytest.MonkeyPatch, metadata: tuple[str, Seen]
) -> None:
    meta_host, meta_seen = metadata
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("GCE_METADATA_HOST", meta_host)
    monkeypatch.setitem(storage._BACKENDS, "gs", storage._LeanOnFirstUse())
    chosen = storage._BACKENDS["gs"].resolve()  # type: ignore[union-attr]
    assert isinstance(chosen, LeanGcs)
    assert chosen.endpoint == "https://storage.googleapis.com"
    assert meta_seen.tokens_issued == 1  # asked once to choose, and kept for the calls after
    assert chosen.auth.headers(chosen.connections) == {"Authorization": "Bearer tok-1"}
    assert meta_seen.tokens_issued == 1


def test_a_metadata_server_that_refuses_a_token_names_the_fix(
    gcs_bucket: str,
    metadata: tuple[str, Seen],
) -> None:
    meta_host, meta_seen = metadata
    meta_seen.token_status = 404
    lean = LeanGcs("https://storage.invalid", MetadataToken(meta_host))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(storage._BACKENDS, "gs", lean)
        with pytest.raises(storage.StoragePermissionError) as info:
            storage.read_bytes(f"{gcs_bucket}/x")
    assert f"the metadata server at {meta_host} gave no access token (404" in str(info.value)
    assert "Workload Identity" in str(info.value)


def closed_port() -> int:
    """A local port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
