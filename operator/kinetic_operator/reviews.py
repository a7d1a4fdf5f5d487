"""One admission review, from the bytes on the wire to Kopf's handler: bounded at every step.

The webhook's port answers whoever connects, so everything here assumes the
sender may be hostile and the bytes may be anything:

* **Who.** When client certificates are required (`WebhookServer`), TLS has
  already refused a client without one signed by the configured CA; a
  certificate whose names are not among the allowed ones is refused here
  (`client_refusal`), before anything is read.
* **How large.** A review declaring more than the limit is never read: its
  head (where the API server writes the request's uid) is enough to deny it
  by name (`oversized_denial`). One sending no length is read up to the limit.
* **How many.** A review is read only once the `ReviewGate` has room for it;
  one that waits too long is denied as busy (`busy_denial`), with HTTP 429
  when it carries no uid to answer.
* **How.** The body is decoded once, in a worker thread, by the depth-bounded
  pure-Python decoder (`deepjson.loads_bounded`), which leaves the GIL to the
  event loop every few milliseconds; what is not an AdmissionReview is
  answered 400 without reaching Kopf. Kopf then gets the decoded document
  itself: nothing is encoded or decoded a second time.

Every denial is an AdmissionReview answer the API server shows the user
(``admission webhook "…" denied the request: …``); an error answer would let
the request through, since the webhook fails open.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Collection, Iterator
from concurrent.futures import Executor
from typing import Any, cast

import aiohttp.web
import kopf

from kinetic_operator import deepjson
from kinetic_operator.review_gate import Busy, ReviewGate

log = logging.getLogger("kinetic.operator")

HEAD_BYTES = 4096  # holds a review's uid: the API server writes kind, apiVersion, then request.uid
_REQUEST_UID = re.compile(rb'"request"\s*:\s*\{\s*"uid"\s*:\s*"([^"\\]{1,128})"')
_ANY_UID = re.compile(rb'"uid"\s*:\s*"([^"\\]{1,128})"')
_API_VERSION = re.compile(rb'"apiVersion"\s*:\s*"(admission\.k8s\.io/v1(?:beta1)?)"')

Serve = Callable[..., Awaitable[Any]]  # Kopf's WebhookFn: (review, **kwargs) -> response


# --------------------------------------------------------------------------- answers


def denial(head: bytes, code: int, reason: str, message: str) -> dict[str, Any] | None:
    """The AdmissionReview answer denying the review that starts with ``head``, or None
    when its uid cannot be found there (without it the API server would not take the answer)."""
    found = _REQUEST_UID.search(head) or _ANY_UID.search(head)
    if found is None:
        return None
    version = _API_VERSION.search(head)
    return {
        "apiVersion": version.group(1).decode() if version else "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": found.group(1).decode(),
            "allowed": False,
            "status": {"code": code, "reason": reason, "message": message},
        },
    }


def oversized_denial(head: bytes, size: int, limit: int) -> dict[str, Any] | None:
    """The answer denying a review too large to judge (None: no uid in ``head``)."""
    message = (
        f"the admission review for this request is {size:,} bytes, more than the "
        f"{limit:,} the Kinetic webhook reads (above the largest review the API server sends "
        "for an object etcd can store: an update carries the old object and the new one), "
        "so it cannot be checked and is refused: make the object smaller, e.g. upload large "
        "inputs to storage (spec.inputs.count with uriPrefix) instead of listing them inline"
    )
    return denial(head, 413, "RequestEntityTooLarge", message)


def busy_denial(head: bytes, why: str) -> dict[str, Any] | None:
    """The answer to a review the webhook had no room for (None: no uid in ``head``)."""
    return denial(head, 429, "TooManyRequests", why)


def is_review(doc: Any) -> bool:
    """Whether ``doc`` has the shape of an AdmissionReview request Kopf can route."""
    request = doc.get("request") if isinstance(doc, dict) else None
    return (
        isinstance(request, dict)
        and isinstance(request.get("uid"), str)
        and isinstance(request.get("resource"), dict)
        and isinstance(request.get("userInfo"), dict)
        and any(isinstance(request.get(k), dict) for k in ("object", "oldObject"))
    )


# --------------------------------------------------------------------------- client names


def peer_names(peercert: Any) -> set[str]:
    """The names a client certificate (as `ssl.SSLSocket.getpeercert` gives it) claims:
    its subject's common names and its DNS subject alternative names."""
    if not isinstance(peercert, dict):
        return set()
    names = {
        value for rdn in peercert.get("subject") or () for key, value in rdn if key == "commonName"
    }
    names |= {value for kind, value in peercert.get("subjectAltName") or () if kind == "DNS"}
    return names


