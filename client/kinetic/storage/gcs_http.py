"""gs:// for pods: the calls Kinetic makes, over the GCS JSON API, with the standard library.

Why this exists: every function Pod reads its payload and writes its result
through `kinetic.storage`, and importing google-cloud-storage (with
google-auth, requests, urllib3, protobuf and cryptography behind it) costs
about 0.6 CPU-seconds before the first byte moves. On a busy node that is
most of what a short function's Pod costs: ``make bench`` measured a
300-input function batch at 12.9x a plain Job's wall time with the library
in every Pod. This module speaks only what the runner needs (download with
generation, a download read no further than a bound, stat, conditional
upload, delete, list) over ``http.client``, which costs a few hundredths of
a second to import.

It is used only where its credentials are simple and certain:

* ``STORAGE_EMULATOR_HOST`` set (fake-gcs-server, the local cluster):
  anonymous requests to that host, as google-cloud-storage does;
* otherwise, no ``GOOGLE_APPLICATION_CREDENTIALS``: an access token from the
  GKE/GCE metadata server (Workload Identity), cached until shortly before
  it expires.

Anything else (a key file, or no metadata server answering) is left to
google-cloud-storage, which knows every form of Application Default
Credentials: `lean_backend` returns None for a key file, and the backend
hands every call to the library once the metadata server proves absent.
The runner and the operator ask for this (`kinetic.storage.use_lean_gcs`):
the runner for its start-up, the operator because a write costs it about a
third of the library's CPU (1.5 against 5.4 ms for a write and a read,
measured against fake-gcs-server). The client keeps the library.

Semantics match the library backend in `kinetic.storage` call for call,
errors included (both take them from `kinetic.storage.base`);
tests/integration/test_storage.py runs the same contract against both on
the real fake-gcs-server.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from kinetic.storage.base import (
    NotFound,
    Parsed,
    PreconditionFailed,
    StorageError,
    StoragePermissionError,
    StorageUnavailable,
    bucket_missing,
    describe_error,
    permission_denied,
    precondition_message,
    request_failed,
    require_object_key,
    retry_timeout,
    says_bucket_missing,
    too_large,
    unavailable,
)

GCS_ENDPOINT = "https://storage.googleapis.com"
METADATA_HOST_ENV = "GCE_METADATA_HOST"  # the variable google-auth honours too
_METADATA_HOST = "metadata.google.internal"
_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
_TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})
_REQUEST_TIMEOUT_S = 60.0
_TOKEN_MARGIN_S = 60.0  # refresh this long before the token expires

T = TypeVar("T")


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"{}")

    def error_text(self) -> str:
        """GCS's own error message when it sent one, else the status line."""
        try:
            message = self.json().get("error", {}).get("message")
        except (ValueError, AttributeError):
            message = None
        text = message or self.body.decode("utf-8", "replace").strip() or "no body"
        return f"{self.status} {text.splitlines()[0][:300]}"


class _Transient(Exception):
    """A failure worth another try: no answer, or a 408/429/5xx."""

    def __init__(self, what: str, server_said: bool) -> None:
        super().__init__(what)
        self.server_said = server_said


class NoMetadataServer(Exception):
    """No GCE/GKE metadata server answered: the library must find credentials."""


class Connections:
    """One keep-alive HTTP connection per thread and host: a Pod makes a handful of calls."""

    def __init__(self) -> None:
        self._local = threading.local()

    def request(
        self,
        base: str,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        max_body: int | None = None,
    ) -> Response:
        """One request; raises _Transient when there was no usable answer.

        With ``max_body``, at most ``max_body + 1`` bytes of the answer are
        read (the caller sees it is too large by its length) and the
        connection, whose answer was not read to its end, is closed.
        """
        for fresh in (False, True):  # a kept-alive connection may have been closed
            conn = self._connection(base, fresh)
            try:
                conn.request(method, path, body=body, headers=headers or {})
                raw = conn.getresponse()
                data = raw.read() if max_body is None else _read_up_to(raw, max_body + 1)
                if max_body is not None and len(data) > max_body:
                    conn.close()
                    self._drop(base)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._drop(base)
                if not fresh and isinstance(
                    e, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
                ):
                    continue
                raise _Transient(describe_error(e), server_said=False) from None
            response = Response(raw.status, {k.lower(): v for k, v in raw.getheaders()}, data)
            if response.status in _TRANSIENT:
                raise _Transient(response.error_text(), server_said=True)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _connection(self, base: str, fresh: bool) -> http.client.HTTPConnection:
        pool: dict[str, http.client.HTTPConnection] = self._local.__dict__.setdefault("pool", {})
        if fresh or base not in pool:
            parts = urllib.parse.urlsplit(base)
            secure = parts.scheme == "https"
            cls = http.client.HTTPSConnection if secure else http.client.HTTPConnection
            pool[base] = cls(parts.netloc, timeout=_REQUEST_TIMEOUT_S)
        return pool[base]

    def _drop(self, base: str) -> None:
        self._local.__dict__.get("pool", {}).pop(base, None)


