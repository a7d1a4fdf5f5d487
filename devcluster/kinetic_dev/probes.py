"""Pure logic of the process node's probes: container spec -> probe, results -> verdict.

A kubelet probes each running container: readiness decides whether the pod
is Ready (and so whether its Service's Endpoints list it), liveness restarts
a container that stopped answering, startup holds both back until the
program is up. The thresholds work as in the kubelet: a verdict changes after
``successThreshold`` consecutive successes or ``failureThreshold``
consecutive failures. The node does the I/O (HTTP GET, TCP connect, exec)
and feeds results to ``observe``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from kinetic_dev.podspec import PodConfigError

KINDS = ("startup", "liveness", "readiness")


@dataclass(frozen=True)
class Probe:
    """One probe of one container, resolved to something the node can check."""

    kind: str  # startup | liveness | readiness
    action: str  # http | tcp | exec
    target: str  # URL, host:port, or "" for exec
    command: tuple[str, ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


class Timing(NamedTuple):
    """When and how often a probe runs, and how many results flip its verdict."""

    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int


@dataclass(frozen=True)
class ProbeState:
    """Consecutive results and the current verdict (None before the first one)."""

    successes: int = 0
    failures: int = 0
    verdict: bool | None = None


def _port(container: Mapping, port: object, where: str) -> int:
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise PodConfigError(f"{where}: port {port!r} is not a number nor a named container port")


def container_probes(container: Mapping, pod_ip: str) -> list[Probe]:
    """The container's probes; an unsupported or malformed one is a PodConfigError naming it."""
    probes = []
    for kind in KINDS:
        spec = container.get(f"{kind}Probe")
        if not spec:
            continue
        where = f"container {container['name']!r} {kind}Probe"
        timing = Timing(
            initial_delay=float(spec.get("initialDelaySeconds") or 0),
            period=float(spec.get("periodSeconds") or 10),
            timeout=float(spec.get("timeoutSeconds") or 1),
            # liveness and startup must use 1 (the API server enforces it)
            success_threshold=int(spec.get("successThreshold") or 1),
            failure_threshold=int(spec.get("failureThreshold") or 3),
        )
        if spec.get("httpGet"):
            h = spec["httpGet"]
            scheme = (h.get("scheme") or "HTTP").lower()
            host = h.get("host") or pod_ip
            path = h.get("path") or "/"
            if not path.startswith("/"):
                path = "/" + path
            url = f"{scheme}://{host}:{_port(container, h.get('port'), where)}{path}"
            probes.append(Probe(kind, "http", url, **timing._asdict()))
        elif spec.get("tcpSocket"):
            t = spec["tcpSocket"]
            host = t.get("host") or pod_ip
            probes.append(
                Probe(
                    kind,
                    "tcp",
                    f"{host}:{_port(container, t.get('port'), where)}",
                    **timing._asdict(),
                )
            )
        elif "exec" in spec:
            command = tuple((spec["exec"] or {}).get("command") or ())
            if not command:
                raise PodConfigError(f"{where}: exec needs a command")
            probes.append(Probe(kind, "exec", "", command, **timing._asdict()))
        else:
            raise PodConfigError(f"{where}: needs httpGet, tcpSocket or exec")
    return probes


def observe(probe: Probe, state: ProbeState, ok: bool) -> ProbeState:
    """One result in; the verdict flips only after the threshold's run of equal results."""
    if ok:
        state = replace(state, successes=state.successes + 1, failures=0)
        if state.successes >= probe.success_threshold:
            state = replace(state, verdict=True)
    else:
        state = replace(state, failures=state.failures + 1, successes=0)
        if state.failures >= probe.failure_threshold:
            state = replace(state, verdict=False)
    return state


def initial_ready(probes: list[Probe]) -> bool | None:
    """A container with a readiness probe starts not ready; without one, ready when running."""
    return False if any(p.kind == "readiness" for p in probes) else None


def http_ok(status: int) -> bool:
    """As the kubelet: 200 <= status < 400 is a success."""
    return 200 <= status < 400
