"""The webhook's client configuration: a Service reference when the operator runs in a pod."""

from __future__ import annotations

import pytest
from kinetic_operator.webhook import HOOKS, webhook_entries

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
