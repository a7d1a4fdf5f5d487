"""Operator start-up: Kopf's settings, and the ConfigMap clients read.

Kopf's defaults suit operators that keep state in annotations; ours keeps
everything in status and uses only event handlers and indexes, so we turn
off the things that would grow objects or flood the event log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import kopf
from kinetic import storage
from kinetic.model.names import LABEL_MANAGED_BY, MANAGED_BY

from kinetic_operator import memtrace, metrics
from kinetic_operator.logic.seal import Sealer
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.state import operator_state
from kinetic_operator.webhook import configure_admission

log = logging.getLogger("kinetic.operator")


class NoDiffBase(kopf.DiffBaseStorage):
    """Kopf's record of an object's last-handled state, kept nowhere.

    Kopf builds that record (a deep copy of the whole body) on every event,
    for change handlers to diff against. This operator has none — only
    event handlers and indexes — so at thousands of Pod events a second
    the copies were pure cost, and storing them would grow every object.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Tune Kopf for small bookkeeping and few events, with no peering of its own.

    The operator's state (its settings, API wrapper and caches) is the one in
    Kopf's memo, shared by every handler: put there by `python -m
    kinetic_operator`, or made here (or by an earlier start-up handler) from
    the environment under `kopf run`.
    """
    state = operator_state(memo)
    ours = state.settings
    # Every finished Pod costs a log archive and every busy batch manifest writes:
    # gs:// through the standard library's HTTP client costs a third of the CPU of
    # google-cloud-storage per call, which keeps the reaper up with a batch's Pods.
    storage.use_lean_gcs()
    # Our own Events say what happened; Kopf's per-handler INFO events would
    # add one event per handler run per object.
    settings.posting.level = logging.WARNING
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kinetic.dev")
    settings.persistence.diffbase_storage = NoDiffBase()
    # Kopf logs a line per handler run per object at INFO; at thousands of
    # children that drowns what matters. Our own logger stays at INFO.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # The probes hit /healthz every few seconds; an access line each would
    # bury the operator's own lines in `kubectl logs`. Errors still show.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # No Kopf peering objects, no freeze between equal-priority peers: replicas agree
    # through the leader Lease instead (`kinetic_operator.elected`).
    settings.peering.standalone = True
    # Ask the server to end every watch after a few minutes and reconnect, so
    # a silently dropped connection is noticed; inactivity catches the rest.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.reconnect_backoff = 1.0
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    # Kopf waits this long after an object's event for more of the same object's
    # events before calling handlers. Our reconciles coalesce bursts themselves (one
    # per batch at a time), so every Pod event can go through at once: a finished Pod
    # becomes the next launch without a 0.1 s pause.
    settings.batching.batch_window = 0.01
    # Only our attempt Pods, filtered by the API server, not in memory.
    settings.watching.label_selectors["v1", "pods"] = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
    # Admission: refuse changes to a batch's immutable fields at `kubectl apply`
    # time. The webhook fails open (failurePolicy Ignore); the batch handler's
    # own refusal (SpecAccepted=False) stays behind it.
    configure_admission(settings, ours, lambda: state.kube)
    log.info(
        "Kinetic operator: storage root %s, default image %s, service account %s, namespaces %s",
        ours.storage_root or "(none)",
        ours.default_image,
        ours.runner_service_account,
        ", ".join(ours.namespaces) or "(all)",
    )
    if ours.webhook_enabled:
        log.info(
            "Admission webhook on %s:%d, reached as %s",
            ours.webhook_addr or "*",
            ours.webhook_port,
            ours.webhook_host or "(the listening address)",
        )


@kopf.on.startup()
async def wait_for_kinds(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Start Kopf only once the API server's discovery serves both kinds.

    Kopf looks its resources up once, after the start-up handlers, and again
    only when a CRD changes. An operator started the moment an API server
    came back (a replica taking the lead after an outage) could look before
    discovery lists the CRDs, and then would never watch them.
    """
    state = operator_state(memo)
    waited = 0.0
    while not await asyncio.to_thread(state.kube.serves_kinds):
        if waited == 0.0 or waited % 30 < 0.5:
            logger.warning("Waiting for the API server to serve the kinetic.dev kinds")
        await asyncio.sleep(0.5)
        waited += 0.5


@kopf.on.startup()
async def load_seal(memo: kopf.Memo, **_: Any) -> None:
    """Load the key that seals the Pods this operator makes (creating it on first start),
    before any Pod is watched: a Pod is judged by its seal from the first sight
    (`kinetic_operator.logic.seal`). Kopf retries this handler until it succeeds."""
    state = operator_state(memo)
    settings = state.settings
    key, since = await asyncio.to_thread(
        state.kube.seal_key, settings.operator_namespace, settings.seal_secret
    )
    state.kube.sealer = Sealer(key, since)
    log.info(
        "Pods are sealed with the key in %s/%s", settings.operator_namespace, settings.seal_secret
    )


@kopf.on.startup()
async def serve_metrics(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Serve Prometheus metrics; gauges read the operator's memory at each scrape."""
    state = operator_state(memo)
    metrics.watch_queue(lambda: len(state.serializer))
    metrics.phases_collector(
        {
            metrics.KIND_JOB: lambda: _phases(state.jobs.values()),
            metrics.KIND_BATCH: lambda: _phases(state.batches.values()),
        }
    )
    port = state.settings.metrics_port
    if port:
        memo.metrics_server = asyncio.create_task(_serve_metrics_when_free(port, logger))


async def _serve_metrics_when_free(port: int, logger: kopf.Logger) -> None:
    """Bind the metrics port, retrying while another process holds it.

    Metrics are for watching the operator, not a reason to stop it; but a
    port busy for a moment (an old Pod still exiting) must not leave the
    operator unobservable until its next restart.
    """
    delay = 1.0
    while True:
        try:
            metrics.serve(port)
        except OSError as exc:
            logger.error(
                "Cannot serve Prometheus metrics on port %d (KINETIC_METRICS_PORT): %s; "
                "retrying in %.0f s",
                port,
                exc,
                delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)
        else:
            logger.info("Prometheus metrics on port %d at /metrics", port)
            return


def _phases(memories: Any) -> list[str]:
    """The phase of each remembered object (copied first: the watch may add one meanwhile)."""
    found = (metrics.phase_of(m.body.get()) for m in list(memories))
    return [p for p in found if p is not None]


@kopf.on.cleanup()
def stop_retries(memo: kopf.Memo, **_: Any) -> None:
    """Pending retries and wake-ups die with the process; a restart re-lists everything."""
    operator_state(memo).serializer.cancel_all()


@kopf.on.startup()
async def trace_memory(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Opt-in heap snapshots (KINETIC_TRACEMALLOC_FRAMES): see `memtrace`."""
    ours = operator_state(memo).settings
    if memtrace.start(ours.tracemalloc_frames):
        memo.memtrace = memtrace.install(asyncio.get_running_loop(), ours.tracemalloc_seconds)
        logger.warning(
            "Tracing allocations (%d frames): heap snapshots on SIGUSR1%s",
            ours.tracemalloc_frames,
            f" and every {ours.tracemalloc_seconds:g} s" if ours.tracemalloc_seconds else "",
        )


@kopf.on.startup()
def publish_config(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Publish what clients need (storage root, default image) so they need no setup.

    A missing namespace or a forbidden write is logged, not fatal: jobs
    still run; clients can be configured with KINETIC_* instead.
    """
    state = operator_state(memo)
    ours = state.settings
    try:
        state.kube.publish_config_map(
            ours.operator_namespace, ours.config_map_name, client_config(ours)
        )
    except Exception as exc:  # noqa: BLE001
        logger.warning(
            "Could not publish ConfigMap %s/%s (clients will need KINETIC_STORAGE_ROOT): %s",
            ours.operator_namespace,
            ours.config_map_name,
            exc,
        )
    else:
        logger.info("Published ConfigMap %s/%s", ours.operator_namespace, ours.config_map_name)


def client_config(settings: OperatorSettings) -> dict[str, str]:
    """The ConfigMap's data: camelCase keys, like the CRDs."""
    data = {
        "defaultImage": settings.default_image,
        "accelerators": ",".join(settings.accelerator_catalog.names()),
        "maxInputs": str(settings.max_inputs),
        "runnerPythons": ",".join(settings.runner_pythons),
    }
    if settings.storage_root:
        data["storageRoot"] = settings.storage_root
    return data