def _read_up_to(raw: http.client.HTTPResponse, limit: int) -> bytes:
    """At most ``limit`` bytes of an answer's body, in pieces (a short read is not its end)."""
    parts: list[bytes] = []
    held = 0
    while held < limit:
        piece = raw.read(min(limit - held, 1 << 16))
        if not piece:
            break
        parts.append(piece)
        held += len(piece)
    return b"".join(parts)


def with_retries(call: Callable[[], T], deadline_s: float, sleep: Callable[[float], None]) -> T:
    """``call()`` again on transient failures, backing off, until ``deadline_s`` has passed.

    The backoff (0.1 s doubling to 5 s, with jitter) is the library's
    default shape, so a Pod retries as the client and the operator do.
    """
    delay = 0.1
    give_up = time.monotonic() + deadline_s
    while True:
        try:
            return call()
        except _Transient:
            if time.monotonic() + delay > give_up:
                raise
            sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)


@dataclass
class Anonymous:
    """No credentials: the emulator takes any request."""

    def headers(self, connections: Connections) -> dict[str, str]:
        return {}


@dataclass
class MetadataToken:
    """An access token from the metadata server, reused until a minute before it expires."""

    host: str
    token: str | None = None
    expires_at: float = 0.0
    clock: Callable[[], float] = time.monotonic
    lock: threading.Lock = field(default_factory=threading.Lock)

    def headers(self, connections: Connections) -> dict[str, str]:
        with self.lock:
            if self.token is None or self.clock() >= self.expires_at:
                self._refresh(connections)
            return {"Authorization": f"Bearer {self.token}"}

    def _refresh(self, connections: Connections) -> None:
        base = self.host if "://" in self.host else f"http://{self.host}"
        try:
            answer = with_retries(
                lambda: connections.request(
                    base, "GET", _TOKEN_PATH, headers={"Metadata-Flavor": "Google"}
                ),
                deadline_s=3.0,
                sleep=time.sleep,
            )
        except _Transient as e:
            if e.server_said:
                failed = f"the metadata server at {self.host} failed: {e}"
                raise StorageUnavailable(failed) from None
            raise NoMetadataServer(str(e)) from None
        if answer.status != 200:
            raise StoragePermissionError(
                f"the metadata server at {self.host} gave no access token "
                f"({answer.error_text()}) — give the Pod's service account a Google service "
                "account through Workload Identity"
            )
        doc = answer.json()
        self.token = str(doc["access_token"])
        self.expires_at = self.clock() + float(doc.get("expires_in", 300)) - _TOKEN_MARGIN_S


