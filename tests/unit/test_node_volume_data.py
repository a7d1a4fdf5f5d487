"""The process node reads a volume's Secret even while the Node authorizer still says 403.

The API server's Node authorizer allows a node to read a Secret only once
its graph links it to a Pod bound there, which can lag the binding: the
bench's 300-Pod Job lost a Pod to it. A fault the real server produces only
by timing, so it is injected here.
"""

from __future__ import annotations

import pytest
from kinetic_dev import node
from kubernetes.client.exceptions import ApiException


class Reads:
    """Answers `_read_data` with the given outcomes in turn (an exception is raised)."""

    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def _read_data(self, kind: str, ns: str, name: str) -> dict[str, bytes]:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node.time, "sleep", lambda seconds: None)


def forbidden() -> ApiException:
    return ApiException(status=403, reason="Forbidden")


def test_a_403_is_retried_until_the_authorizer_catches_up() -> None:
    reads = Reads(forbidden(), forbidden(), {"token": b"t"})
    assert node.Agent.fetch_data(reads, "secret", "ns", "default-token") == {"token": b"t"}  # type: ignore[arg-type]
    assert reads.calls == 3


def test_a_missing_object_is_none_at_once() -> None:
    reads = Reads(ApiException(status=404, reason="Not Found"))
    assert node.Agent.fetch_data(reads, "configMap", "ns", "cfg") is None  # type: ignore[arg-type]
    assert reads.calls == 1


def test_a_403_that_lasts_is_raised_after_the_wait() -> None:
    reads = Reads(*[forbidden() for _ in range(100)])
    with pytest.raises(ApiException) as refused:
        node.Agent.fetch_data(reads, "secret", "ns", "s")  # type: ignore[arg-type]
    assert refused.value.status == 403
    assert 5 < reads.calls < 100  # it waited about NODE_AUTHZ_WAIT_SECONDS, then gave up
