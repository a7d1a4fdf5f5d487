"""One operator among replicas: every replica serves admission, only the Lease's holder reconciles.

A replica runs two Kopf operators in one event loop, each in its own task
(so each keeps its own Kopf context):

* **admission**, from start to exit: the validating webhook, /healthz, the
  policy it judges by and the metrics endpoint. Readiness means "can judge
  a review", so a standby is Ready and the Service sends it reviews: the
  webhook answers while the leader is down or moving.
* **reconciliation** (the default registry: every handler of `main`), only
  once this replica holds the leader Lease (`election`). It starts from a
  full list, as after any restart: the truth is in the resources.

Leaving the lead has two ways, as in controller-runtime:

* **Lost** (the renew deadline passed: a stall, a partition, an API server
  that does not answer): the process exits at once (`election.lose`) and the
  kubelet restarts it as a standby. A watchdog thread and a fence under
  every write of the reconciler, to the API server (`kube.fenced`) and to
  storage (`storage.fence_writes`), both `Elector.require`, make sure nothing
  is written after the deadline, even by a reconcile that was running when
  the process stalled.
* **Clean shutdown** (SIGTERM: a rollout, a drain, `helm upgrade`): writes
  are refused from that moment, the Lease is released so a standby takes it
  at its next look, the reconciler stops, and admission goes on answering for
  `DRAIN_SECONDS` while the webhook Service forgets this Pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import kopf
from kinetic import storage
from kinetic.model.names import holder_identity

from kinetic_operator import metrics
from kinetic_operator.election import Elector, LeaseStore, PeerCheck, lose
from kinetic_operator.handlers import admission, policy, setup
from kinetic_operator.kube import load_config
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.state import OperatorState

log = logging.getLogger("kinetic.operator")

WATCHDOG_SECONDS = 0.5  # how often the watchdog thread checks the renew deadline
DRAIN_SECONDS = 5.0  # admission served after SIGTERM, while the Service forgets this Pod


@dataclass(frozen=True)
class Scope:
    """What the operators watch, and where the probes are served."""

    namespaces: list[str] = field(default_factory=list)  # empty: every namespace
    liveness: str | None = None  # e.g. http://0.0.0.0:8080/healthz


def admission_registry(settings: OperatorSettings) -> kopf.OperatorRegistry:
    """What every replica runs: Kopf's settings, metrics, the policy and the validators.

    The same start-up handlers as the single-process operator (`main`), so a
    standby judges reviews exactly as the leader would.
    """
    registry = kopf.OperatorRegistry()
    # Kopf's default registry logs in with the kubernetes client by itself; a fresh one
    # has no login until it is given one.
    kopf.on.login(registry=registry)(kopf.login_via_client)
    for startup in (setup.configure, setup.wait_for_kinds, setup.serve_metrics, policy.load_policy):
        kopf.on.startup(registry=registry)(startup)
    kopf.on.cleanup(registry=registry)(policy.stop_policy)
    if settings.webhook_enabled:
        admission.register_validators(registry)
    return registry


def reconciler_settings(settings: OperatorSettings) -> OperatorSettings:
    """The leader's reconciler: no second webhook server or metrics port in the process
    (the admission operator serves both; the reconciler's gauges join its registry)."""
    return settings.model_copy(update={"webhook_enabled": False, "metrics_port": 0})


def replica_identity() -> str:
    """This Pod's name and a fresh id for this process (a restarted container is another)."""
    pod = os.environ.get("HOSTNAME") or socket.gethostname()
    return holder_identity(pod, secrets.token_hex(4))


async def run_elected(settings: OperatorSettings, scope: Scope) -> None:
    """Serve admission now; reconcile while holding the Lease; release it on SIGTERM."""
    stopping = asyncio.Event()
    api = load_config()
    elector = Elector(
        store=LeaseStore(api, settings.operator_namespace),
        me=replica_identity(),
        blockers=PeerCheck(api, settings.operator_namespace).blocking,
    )
    log.info("Replica %s: serving admission; reconciling once it holds the Lease.", elector.me)
    metrics.leading(False)
    admission_stop = asyncio.Event()
    admission_run = asyncio.create_task(
        _kopf(
            admission_registry(settings),
            OperatorState(settings=settings),
            scope,
            admission_stop,
            liveness=scope.liveness,
            on_spawned=lambda: _on_signals(stopping.set),
        ),
        name="kinetic admission",
    )
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kinetic-election")
    try:
        if await _until_leading(elector, pool, stopping, admission_run):
            await _lead(elector, pool, settings, scope, stopping, admission_run)
        if stopping.is_set():
            await _drain(admission_run)
    finally:
        admission_stop.set()
        await admission_run
        pool.shutdown(wait=False)


async def _drain(admission: asyncio.Task) -> None:
    """Keep answering reviews for a moment after SIGTERM.

    The Pod leaves the webhook Service's endpoints when it starts terminating,
    but every node's proxy learns that a little later; a review routed here
    meanwhile would meet a closed port, and the webhook fails open.
    """
    log.info("Stopping: answering admission reviews for %.0f s more.", DRAIN_SECONDS)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(admission), timeout=DRAIN_SECONDS)