class LeanGcs:
    """The `kinetic.storage` gs:// backend over ``http.client``; see the module docstring."""

    def __init__(
        self,
        endpoint: str,
        auth: Anonymous | MetadataToken,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.auth = auth
        self.connections = Connections()
        self.sleep = sleep

    def has_credentials(self) -> bool:
        """False when no metadata server answers: off GKE, only the library finds credentials.

        Asks for the first token (kept for the calls that follow). A metadata
        server that answers but refuses raises, naming the fix.
        """
        try:
            self.auth.headers(self.connections)
        except NoMetadataServer:
            return False
        return True

    # -- the backend protocol

    def read(self, p: Parsed, uri: str) -> bytes:
        found = self.read_if_exists(p, uri)
        if found is None:
            self._raise_missing(p, uri)
        return found[0]

    def read_if_exists(self, p: Parsed, uri: str) -> tuple[bytes, int] | None:
        require_object_key(p, uri)
        answer = self._call(uri, "GET", f"{_object_path(p)}?alt=media")
        if answer.status == 404:
            if says_bucket_missing(answer.error_text()):
                raise bucket_missing(uri, p.bucket)
            return None
        self._check(answer, uri, p.bucket)
        generation = answer.headers.get("x-goog-generation")
        if not generation:  # would make a conditional write on it unsafe
            raise StorageError(
                f"storage answered {uri} without the object's generation "
                "(no x-goog-generation header)",
                uri,
            )
        return answer.body, int(generation)

    def read_at_most(self, p: Parsed, uri: str, limit: int) -> bytes:
        """One download, of which at most ``limit + 1`` bytes are read (`storage.read_at_most`)."""
        require_object_key(p, uri)
        answer = self._call(uri, "GET", f"{_object_path(p)}?alt=media", max_body=limit)
        if answer.status == 404:
            self._raise_missing(p, uri)
        self._check(answer, uri, p.bucket)
        if len(answer.body) > limit:
            size = answer.headers.get("content-length")
            raise too_large(uri, limit, int(size) if size and size.isdigit() else None)
        return answer.body

    def write(self, p: Parsed, uri: str, data: bytes, generation: int | None) -> int:
        require_object_key(p, uri)
        query = {"uploadType": "multipart"}
        if generation is not None:
            query["ifGenerationMatch"] = str(generation)
        path = f"/upload/storage/v1/b/{_quote(p.bucket)}/o?{urllib.parse.urlencode(query)}"
        body, content_type = _multipart(p.key, data)
        answer = self._call(uri, "POST", path, body=body, headers={"Content-Type": content_type})
        if answer.status == 412:
            current = self.stat(p, uri)
            raise PreconditionFailed(precondition_message(uri, generation or 0, current), uri)
        if answer.status == 404:
            raise bucket_missing(uri, p.bucket)
        self._check(answer, uri, p.bucket)
        return int(answer.json().get("generation") or 0)

    def stat(self, p: Parsed, uri: str) -> int | None:
        require_object_key(p, uri)
        answer = self._call(uri, "GET", f"{_object_path(p)}?fields=generation")
        if answer.status == 404:
            return None
        self._check(answer, uri, p.bucket)
        return int(answer.json()["generation"])

    def delete(self, p: Parsed, uri: str) -> bool:
        require_object_key(p, uri)
        answer = self._call(uri, "DELETE", _object_path(p))
        if answer.status == 404:
            return False
        self._check(answer, uri, p.bucket)
        return True

    def list(self, p: Parsed, uri: str) -> list[str]:
        names: list[str] = []
        token: str | None = None
        while True:
            query = {"fields": "items(name),nextPageToken"}
            if p.key:
                query["prefix"] = p.key
            if token:
                query["pageToken"] = token
            path = f"/storage/v1/b/{_quote(p.bucket)}/o?{urllib.parse.urlencode(query)}"
            answer = self._call(uri, "GET", path)
            if answer.status == 404:
                raise bucket_missing(uri, p.bucket)
            self._check(answer, uri, p.bucket)
            doc = answer.json()
            names.extend(item["name"] for item in doc.get("items", ()))
            token = doc.get("nextPageToken")
            if not token:
                return sorted(f"gs://{p.bucket}/{name}" for name in names)

    # -- the plumbing

    def _call(
        self,
        uri: str,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        max_body: int | None = None,
    ) -> Response:
        def once() -> Response:
            sent = {**self.auth.headers(self.connections), **(headers or {})}
            return self.connections.request(self.endpoint, method, path, body, sent, max_body)

        try:
            return with_retries(once, retry_timeout(), self.sleep)
        except _Transient as e:
            raise unavailable(uri, str(e), retried=e.server_said) from None

    def _check(self, answer: Response, uri: str, bucket: str) -> None:
        """Raise the storage error an unsuccessful answer means."""
        if answer.status < 300:
            return
        if answer.status in (401, 403):
            raise permission_denied(uri, bucket, answer.error_text())
        raise request_failed(uri, answer.error_text())

    def _raise_missing(self, p: Parsed, uri: str) -> NoReturn:
        """Tell a missing object from a missing bucket: the fixes differ."""
        answer = self._call(uri, "GET", f"/storage/v1/b/{_quote(p.bucket)}?fields=name")
        if answer.status == 404:
            raise bucket_missing(uri, p.bucket)
        self._check(answer, uri, p.bucket)
        raise NotFound(f"no object at {uri}", uri)


def lean_backend(environ: Mapping[str, str]) -> LeanGcs | None:
    """The lean backend this environment's credentials allow, or None for the library's.

    With the metadata server's token, the caller still asks `LeanGcs.has_credentials`
    once: whether a metadata server answers is known only by asking it.
    """
    emulator = environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        endpoint = emulator if "://" in emulator else f"http://{emulator}"
        return LeanGcs(endpoint, Anonymous())
    if environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return None  # a key file: the library signs with it
    host = environ.get(METADATA_HOST_ENV) or _METADATA_HOST
    return LeanGcs(GCS_ENDPOINT, MetadataToken(host))


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _object_path(p: Parsed) -> str:
    return f"/storage/v1/b/{_quote(p.bucket)}/o/{_quote(p.key)}"


def _multipart(name: str, data: bytes) -> tuple[bytes, str]:
    """A multipart upload's body (metadata, then the bytes) and its Content-Type.

    Multipart rather than ``uploadType=media`` because that is the form on
    which fake-gcs-server, like GCS, honours ``ifGenerationMatch``.
    """
    boundary = "kinetic-" + os.urandom(12).hex()
    meta = json.dumps({"name": name, "contentType": "application/octet-stream"})
    head = (
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n"
        f"--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    body = head.encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/related; boundary={boundary}"
