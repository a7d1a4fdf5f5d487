"""One admission review through the webhook's front door: size, number, decoding, client names.

The server here runs `reviews.serve_review` in front of a Kopf-style handler
that admits everything it is given and records it, so each test can tell
whether a review reached the handler and what it saw.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import aiohttp.web
import pytest
from aiohttp.test_utils import TestClient, TestServer
from kinetic.model.limits import MAX_REVIEW_BYTES, json_depth
from kinetic_operator import deepjson
from kinetic_operator.review_gate import GateLimits, ReviewGate, gate_limits
from kinetic_operator.reviews import (
    client_refusal,
    decode_review,
    is_review,
    oversized_denial,
    peer_names,
    serve_review,
)

Handler = Callable[[dict], Awaitable[None]]


def review(uid: str, filler: int = 10, *, operation: str = "UPDATE", spec: Any = None) -> bytes:
    """A review as the API server writes it (request.uid first), with ``filler`` bytes of env
    in each of the old and the new object."""
    obj = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticJob",
        "metadata": {"name": "j", "namespace": "a", "uid": "object-uid"},
        "spec": spec if spec is not None else {"env": [{"name": "PAD", "value": "x" * filler}]},
    }
    doc = {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "kinetic.dev", "version": "v1alpha1", "kind": "KineticJob"},
            "resource": {"group": "kinetic.dev", "version": "v1alpha1", "resource": "kineticjobs"},
            "namespace": "a",
            "operation": operation,
            "userInfo": {"username": "someone"},
            "object": obj,
            "oldObject": obj if operation == "UPDATE" else None,
        },
    }
    return json.dumps(doc).encode()


class Webhook:
    """The server under test, and what its handler saw."""

    def __init__(self, client: TestClient, seen: list[dict], given: list[dict]) -> None:
        self.client, self.seen, self.given = client, seen, given

    async def post(self, body: bytes | Any, **kw: Any) -> tuple[int, Any]:
        answer = await self.client.post("/kinetic-job-spec", data=body, **kw)
        text = await answer.text()
        try:
            return answer.status, json.loads(text)
        except ValueError:
            return answer.status, text


@asynccontextmanager
async def webhook(
    limits: GateLimits | None = None,
    *,
    limit: int = MAX_REVIEW_BYTES,
    slow: asyncio.Event | None = None,
    client_names: tuple[str, ...] = (),
) -> AsyncIterator[Webhook]:
    seen: list[dict] = []
    given: list[dict] = []
    gate = ReviewGate(limits or gate_limits(limit, reviews=4, wait_seconds=2))
    decoders = ThreadPoolExecutor(max_workers=2)

    async def admit(data: dict, **_: object) -> dict:
        seen.append(copy.deepcopy(data))  # as given: the server empties it once answered
        given.append(data)
        if slow is not None:
            await slow.wait()
        return {
            "apiVersion": data["apiVersion"],
            "kind": "AdmissionReview",
            "response": {"uid": data["request"]["uid"], "allowed": True},
        }

    async def handle(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await serve_review(
            admit, request, gate=gate, limit=limit, decoders=decoders, client_names=client_names
        )

    app = aiohttp.web.Application()  # aiohttp's default body limit (1 MiB), as Kopf makes it
    app.add_routes([aiohttp.web.post("/{id:.*}", handle)])
    try:
        async with TestServer(app) as server, TestClient(server) as client:
            yield Webhook(client, seen, given)
    finally:
        decoders.shutdown()


# --------------------------------------------------------------------------- sizes


@pytest.mark.asyncio
async def test_a_review_of_two_large_objects_is_judged_not_failed_open() -> None:
    body = review("u-1", 1_400_000)  # two objects of 1.4 MB: 2.8 MB, past aiohttp's 1 MiB
    assert len(body) > 2 << 20
    async with webhook() as hook:
        status, answer = await hook.post(body)
    assert status == 200 and answer["response"] == {"uid": "u-1", "allowed": True}
    assert len(hook.seen) == 1 and hook.seen[0]["request"]["uid"] == "u-1"
    assert hook.seen[0]["request"]["object"]["spec"]["env"][0]["value"] == "x" * 1_400_000


@pytest.mark.asyncio
async def test_a_review_is_emptied_once_answered_so_nothing_keeps_it_alive() -> None:
    async with webhook() as hook:
        status, answer = await hook.post(review("u-free", 100_000))
    assert status == 200 and answer["response"]["allowed"] is True
    assert hook.seen[0]["request"]["uid"] == "u-free"  # the handler had it whole
    assert hook.given == [{}]  # what it was given holds nothing any more


@pytest.mark.asyncio
async def test_the_largest_review_of_objects_etcd_stores_is_judged() -> None:
    # Measured: an UPDATE of the largest KineticJob etcd stored was 3,145,430 bytes.
    body = review("u-big", (3_145_430 - 700) // 2)
    assert len(body) >= 3_145_000
    async with webhook() as hook:
        status, answer = await hook.post(body)
    assert status == 200 and answer["response"]["allowed"] is True and len(hook.seen) == 1


@pytest.mark.asyncio
async def test_a_review_past_the_limit_is_denied_naming_the_sizes_unread() -> None:
    body = review("u-2", MAX_REVIEW_BYTES // 2 + 1000)
    async with webhook() as hook:
        status, answer = await hook.post(body)
    assert status == 200 and hook.seen == []  # denied without being handed to a handler
    response = answer["response"]
    assert response["uid"] == "u-2" and response["allowed"] is False
    assert response["status"]["code"] == 413
    message = response["status"]["message"]
    assert f"{len(body):,} bytes" in message and f"{MAX_REVIEW_BYTES:,}" in message
    assert "make the object smaller" in message
    assert answer["apiVersion"] == "admission.k8s.io/v1"


@pytest.mark.asyncio
async def test_a_body_without_a_length_is_read_only_up_to_the_limit() -> None:
    body = review("u-3", 200_000)

    async def chunks() -> AsyncIterator[bytes]:  # chunked transfer: no Content-Length
        for start in range(0, len(body), 65536):
            yield body[start : start + 65536]

    async with webhook(limit=100_000) as hook:
        status, answer = await hook.post(chunks())
    assert status == 200 and hook.seen == []
    assert answer["response"]["uid"] == "u-3" and answer["response"]["status"]["code"] == 413
    assert "100,000" in answer["response"]["status"]["message"]


@pytest.mark.asyncio
async def test_an_oversized_body_that_is_no_review_gets_an_http_error() -> None:
    async with webhook(limit=10_000) as hook:
        status, _ = await hook.post(b"[" + b"{}," * 10_000 + b"{}]")
    assert status == 413 and hook.seen == []


def test_a_denial_needs_the_request_uid() -> None:
    assert oversized_denial(b'{"kind":"Other"}', 10, 5) is None
    head = review("abc", 10)[:200]
    denial = oversized_denial(head, 10**7, MAX_REVIEW_BYTES)
    assert denial is not None and denial["response"]["uid"] == "abc"


# --------------------------------------------------------------------------- decoding


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[{},{},{}]", "not an AdmissionReview"),
        (b'{"request": {"uid": "x"}}', "not an AdmissionReview"),
        (b'{"request": ', "not JSON"),
        (b'{"a": 1} trailing', "not JSON"),
        (b'{"a": ' + b"9" * 5000 + b"}", "not JSON"),  # past Python's integer digits limit
    ],
)
async def test_what_is_not_a_review_is_refused_before_any_handler(body: bytes, why: str) -> None:
    async with webhook() as hook:
        status, text = await hook.post(body)
    assert status == 400 and why in text and hook.seen == []


@pytest.mark.asyncio
async def test_a_deep_review_reaches_the_handler_cut_at_the_decoders_depth() -> None:
    deep = "[" * 5000 + "]" * 5000
    body = review("u-deep", spec={"inputs": {"items": [json.loads("[]")]}}).replace(
        b"[[]]", b"[" + deep.encode() + b"]"
    )
    async with webhook() as hook:
        status, answer = await hook.post(body)
    assert status == 200 and answer["response"]["allowed"] is True
    items = hook.seen[0]["request"]["object"]["spec"]["inputs"]["items"]
    assert json_depth(hook.seen[0], 10_000) == deepjson.CUT_DEPTH
    assert isinstance(items, list)  # shallow parts stay whole; only the deep part is None


def test_is_review_wants_what_kopf_routes_by() -> None:
    assert is_review(json.loads(review("u")))
    doc = json.loads(review("u"))
    del doc["request"]["userInfo"]
    assert not is_review(doc)
    assert not is_review([])
    assert not is_review({"request": "x"})


# --------------------------------------------------------------------------- how many


@pytest.mark.asyncio
async def test_a_review_without_room_is_denied_as_busy_naming_its_uid() -> None:
    release = asyncio.Event()
    limits = GateLimits(reviews=1, budget_bytes=1 << 20, waiting=4, wait_seconds=0.2)
    async with webhook(limits, slow=release) as hook:
        first = asyncio.create_task(hook.post(review("u-first")))
        while not hook.seen:
            await asyncio.sleep(0.01)
        status, answer = await hook.post(review("u-second"))
        release.set()
        assert (await first)[1]["response"]["allowed"] is True
    assert status == 200
    response = answer["response"]
    assert response["uid"] == "u-second" and response["allowed"] is False
    assert response["status"]["code"] == 429 and "try again" in response["status"]["message"]
    assert [r["request"]["uid"] for r in hook.seen] == ["u-first"]


@pytest.mark.asyncio
async def test_a_busy_body_that_is_no_review_gets_http_429() -> None:
    release = asyncio.Event()
    limits = GateLimits(reviews=1, budget_bytes=1 << 20, waiting=4, wait_seconds=0.1)
    async with webhook(limits, slow=release) as hook:
        first = asyncio.create_task(hook.post(review("u-first")))
        while not hook.seen:
            await asyncio.sleep(0.01)
        status, _ = await hook.post(b"[" + b"{}," * 1000 + b"{}]")
        release.set()
        await first
    assert status == 429


# --------------------------------------------------------------------------- client names

CERT = {
    "subject": ((("organizationName", "kube"),), (("commonName", "kube-apiserver-webhooks"),)),
    "subjectAltName": (("DNS", "apiserver.example"), ("IP Address", "10.0.0.1")),
}


def test_peer_names_are_the_common_names_and_dns_names() -> None:
    assert peer_names(CERT) == {"kube-apiserver-webhooks", "apiserver.example"}
    assert peer_names(None) == set() and peer_names({}) == set()


@pytest.mark.parametrize(
    ("allowed", "refused"),
    [
        ((), False),  # no names: the CA's check is the rule
        (("kube-apiserver-webhooks",), False),
        (("apiserver.example", "other"), False),
        (("someone-else",), True),
    ],
)
def test_a_client_must_claim_an_allowed_name(allowed: tuple[str, ...], refused: bool) -> None:
    why = client_refusal(CERT, allowed)
    assert (why is not None) is refused
    if why:
        assert "someone-else" in why and "kube-apiserver-webhooks" in why


@pytest.mark.asyncio
async def test_a_client_without_an_allowed_certificate_is_refused_unread() -> None:
    async with webhook(client_names=("kube-apiserver-webhooks",)) as hook:
        status, text = await hook.post(review("u-1"))  # plain HTTP here: no certificate at all
    assert status == 403 and "no certificate names" in text and hook.seen == []


def test_decoding_holds_the_collector_off_and_gives_it_back() -> None:
    import gc

    assert gc.isenabled()
    assert decode_review(b"[" + b"[]," * 10_000 + b"[]]") is None  # JSON, not a review
    assert gc.isenabled()
    doc = decode_review(review("u-gc"))
    assert doc is not None and doc["request"]["uid"] == "u-gc" and gc.isenabled()
    with pytest.raises(ValueError):
        decode_review(b"{not json")
    assert gc.isenabled()