async def _until_leading(
    elector: Elector, pool: ThreadPoolExecutor, stopping: asyncio.Event, admission: asyncio.Task
) -> bool:
    """Look at the Lease until this replica holds it (True), or it is told to stop (False)."""
    loop = asyncio.get_running_loop()
    while not stopping.is_set() and not admission.done():
        try:
            if await loop.run_in_executor(pool, elector.step):
                return True
        except Exception as exc:  # noqa: BLE001 - the API server may be away; look again
            log.warning("Could not read the leader Lease (looking again): %s", exc)
        await _sleep_unless(stopping, elector.pause() if elector.seen else 1.0)
    return False


async def _lead(
    elector: Elector,
    pool: ThreadPoolExecutor,
    settings: OperatorSettings,
    scope: Scope,
    stopping: asyncio.Event,
    admission: asyncio.Task,
) -> None:
    """Reconcile, renewing the Lease every retry period, until told to stop (or lost)."""
    loop = asyncio.get_running_loop()
    metrics.leading(True)
    _start_watchdog(elector)
    state = OperatorState(settings=reconciler_settings(settings), fence=elector.require)
    storage.fence_writes(elector.require)  # storage too: only the leader writes
    reconcile_stop = asyncio.Event()
    reconciler = asyncio.create_task(
        _kopf(
            kopf.get_default_registry(),
            state,
            scope,
            reconcile_stop,
            liveness=None,
            on_spawned=lambda: _on_signals(stopping.set),
        ),
        name="kinetic reconciler",
    )
    while not stopping.is_set() and not reconciler.done() and not admission.done():
        await _sleep_unless(stopping, elector.timings.retry_period)
        with contextlib.suppress(Exception):  # a failed renewal: the deadline decides
            await loop.run_in_executor(pool, elector.step)
        if not elector.leading and not elector.resigned:
            lose("no renewal within the renew deadline")
    if reconciler.done() and not stopping.is_set():
        log.error("The reconciler stopped by itself; handing the Lease over and exiting.")
    elector.resign()  # from here on every write of the reconciler is refused
    try:
        await loop.run_in_executor(pool, elector.release)
    except Exception as exc:  # noqa: BLE001 - the Lease then expires instead
        log.warning("Could not release the leader Lease (it expires instead): %s", exc)
    metrics.leading(False)
    reconcile_stop.set()
    await reconciler


async def _kopf(
    registry: kopf.OperatorRegistry,
    state: OperatorState,
    scope: Scope,
    stop: asyncio.Event,
    *,
    liveness: str | None,
    on_spawned: Callable[[], None],
) -> None:
    """One Kopf operator in this loop, stopped by ``stop`` (never by Kopf's own signal
    handlers: ``on_spawned`` puts ours back once Kopf has installed its own)."""
    existing = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    tasks = await kopf.spawn_tasks(
        registry=registry,
        settings=kopf.OperatorSettings(),
        memo=kopf.Memo(kinetic=state),
        standalone=True,
        clusterwide=not scope.namespaces,
        namespaces=scope.namespaces,
        liveness_endpoint=liveness,
        stop_flag=stop,
    )
    on_spawned()
    await kopf.run_tasks(tasks, ignored=existing)


def _on_signals(stop: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


async def _sleep_unless(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout=seconds)


def _start_watchdog(elector: Elector) -> None:
    """Exit from a thread of its own once the renew deadline has passed.

    The event loop may be busy or stalled when the deadline passes; this
    thread does not wait for it (and after a SIGSTOP it runs as soon as the
    process does).
    """

    def watch() -> None:
        while True:
            time.sleep(WATCHDOG_SECONDS)
            if not elector.resigned and not elector.leading:
                lose("the renew deadline passed (watchdog)")

    threading.Thread(target=watch, name="kinetic-leader-watchdog", daemon=True).start()