def client_refusal(peercert: Any, allowed: Collection[str]) -> str | None:
    """Why a client may not send reviews (None: it may): with ``allowed`` names set, its
    certificate must claim one of them. Without them, TLS's check of the CA is the rule."""
    if not allowed:
        return None
    names = peer_names(peercert)
    if names & set(allowed):
        return None
    shown = ", ".join(sorted(names)) or "no certificate names"
    return (
        f"client certificate ({shown}) is not one the Kinetic webhook accepts "
        f"(KINETIC_WEBHOOK_CLIENT_NAMES: {', '.join(sorted(allowed))})"
    )


# --------------------------------------------------------------------------- decoding


class _CollectorPause:
    """Python's cyclic garbage collector held off while any review is being decoded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decoding = 0
        self._was_enabled = True

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._decoding == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._decoding += 1
        try:
            yield
        finally:
            with self._lock:
                self._decoding -= 1
                if self._decoding == 0 and self._was_enabled:
                    gc.enable()


_COLLECTOR = _CollectorPause()


def decode_review(body: bytes) -> dict[str, Any] | None:
    """The review in ``body`` (in a worker thread), or None when it is JSON but not a review.

    The collector is held off meanwhile: decoding makes no reference cycles, but a
    million lists made at once set off a collection every few hundred, each walking
    all of them, with the GIL held (230 ms for 3 MiB of ``[[],…]``). What is not a
    review is dropped here too, before the collector runs again, so it never walks it.
    """
    with _COLLECTOR.held():
        doc = deepjson.loads_bounded(body)
        if not is_review(doc):
            del doc
            return None
        return cast(dict[str, Any], doc)


# --------------------------------------------------------------------------- reading


async def read_head(request: aiohttp.web.Request, size: int = HEAD_BYTES) -> bytes:
    """Up to ``size`` bytes from the start of the body (fewer only at its end)."""
    pieces: list[bytes] = []
    got = 0
    while got < size:
        piece = await request.content.read(size - got)
        if not piece:
            break
        pieces.append(piece)
        got += len(piece)
    return b"".join(pieces)


async def read_review(request: aiohttp.web.Request, limit: int) -> tuple[bytes, int]:
    """The request's body if it holds at most ``limit`` bytes, else its head; and its size.

    Read from the stream, not through aiohttp's ``client_max_size``, whose
    error would fail the review open. The size of a body over the limit is
    its Content-Length when given (the rest is never read), else what was
    read before giving up: ``limit + 1`` or more.
    """
    declared = request.content_length
    if declared is not None and declared > limit:
        return await read_head(request), declared
    pieces: list[bytes] = []
    size = 0
    while True:
        piece = await request.content.read(1 << 16)
        if not piece:
            return b"".join(pieces), size
        size += len(piece)
        if size > limit:
            return (b"".join(pieces) or piece)[:HEAD_BYTES], size
        pieces.append(piece)


# --------------------------------------------------------------------------- serving


async def serve_review(
    fn: Serve,
    request: aiohttp.web.Request,
    *,
    gate: ReviewGate,
    limit: int,
    decoders: Executor,
    client_names: Collection[str] = (),
) -> aiohttp.web.StreamResponse:
    """Answer one review: who, how large, how many, then decode once and hand it to Kopf."""
    transport = request.transport
    refused = client_refusal(
        transport.get_extra_info("peercert") if transport else None, client_names
    )
    if refused is not None:
        log.warning("Refused an admission review: %s", refused)
        return await _answer_and_close(request, None, 403, refused)
    declared = request.content_length
    if declared is not None and declared > limit:
        return await _too_large(request, await read_head(request), declared, limit)
    try:
        async with gate.held_for(limit if declared is None else declared):
            return await _judge(fn, request, limit, decoders)
    except Busy as busy:
        return await _busy(request, str(busy), limit)


async def _too_large(
    request: aiohttp.web.Request, head: bytes, size: int, limit: int
) -> aiohttp.web.StreamResponse:
    """Deny a review past the limit by name (HTTP 413 without a uid), unread."""
    log.warning("Denied an admission review of %d bytes: too large to judge", size)
    reason = f"the body is {size:,} bytes, more than the {limit:,} the Kinetic webhook reads"
    return await _answer_and_close(request, oversized_denial(head, size, limit), 413, reason)


async def _busy(request: aiohttp.web.Request, why: str, limit: int) -> aiohttp.web.StreamResponse:
    """Deny a review the gate had no room for. Its body (at most ``limit`` bytes) is read
    and dropped, never held, so that a client that writes it all before it reads the answer,
    as the API server does, gets the answer and not a reset connection."""
    log.warning("Turned an admission review away: %s", why)
    head = await read_head(request)
    dropped = len(head)
    while dropped <= limit and (piece := await request.content.read(1 << 16)):
        dropped += len(piece)
    answer = busy_denial(head, why)
    if dropped > limit:
        return await _answer_and_close(request, answer, 429, why)
    if answer is None:
        raise aiohttp.web.HTTPTooManyRequests(reason=why)
    return aiohttp.web.json_response(answer)


async def _answer_and_close(
    request: aiohttp.web.Request, answer: dict[str, Any] | None, status: int, reason: str
) -> aiohttp.web.StreamResponse:
    """Send ``answer`` (or, with no review to answer, HTTP ``status``), then close the
    connection without reading the rest of the body.

    aiohttp would otherwise read and decrypt whatever the client still sends (up to
    ten seconds of it) on the event loop: for a client POSTing 8 MiB bodies in a loop,
    that was the whole loop. A client still sending may see the connection reset
    instead of the answer; the API server never sends a review this large for an
    object etcd can store, and a review that fails so is judged by the reconcile.
    """
    response: aiohttp.web.StreamResponse
    if answer is not None:
        response = aiohttp.web.json_response(answer)
    else:
        response = aiohttp.web.Response(status=status, text=f"{status}: {reason}")
    response.force_close()
    with contextlib.suppress(ConnectionError):
        await response.prepare(request)
        await response.write_eof()
    request.protocol.force_close()
    return response


async def _judge(
    fn: Serve, request: aiohttp.web.Request, limit: int, decoders: Executor
) -> aiohttp.web.StreamResponse:
    """Read the body, decode it off the event loop, and let Kopf judge the document."""
    body, size = await read_review(request, limit)
    if size > limit:
        return await _too_large(request, body, size, limit)
    loop = asyncio.get_running_loop()
    try:
        doc = await loop.run_in_executor(decoders, decode_review, body)
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise aiohttp.web.HTTPBadRequest(reason=f"not JSON: {str(exc)[:200]}") from None
    del body
    if doc is None:
        raise aiohttp.web.HTTPBadRequest(reason="not an AdmissionReview request")

    async def judged(_placeholder: Any, **kwargs: Any) -> Any:
        return await fn(doc, **kwargs)

    # Kopf's own handling (its headers, client certificate and error answers), given a
    # body of "null" to decode: the document it judges is the one decoded above.
    try:
        return await kopf.WebhookServer._serve(
            cast(Any, judged), cast(aiohttp.web.Request, _Decoded(request))
        )
    finally:
        await loop.run_in_executor(decoders, release, doc)


def release(doc: dict[str, Any]) -> None:
    """Empty the review's objects once it is answered, in a worker thread.

    A refusal is an exception, which Kopf keeps with its traceback, whose frames
    hold the objects judged: a reference cycle, freed only when the collector
    next gets to it. Measured, a flood of refused 3 MiB reviews kept several of
    them alive at once (370 MiB). Emptying the dicts of the review (not what is
    below them) frees what they held at once, and the collector finds only
    empty shells; freeing a million lists takes tens of milliseconds with the
    GIL held, which is why this runs off the event loop.
    """
    stack: list[dict[str, Any]] = [doc]
    while stack:
        node = stack.pop()
        stack.extend(v for v in node.values() if isinstance(v, dict))
        node.clear()


class _Decoded:
    """An aiohttp request whose body reads as ``null`` (see `_judge`)."""

    def __init__(self, request: aiohttp.web.Request) -> None:
        self._request = request

    async def text(self) -> str:
        return "null"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)
