"""The process node's probes: spec -> probe, and the kubelet's thresholds."""

from __future__ import annotations

import pytest
from kinetic_dev import probes as pr
from kinetic_dev.podspec import PodConfigError

CONTAINER = {
    "name": "app",
    "ports": [{"name": "health", "containerPort": 8080}],
    "readinessProbe": {"httpGet": {"path": "healthz", "port": "health"}, "periodSeconds": 5},
    "livenessProbe": {
        "tcpSocket": {"port": 9443},
        "initialDelaySeconds": 30,
        "failureThreshold": 2,
    },
    "startupProbe": {"exec": {"command": ["test", "-f", "/tmp/up"]}},
}


def test_probes_resolve_named_ports_and_the_pod_ip() -> None:
    got = {p.kind: p for p in pr.container_probes(CONTAINER, "192.0.2.9")}
    assert got["readiness"].target == "http://192.0.2.9:8080/healthz"
    assert (got["readiness"].period, got["readiness"].failure_threshold) == (5.0, 3)
    assert got["liveness"].target == "192.0.2.9:9443"
    assert (got["liveness"].initial_delay, got["liveness"].failure_threshold) == (30.0, 2)
    assert got["startup"].command == ("test", "-f", "/tmp/up")


@pytest.mark.parametrize(
    ("probe", "message"),
    [
        ({"httpGet": {"port": "nope"}}, "port 'nope' is not a number nor a named container port"),
        ({"grpc": {"port": 1}}, "needs httpGet, tcpSocket or exec"),
        ({"exec": {}}, "exec needs a command"),
    ],
)
def test_bad_probes_are_named(probe: dict, message: str) -> None:
    with pytest.raises(PodConfigError, match=f"container 'app' livenessProbe: {message}"):
        pr.container_probes({"name": "app", "livenessProbe": probe}, "1.2.3.4")


def run(probe: pr.Probe, results: list[bool]) -> list[bool | None]:
    state, verdicts = pr.ProbeState(), []
    for ok in results:
        state = pr.observe(probe, state, ok)
        verdicts.append(state.verdict)
    return verdicts


@pytest.mark.parametrize(
    ("success", "failure", "results", "verdicts"),
    [
        (1, 3, [True], [True]),
        (1, 3, [False, False, False], [None, None, False]),
        (1, 3, [True, False, False, True, False, False, False], [True] * 6 + [False]),
        (2, 1, [True, False, True, True], [None, False, False, True]),
    ],
)
def test_verdicts_change_after_a_run_of_equal_results(
    success: int, failure: int, results: list[bool], verdicts: list[bool | None]
) -> None:
    probe = pr.Probe("readiness", "http", "u", success_threshold=success, failure_threshold=failure)
    assert run(probe, results) == verdicts


def test_a_readiness_probe_starts_not_ready() -> None:
    assert pr.initial_ready(pr.container_probes(CONTAINER, "h")) is False
    assert pr.initial_ready([]) is None


@pytest.mark.parametrize(
    ("status", "ok"), [(200, True), (302, True), (399, True), (404, False), (500, False)]
)
def test_http_success_is_2xx_and_3xx(status: int, ok: bool) -> None:
    assert pr.http_ok(status) is ok
