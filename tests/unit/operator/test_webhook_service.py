"""The webhook's client configuration: a Service reference when the operator runs in a pod."""

from __future__ import annotations

import json

import aiohttp.web
import pytest
from aiohttp.test_utils import TestClient, TestServer
from kinetic_operator.webhook import (
    HOOKS,
    MAX_REVIEW_BYTES,
    WebhookServer,
    oversized_denial,
    webhook_entries,
)

KOPF = {"url": "https://127.0.0.1:9443", "caBundle": "Q0E="}


def client_configs(**kw: object) -> list[dict]:
    return [e["clientConfig"] for e in webhook_entries(dict(KOPF), **kw)]  # type: ignore[arg-type]


def test_without_a_service_each_hook_is_at_kopfs_url() -> None:
    assert client_configs() == [
        {"url": f"https://127.0.0.1:9443/{hook.id}", "caBundle": "Q0E="} for hook in HOOKS
    ]


def test_a_service_replaces_the_url_and_keeps_the_ca() -> None:
    assert client_configs(service="kinetic-system/kinetic-operator", port=9443) == [
        {
            "service": {
                "namespace": "kinetic-system",
                "name": "kinetic-operator",
                "path": f"/{hook.id}",
                "port": 9443,
            },
            "caBundle": "Q0E=",
        }
        for hook in HOOKS
    ]


def test_a_malformed_service_names_the_setting() -> None:
    with pytest.raises(ValueError, match="KINETIC_WEBHOOK_SERVICE='kinetic-operator'"):
        client_configs(service="kinetic-operator", port=9443)


# --------------------------------------------------------------------------- review sizes


def review(uid: str, filler: int) -> bytes:
    """An UPDATE review as the API server writes it (request.uid first), ``filler`` bytes of
    env in each of the old and the new object."""
    obj = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticJob",
        "metadata": {"name": "j", "namespace": "a", "uid": "object-uid"},
        "spec": {"env": [{"name": "PAD", "value": "x" * filler}]},
    }
    doc = {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "kinetic.dev", "version": "v1alpha1", "kind": "KineticJob"},
            "resource": {"group": "kinetic.dev", "version": "v1alpha1", "resource": "kineticjobs"},
            "namespace": "a",
            "operation": "UPDATE",
            "object": obj,
            "oldObject": obj,
        },
    }
    return json.dumps(doc).encode()


async def post(body: bytes) -> tuple[int, dict, list[dict]]:
    """POST ``body`` to a server running our `_serve` in front of a Kopf-style handler that
    admits everything it is given (and records what it was given)."""
    seen: list[dict] = []

    async def admit(data: dict, **_: object) -> dict:
        seen.append(data)
        uid = data["request"]["uid"]
        return {
            "apiVersion": data["apiVersion"],
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True},
        }

    async def handle(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await WebhookServer._serve(admit, request)

    app = aiohttp.web.Application()  # aiohttp's default body limit (1 MiB), as Kopf makes it
    app.add_routes([aiohttp.web.post("/{id:.*}", handle)])
    async with TestServer(app) as server, TestClient(server) as client:
        answer = await client.post("/kinetic-job-spec", data=body)
        return answer.status, await answer.json(), seen


@pytest.mark.asyncio
async def test_a_review_of_two_large_objects_is_judged_not_failed_open() -> None:
    body = review("u-1", 1_400_000)  # two objects of 1.4 MB: 2.8 MB, past aiohttp's 1 MiB
    assert len(body) > 2 << 20
    status, answer, seen = await post(body)
    assert status == 200 and answer["response"] == {"uid": "u-1", "allowed": True}
    assert len(seen) == 1 and seen[0]["request"]["uid"] == "u-1"


@pytest.mark.asyncio
async def test_a_review_past_the_limit_is_denied_naming_the_sizes() -> None:
    body = review("u-2", MAX_REVIEW_BYTES // 2 + 1000)
    status, answer, seen = await post(body)
    assert status == 200 and seen == []  # denied without being handed to a handler
    response = answer["response"]
    assert response["uid"] == "u-2" and response["allowed"] is False
    assert response["status"]["code"] == 413
    message = response["status"]["message"]
    assert f"{len(body):,} bytes" in message and f"{MAX_REVIEW_BYTES:,}" in message
    assert answer["apiVersion"] == "admission.k8s.io/v1"


def test_a_denial_needs_the_request_uid() -> None:
    assert oversized_denial(b'{"kind":"Other"}', 10, 5) is None
    head = review("abc", 10)[:200]
    denial = oversized_denial(head, 10**7, MAX_REVIEW_BYTES)
    assert denial is not None and denial["response"]["uid"] == "abc"
