"""The webhook's client configuration: a Service reference when the operator runs in a pod."""

from __future__ import annotations

import pytest
from kinetic_operator.webhook import service_client_config

KOPF = {"url": "https://kinetic-operator.kinetic-system.svc:9443", "caBundle": "Q0E="}


def test_without_a_service_kopfs_url_is_kept() -> None:
    assert service_client_config(dict(KOPF), None, 9443) == KOPF


def test_a_service_replaces_the_url_and_keeps_the_ca() -> None:
    assert service_client_config(dict(KOPF), "kinetic-system/kinetic-operator", 9443) == {
        "service": {
            "namespace": "kinetic-system",
            "name": "kinetic-operator",
            "path": "",
            "port": 9443,
        },
        "caBundle": "Q0E=",
    }


def test_a_malformed_service_names_the_setting() -> None:
    with pytest.raises(ValueError, match="KINETIC_WEBHOOK_SERVICE='kinetic-operator'"):
        service_client_config(dict(KOPF), "kinetic-operator", 9443)
