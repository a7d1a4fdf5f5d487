"""A KineticBatch round's Pod creations: a unit's Pod, or a gang's members, a few at a time.

A Pod that cannot be built or that the API server refuses becomes a failed attempt of its unit
(`create_pods`), so a refusal is reported once, not retried forever.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kinetic.model.batchjobs import batch_total
from kinetic.model.catalog import is_tpu
from kinetic.model.data import GCSFUSE_DRIVER
from kinetic.model.grid import Grid
from kinetic.model.names import gang_pod_name, input_pod_name
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import (
    KineticBatchSpec,
)

from kinetic_operator import metrics
from kinetic_operator.handlers.batch_round import (
    Batch,
)
from kinetic_operator.handlers.batch_units import (
    grid_of,
)
from kinetic_operator.handlers.owned import create_sealed, ensure_gang_objects
from kinetic_operator.logic import podspec
from kinetic_operator.logic.attempts import AttemptCause
from kinetic_operator.logic.batch_logic import (
    UnitObservation,
)
from kinetic_operator.logic.batch_pods import (
    SizedUnit,
    build_unit_pod,
    unit_job,
)
from kinetic_operator.logic.datavolumes import batch_uses_fuse
from kinetic_operator.logic.errors import Rejected, UnitRefused
from kinetic_operator.logic.gangs import Gang, ranks_to_create
from kinetic_operator.logic.observed import PodView
from kinetic_operator.logic.units import units_sized

CREATE_THREADS = 8


def create_pods(
    batch: Batch,
    spec: KineticBatchSpec,
    hosts_of: Callable[[int], int],
    todo: Iterable[tuple[int, int]],
    causes: Mapping[int, AttemptCause | None] | None = None,
    units: Mapping[int, UnitObservation] | None = None,
    where: tuple[Grid, IndexSet] | None = None,
) -> None:
    """Create the Pods for ``(unit, attempt)`` pairs, a few at a time; AlreadyExists is fine.

    ``hosts_of``: each unit's hosts, as resolved when the spec was accepted.
    ``where``: the batch's grid and the inputs already settled (a sized unit's Pod runs
    only those of its inputs that are not).

    A multi-host unit's pair creates the members `gangs.ranks_to_create` names.

    A Pod that cannot be built or that the API server refuses becomes a
    failed attempt in memory, so the next decision spends a retry on it
    (and fails the inputs once they are spent) instead of looping on it.
    """
    kube, settings, mem = batch.kube, batch.settings, batch.mem
    book, pods = mem.outcomes.book, mem.pods
    known = {i: r.sha256 for i, r in book.hashes.items()} if book is not None else {}
    uid = batch.meta.get("uid", "")

    grid, settled = where or (grid_of(spec, batch.old), IndexSet())
    total = batch_total(spec)

    def sized(unit: int) -> SizedUnit | None:
        if not units_sized(spec):
            return None
        inputs = grid.inputs_of(unit, total)
        return SizedUnit(len(inputs), tuple(inputs - settled))

    def rename(manifest: dict[str, Any], name: str) -> dict[str, Any]:
        return podspec.renamed(manifest, name, batch.home)

    def one(pair: tuple[int, int]) -> None:
        unit, attempt = pair
        try:
            pod = build_unit_pod(
                batch.name,
                batch.namespace,
                uid,
                spec,
                settings,
                unit,
                attempt,
                mem.accepted.hashes,
                known,
                fuse_driver=fuse,
                sized=sized(unit),
            )
            gang = (units or {}).get(unit, UnitObservation()).gang
            todo = _unit_pods(batch, spec, pod, gang, unit, attempt, hosts_of(unit))
            names = {m["metadata"]["name"] for m in todo}
            pods.creating[unit] = attempt
            if hosts_of(unit) > 1:
                pods.creating_members.update(names)
            try:
                made = [create_sealed(kube, m, rename) for m in todo]
                if made:
                    pods.creating_names[unit] = made[0].name
                for m, body in zip(made, todo, strict=True):
                    if hosts_of(unit) > 1 and m.name != body["metadata"]["name"]:
                        pods.creating_members.discard(body["metadata"]["name"])
                        pods.creating_members.add(m.name)  # its own name was held by another
                first = {pod["metadata"]["name"], gang_pod_name(pod["metadata"]["name"], 0)}
                pairs_made = zip(made, todo, strict=True)
                if any(m.created for m, b in pairs_made if b["metadata"]["name"] in first):
                    inputs = len(grid.inputs_of(unit, batch_total(spec)))
                    cause = "first" if attempt == 1 else (causes or {}).get(unit)
                    metrics.attempt_created(metrics.KIND_BATCH, cause, inputs)
                    waited = batch.mem.refills.taken(1, batch.now.timestamp())
                    metrics.slot_refilled(metrics.KIND_BATCH, waited)
            except Exception:
                pods.creating.pop(unit, None)  # not created: the next reconcile tries again
                pods.creating_names.pop(unit, None)
                pods.creating_members.difference_update(names)
                raise
        except (UnitRefused, Rejected) as exc:
            pods.creating.pop(unit, None)
            pods.creating_names.pop(unit, None)
            why = f"input {unit} could not be launched: {exc}"
            pods.refused.setdefault(unit, {})[attempt] = PodView(
                name=input_pod_name(batch.name, unit, attempt),
                attempt=attempt,
                index=unit,
                phase="Failed",
                terminated_reason="Rejected",
                termination_message=why,
            )

    pairs = list(todo)
    if pairs:
        kube.ensure_service_account(batch.namespace, settings.runner_service_account)
    # Read once for the round, and only when a Pod would mount a fuse volume.
    fuse = kube.csi_driver_installed(GCSFUSE_DRIVER) if pairs and batch_uses_fuse(spec) else None
    each(one, pairs)


def _unit_pods(
    batch: Batch,
    spec: KineticBatchSpec,
    pod: dict[str, Any],
    gang: Gang | None,
    unit: int,
    attempt: int,
    hosts: int,
) -> list[dict[str, Any]]:
    """The Pod of a unit's attempt, or the members of its gang to create now."""
    if hosts <= 1:
        return [pod]
    settings = batch.settings
    dns = settings.rendezvous == "dns"
    todo = ranks_to_create(gang, attempt, pod["metadata"]["name"], hosts, dns=dns)
    if todo is None:
        return []
    service = ensure_gang_objects(batch.kube, batch.owner, settings)
    job = unit_job(spec, unit)
    tpu = job is not None and is_tpu(settings.accelerator_catalog, job.accelerator)
    return [
        podspec.gang_member(
            pod,
            batch.owner,
            rank,
            hosts,
            dns=dns,
            coordinator=todo.coordinator,
            tpu=tpu,
            home=batch.home,
            service=service,
            domain=settings.cluster_domain,
        )
        for rank in todo.ranks
    ]


def each(fn: Any, items: Any) -> None:
    items = list(items)
    if len(items) <= 1:
        for item in items:
            fn(item)
        return
    with ThreadPoolExecutor(max_workers=min(CREATE_THREADS, len(items))) as pool:
        list(pool.map(fn, items))
