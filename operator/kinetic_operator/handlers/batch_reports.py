"""What a KineticBatch round believes of its Pods' reports: read bounded, checked, then recorded.

A chunk Pod's report is read and checked against the input hashes before its inputs' outcome is
recorded (`checked_reports`); a Pod that claims to be the batch's without its seal is reported
on the batch (`report_tampering`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from kinetic import storage
from kinetic.model import digest, layout
from kinetic.model.batchjobs import batch_total
from kinetic.model.resources import (
    KineticBatchSpec,
)

from kinetic_operator.handlers.batch_memory import BatchMemory
from kinetic_operator.kube import Kube
from kinetic_operator.logic.batch_logic import (
    UnitObservation,
    unit_inputs,
)
from kinetic_operator.logic.observed import PodView
from kinetic_operator.manifest import (
    ManifestBook,
    check_report,
)

log = logging.getLogger("kinetic.operator")


def report_tampering(kube: Kube, body: dict[str, Any], mem: BatchMemory) -> None:
    """What the manifest book found forged in storage, as Warning Events (each once)."""
    book = mem.outcomes.book
    if book is None:
        return
    for message in book.tampered:
        log.warning("%s: %s", (body.get("metadata") or {}).get("name"), message)
        kube.post_event(body, "Warning", "ManifestTampered", message)
    book.tampered.clear()


def checked_reports(
    mem: BatchMemory,
    home: layout.Home,
    spec: KineticBatchSpec,
    units: dict[int, UnitObservation],
) -> dict[int, UnitObservation]:
    """The units, with each ended chunk Pod's report read and checked first.

    A chunk Pod reports its inputs' result hashes in a report in storage,
    vouched for by the hash in its termination message. The report is read
    (bounded) before the batch records the chunk's outcome: one that is
    missing, too large or not what the Pod reported makes that attempt a
    failure (retried while retries last; the message says why), since its
    results cannot be checked. Storage not answering leaves the Pod looking
    as if still running, to be looked at again shortly.
    """
    chunk, total = spec.fixed_chunk, batch_total(spec)
    if chunk <= 1 or spec.template is None or spec.template.function is None:
        return units
    reports = _Reports(mem, home, mem.outcomes.book_for(home))
    terminal = mem.outcomes.recorded.terminal
    out = dict(units)
    for unit, obs in units.items():
        inputs = unit_inputs(unit, chunk, total)
        if inputs - terminal:  # recorded: its reports were read when it ended, or by the book
            out[unit] = reports.checked_unit(unit, inputs, obs)
    return out


@dataclass
class _Reports:
    """Reads and checks the reports of a batch's ended chunk Pods (`checked_reports`)."""

    mem: BatchMemory
    home: layout.Home
    book: ManifestBook

    def checked_unit(
        self, unit: int, inputs: Iterable[int], obs: UnitObservation
    ) -> UnitObservation:
        """The unit's Pods, each ended one as its report lets it count."""
        views = dict(obs.pods)
        for attempt, pod in obs.pods.items():
            expected = digest.chunk_report(pod.termination_message) if pod.terminal else None
            if expected is None or pod.name in self.book.read_reports:
                continue
            seen = self.checked_pod(unit, inputs, pod, expected)
            if seen is not None:
                views[attempt] = seen
        return replace(obs, pods=views)

    def checked_pod(
        self, unit: int, inputs: Iterable[int], pod: PodView, expected: str
    ) -> PodView | None:
        """None when the Pod's report checks out (its outcomes go to the book); otherwise
        the Pod as it counts: failed (the report refused), or running (storage silent)."""
        refused = self.mem.outcomes.refused_reports
        why = refused.get(pod.name)
        if why is None:
            try:
                found = check_report(self.home, pod.name, expected)
                self.book.take_report(unit, pod.name, found, dict.fromkeys(inputs, unit))
                return None
            except ValueError as exc:
                why = refused[pod.name] = str(exc)
            except storage.StorageError as exc:
                log.warning("Cannot read the report of %s yet: %s", pod.name, exc)
                self.mem.timers.recheck = 2.0
                return replace(pod, phase="Running", exit_code=None, termination_message=None)
        return replace(
            pod,
            phase="Failed",
            reason=None,
            disruption=None,
            exit_code=None,
            terminated_reason="ReportRefused",
            termination_message=f"its results cannot be checked: {why}",
        )
