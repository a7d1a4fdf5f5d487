"""One input of a batch, seen from the client: `InputHandle` and what it reads.

There is no Kubernetes object per input. What the client knows of input
``i`` comes from three places, in this order of authority:

1. the batch status: counts and index ranges. An input recorded there as
   succeeded, failed or cancelled never changes again. When the ranges were
   cut at the status size cap (``status.truncated``), the manifest header
   holds them complete;
2. the Pods of the input's unit (``kinetic.dev/batch=<grp>``,
   ``kinetic.dev/index=<unit start>``), while it is not recorded: the newest
   attempt's phase says PENDING or RUNNING. Finished Pods are deleted by the
   operator after a TTL, their logs archived first;
3. the manifest shard holding the input: its attempt history, a container
   input's result (termination message) and what went wrong. It outlives the
   Pods and the batch itself.

A result is taken only on the word of the API server: a Pod's termination
message while the Pod exists, else the manifest as the batch's status
vouches for it (`kinetic.api.vouched`). Once the batch is gone, the manifest is
still read for outcomes, attempts and messages, but no result is taken from
storage (`kinetic.model.digest.Unverifiable`): nothing vouches for it any more.

A handle keeps no state beyond what it was created with, so one from
`kinetic.attach("<grp>-<i>")` in another process is as good as the original.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from annotated_types import MaxLen

from kinetic import storage
from kinetic.api import reference
from kinetic.api.handle import (
    JobCancelled,
    JobFailed,
    JobHandle,
    JobStatus,
    ResultDeleted,
    label_int,
    last_lines,
    notify,
    recorded_pods,
    sort_by_attempt,
)
from kinetic.api.input_records import RECORD_WAIT as RECORD_WAIT  # kinetic.api.inputs.*, as before
from kinetic.api.input_records import RecordedOutcomes as RecordedOutcomes
from kinetic.api.input_records import chunk_outcome, owned_by
from kinetic.api.input_records import input_summary as input_summary
from kinetic.api.input_records import live_phase as live_phase
from kinetic.api.input_records import read_manifest as read_manifest
from kinetic.api.input_records import read_shard as read_shard
from kinetic.api.input_records import recorded_message as recorded_message
from kinetic.api.input_records import status_from_header as status_from_header
from kinetic.api.input_records import terminated_state as terminated_state
from kinetic.api.input_records import vouched_manifest as vouched_manifest
from kinetic.api.kube import KubeClient
from kinetic.api.reference import DEFAULT_CLEANUP_TIMEOUT
from kinetic.api.submission import SubmissionError as SubmissionError  # kinetic.SubmissionError
from kinetic.api.submission import submission_exception
from kinetic.api.vouched import VouchedManifest
from kinetic.model import digest, layout, names, payload, progress
from kinetic.model import resources as r
from kinetic.model.grid import Grid
from kinetic.model.limits import MAX_REPORT_BYTES
from kinetic.model.manifest import FINAL_OUTCOMES, InputRecord, ManifestHeader
from kinetic.model.ranges import IndexSet

if TYPE_CHECKING:
    from kubernetes.client import V1Pod


log = logging.getLogger("kinetic")

_UNENDED = ("pending", "running")  # attempt outcomes that may still change
_ATTEMPT_OUTCOME = {
    JobStatus.SUCCEEDED: "success",
    JobStatus.FAILED: "failure",
    JobStatus.CANCELLED: "cancelled",
}


def _cancel_indexes_limit() -> int:
    """The schema's bound on spec.cancelIndexes, read from the model so the two never differ."""
    for meta in r.KineticBatchSpec.model_fields["cancel_indexes"].metadata:
        if isinstance(meta, MaxLen):
            return meta.max_length
    return 65536


# --------------------------------------------------------------------------- one input


@dataclass
class InputHandle(JobHandle):
    """One input of a batch, with the same questions and actions as a job's handle.

    ``job_id`` is ``<group>-<index>``; ``group_id`` and ``group_index`` are
    set. Answers come from the batch (status, Pods) and the manifest, never
    from an object of the input's own: there is none.
    """

    container: bool = False
    chunk_size: int = 1
    sized: bool = False  # its batch sizes units at run time: its unit is the grid's
    recorded_sha256: str | None = None  # the manifest's hash, when the batch read it already
    recorded_bytes: int | None = None  # and the size recorded beside it
    unvouched: str | None = None  # why nothing vouches for its manifest, when the batch knew

    @classmethod
    def describes(cls, d: dict[str, Any]) -> bool:
        """A saved handle of an input has its batch and index (`JobHandle.from_dict`)."""
        return bool(d.get("group_id")) and d.get("group_index") is not None

    @property
    def group_kind(self) -> str | None:
        """``"map"``: the reference's name for a member of a fan-out, as every input of a
        KineticBatch is (``run_async_map``, ``kinetic.batch`` and manifests alike)."""
        return "map"

    @property
    def index(self) -> int:
        assert self.group_index is not None
        return self.group_index

    @property
    def group(self) -> str:
        assert self.group_id is not None
        return self.group_id

    @property
    def unit(self) -> int:
        """The first input of the unit (the Pod) that runs this input: every ``chunk_size``
        inputs, or, where the operator sizes units, as the batch's grid says (its status, or
        its manifest once it is gone)."""
        if not self.sized:
            return names.unit_start(self.index, self.chunk_size)
        return self._grid().unit_of(self.index)

    def _grid(self) -> Grid:
        """The batch's grid of units (`kinetic.model.grid`)."""
        if not self.sized:
            return Grid.fixed(self.chunk_size)
        obj = self._batch()
        text = ((obj or {}).get("status") or {}).get("unitGrid")
        if obj is None:
            header = self._header()
            text = header.unit_grid if header is not None else None
        return Grid.parse(text)

    def _unit_inputs(self) -> IndexSet:
        """The inputs of this input's unit."""
        grid = self._grid()
        return grid.inputs_of(grid.unit_of(self.index), self._total(self._batch()))

    def _log_text(self, tail: int | None, rank: int = 0) -> str:
        """This input's part of its unit's log (the whole log of a Pod of its own)."""
        text = super()._log_text(None, rank)
        if self._several and progress.PREFIX.decode() in text:
            text = progress.section(text, self.index)  # the runner marks each input's part
        return last_lines(text, tail)

    @property
    def _several(self) -> bool:
        """Whether its Pod runs other inputs too (a chunk, or a sized unit)."""
        return self.sized or self.chunk_size > 1

    # ----------------------------------------------------------------- reading

    def _batch(self) -> dict | None:
        return self._kube.get(r.BATCH_PLURAL, self.namespace, self.group)

    def _home(self) -> layout.Home | None:
        """The batch's own storage prefix (inputs have none of their own)."""
        if not self.uid:
            return None
        return layout.batch_home(self._root(), self.namespace, self.group, self.uid)

    def _vouched(self) -> VouchedManifest | None:
        home = self._home()
        if home is None:
            return None
        return vouched_manifest(home, self.namespace, self.group, self._kube)

    def _header(self) -> ManifestHeader | None:
        """The manifest header: as the batch's status vouches for it, or, once the batch is
        gone, the newest one stored."""
        manifest = self._vouched()
        return manifest.header() if manifest is not None else None

    def _record(self, manifest: VouchedManifest | None = None) -> InputRecord | None:
        """This input's record in its manifest shard, or None before the operator wrote it
        (as the status vouches for it; once the batch is gone, as stored)."""
        manifest = manifest or self._vouched()
        shard = manifest.shard(layout.shard_of(self.index)) if manifest is not None else None
        return None if shard is None else shard.inputs.get(str(self.index))

    def stored_result(self) -> tuple[digest.Reported | None, str | None]:
        """The hash and size the runner reported for this input's result, and, when there is
        none the API server vouches for, why (see `JobHandle.stored_result`).

        From its manifest record as the batch status vouches for it, else from
        its ended Pod's termination message (a chunk's: the report that message
        vouches for) while the Pod exists — both come from the runner through
        the API server, and the Pod is there before the operator writes the
        record — else the record once the manifest catches up.
        """
        if self.recorded_sha256:
            return digest.Reported(self.recorded_sha256, self.recorded_bytes), None
        if self.unvouched is not None:
            return None, self.unvouched
        manifest = self._vouched()
        if manifest is None:
            return None, "the input's batch has no known UID"
        vouched = manifest.vouched
        if vouched:
            record = self._record(manifest)
            # Only a record of how it ended: a running input's may hold an earlier attempt's.
            if record is not None and record.result_sha256 and record.outcome in FINAL_OUTCOMES:
                return _stored(record), None
        reported = self._reported_by_pod()
        if reported is not None:
            return reported, None
        if not vouched:
            return None, manifest.why_not()
        record = self._wait_for_record()
        return (_stored(record) if record is not None else None), None

    def _expected_sha256(self) -> str | None:
        return self.result_anchor()[0]

    def _reported_by_pod(self) -> digest.Reported | None:
        """The result hash a Pod the manifest records for this input reported (none before
        the manifest records it: a hash decides what is unpickled)."""
        home = self._home()
        record = self._record()
        attempts = [a.wire() for a in record.attempts] if record is not None else []
        listed = self._kube.list_pods(self.namespace, self._pod_selector())
        for pod in reversed(sort_by_attempt(recorded_pods(listed, attempts))):
            ended = terminated_state(pod)
            if ended is None or pod.metadata.uid is None or not owned_by(pod, self.uid):
                continue
            if self.sized:
                return None  # a unit reports each input's digest in its log: the record has it
            if self.chunk_size <= 1:
                found = digest.reported_result(ended.message)
                if found is not None:
                    return found
                continue
            report = digest.chunk_report(ended.message)
            if report is None or home is None:
                continue
            try:
                data = storage.read_at_most(home.report_uri(pod.metadata.name), MAX_REPORT_BYTES)
                hashes = digest.parse_report(data, report)
            except (storage.NotFound, ValueError):
                continue
            if self.index in hashes:
                return hashes[self.index]
        return None

    def _get(self) -> dict | None:
        """The batch: the object whose status records this input."""
        return self._batch()

    def _pod_selector(self) -> str:
        return f"{names.LABEL_BATCH}={self.group},{names.LABEL_INDEX}={self.unit}"

    def _archived_log_uri(self, pod: str) -> str | None:
        home = self._home()
        return home.log_uri(pod) if home is not None else None

    def _trusted(self, pods: list[V1Pod]) -> list[V1Pod]:
        """The Pods the manifest records for this input; until it records any (it is written
        every few seconds), those under the very name the operator gives the unit's attempt.

        Someone else's Pod can hold that name only if it was made first, and then the
        operator's Pod has another name; for that moment such a Pod's log could be shown.
        Results never come from a Pod the manifest does not record (`_reported_by_pod`).
        """
        record = self._record()
        if record is not None and record.attempts:
            return recorded_pods(pods, [a.wire() for a in record.attempts])
        return [
            p
            for p in pods
            if p.metadata.name
            == names.input_pod_name(self.group, self.unit, label_int(p, names.LABEL_ATTEMPT))
        ]

    def _recorded_attempts(self) -> list[dict[str, Any]]:
        """The input's attempts as the manifest records them (as far as the batch's status
        vouches for it)."""
        record = self._record()
        return [a.wire() for a in record.attempts] if record is not None else []

    def _last_recorded_attempt(self) -> dict[str, Any] | None:
        record = self._record()
        if record is None or not record.attempts:
            return None
        return max(record.attempts, key=lambda a: a.attempt).wire()

    def _spec(self) -> dict[str, Any]:
        """What this input runs (`input_job_spec` of the batch's spec)."""
        return input_job_spec((self._batch() or {}).get("spec") or {}, self.index)

    # ----------------------------------------------------------------- observing

    def status(self) -> JobStatus:
        """SUCCEEDED/FAILED/CANCELLED once recorded, else RUNNING/PENDING from its Pod.

        NOT_FOUND when neither the batch nor its manifest knows the input (or
        the batch was deleted before the input ended).
        """
        obj = self._batch()
        if obj is None:
            return self._status_after_batch()
        status = obj.get("status", {})
        if self.index >= (status.get("total") or spec_input_total(obj["spec"])):
            return JobStatus.NOT_FOUND
        outcomes = RecordedOutcomes(self._header)
        outcomes.update(status, final=r.Phase(status.get("phase", "PENDING")).terminal)
        recorded = outcomes.of(self.index)
        if recorded is not None:
            return recorded
        return self._live_status()

    def _live_status(self) -> JobStatus:
        pods = self._live_pods()
        return live_phase(pods[-1] if pods else None)

    def _status_after_batch(self) -> JobStatus:
        """The input's status once the batch is gone: the manifest's record, else NOT_FOUND."""
        header = self._header()
        if header is None or self.index >= header.total:
            return JobStatus.NOT_FOUND
        outcomes = RecordedOutcomes(lambda: header)
        outcomes.merge(header.succeeded_indexes, header.failed_indexes, header.cancelled_indexes)
        recorded = outcomes.of(self.index)
        if recorded is not None:
            return recorded
        record = self._record()
        if record is not None and record.outcome in FINAL_OUTCOMES:
            return JobStatus(record.outcome)
        return JobStatus.NOT_FOUND

    def attempts(self) -> list[dict[str, Any]]:
        """The input's attempts, oldest first: the manifest's history merged with live Pods.

        Each is an `AttemptRecord` as JSON (attempt, pod, startTime, endTime,
        exitCode, reason, message, outcome). The manifest is written
        debounced, so the newest attempts come from their Pods.
        """
        record = self._record()
        if self.sized and (record is None or record.outcome not in FINAL_OUTCOMES):
            if self.status() in (JobStatus.SUCCEEDED, JobStatus.FAILED):  # it ran, and ended:
                record = self._wait_for_record()  # the manifest catches up within ~10 s
        merged = self._merged_attempts(record, self._live_pods())
        if merged and merged[-1].get("outcome") in _UNENDED:
            return self._settled(merged, self.status())
        return merged

    def _merged_attempts(self, record: InputRecord | None, pods: list[V1Pod]) -> list[dict]:
        by_attempt: dict[int, dict[str, Any]] = {
            a.attempt: a.wire() for a in (record.attempts if record else [])
        }
        if self.sized:  # its unit's Pods count their own attempts, not this input's
            return [by_attempt[n] for n in sorted(by_attempt)]
        for pod in pods:
            number = int((pod.metadata.labels or {}).get(names.LABEL_ATTEMPT, 0))
            if number < 1:
                continue
            known = by_attempt.get(number)
            if known is None or known.get("outcome") in _UNENDED:
                by_attempt[number] = {**(known or {}), **self._attempt_from_pod(pod, number)}
        return [by_attempt[n] for n in sorted(by_attempt)]

    @staticmethod
    def _settled(attempts: list[dict], phase: JobStatus) -> list[dict]:
        """Once the batch recorded the input's end, its newest attempt ended that way too.

        (Its Pod may still be stopping, and the manifest is written debounced.)
        """
        outcome = _ATTEMPT_OUTCOME.get(phase)
        if outcome is None or not attempts or attempts[-1].get("outcome") not in _UNENDED:
            return attempts
        return [*attempts[:-1], {**attempts[-1], "outcome": outcome}]

    def _attempt_from_pod(self, pod: V1Pod, number: int) -> dict[str, Any]:
        phase = pod.status.phase if pod.status else None
        out: dict[str, Any] = {"attempt": number, "pod": pod.metadata.name}
        if pod.status and pod.status.start_time:
            out["startTime"] = names.fmt_time(pod.status.start_time)
        ended = terminated_state(pod)
        if ended is not None:
            if ended.finished_at:
                out["endTime"] = names.fmt_time(ended.finished_at)
            out["exitCode"] = ended.exit_code
            if ended.reason:
                out["reason"] = ended.reason
        if phase == "Running":
            out["outcome"] = "running"
        elif phase in ("Succeeded", "Failed"):
            if self._several:
                chunk = chunk_outcome(ended.message if ended else None, self.index)
                out["outcome"] = chunk or "running"
            else:
                out["outcome"] = "success" if phase == "Succeeded" else "failure"
        else:
            out["outcome"] = "pending"
        return out

    def describe(self) -> dict[str, Any]:
        """The input's phase, attempts and message, shaped like a KineticJob's status."""
        phase = self.status()
        record = self._record()
        attempts = self._settled(self._merged_attempts(record, self._live_pods()), phase)
        out: dict[str, Any] = {
            "groupId": self.group,
            "index": self.index,
            "phase": phase.value,
            "attempt": attempts[-1]["attempt"] if attempts else 0,
            "attempts": attempts,
        }
        message = self._message(record, attempts)
        if message:
            out["message"] = message
        if self.container and phase is JobStatus.SUCCEEDED:
            out["result"] = self._container_result()
        return out

    def message(self) -> str | None:
        """Why the input failed (or was cancelled), as the operator recorded it; None if unknown."""
        return self._message(self._record())

    def _message(
        self, record: InputRecord | None, attempts: list[dict[str, Any]] | None = None
    ) -> str | None:
        """Why the input ended as it did: the manifest's word, its last attempt's, or submission."""
        return recorded_message(record, attempts) or self._submission_message()

    def _submission_message(self) -> str | None:
        found = self._submission_failure()
        return found[0] if found is not None else None

    def _submission_failure(self) -> tuple[str, str | None] | None:
        """(message, exception type) when this input failed at submission, else None."""
        obj = self._batch()
        if obj is not None:
            failures = obj["spec"].get("submissionFailures") or []
            return next(
                ((f["message"], f.get("errorType")) for f in failures if f["index"] == self.index),
                None,
            )
        header = self._header()
        if header is not None:
            found = (f for f in header.submission_failures if f.index == self.index)
            return next(((f.message, f.error_type) for f in found), None)
        return None

    def wait(
        self,
        timeout: float | None = None,
        on_status_change: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Block on a watch of the batch until this input is recorded terminal.

        TimeoutError leaves it running. PENDING/RUNNING changes are reported
        to `on_status_change` as the batch's status changes (its counts move
        whenever any input starts or ends).
        """
        outcomes = RecordedOutcomes(self._header)
        last: JobStatus | None = None
        for obj in self._kube.watch_one(r.BATCH_PLURAL, self.namespace, self.group, timeout):
            if obj is None:
                current = self._status_after_batch()
            else:
                status = obj.get("status", {})
                final = r.Phase(status.get("phase", "PENDING")).terminal
                outcomes.update(status, final=final)
                recorded = outcomes.of(self.index)
                if recorded is not None:
                    current = recorded
                elif final:  # the batch ended without a word on this input
                    current = JobStatus.NOT_FOUND
                elif on_status_change is not None:
                    current = self._live_status()
                else:
                    continue
            if current != last:
                last = current
                notify(on_status_change, current)
            if current.terminal:
                return current
        return JobStatus.NOT_FOUND

    @reference.moved_positions("InputHandle.result", reference.RESULT_BEFORE)
    def result(
        self,
        timeout: float | None = None,
        cleanup: bool | None = None,
        cleanup_timeout: float | None = None,
        cleanup_poll_interval: float | None = None,
        stream_logs: bool | None = None,
        on_status_change: Callable[[JobStatus], None] | None = None,
    ) -> Any:
        """Wait for the input and return its value, or raise its exception.

        Functions: the value the runner stored (by default the stored result
        is deleted after a successful read, like a job's). Containers: the
        termination message. A cancelled input raises JobCancelled, one that
        left no result JobFailed, a submission failure the exception it failed with.
        The reference's `cleanup_timeout` and `cleanup_poll_interval` are taken
        as by `JobHandle.result` (the cleanup here deletes only the stored result).
        """
        wait = self._cleanup_wait("result", None, cleanup_timeout, cleanup_poll_interval)
        final = self._wait_streaming(timeout, on_status_change, bool(stream_logs))
        return self._value(final, cleanup, wait)

    def _value(
        self, final: JobStatus, cleanup: bool | None, wait: float = DEFAULT_CLEANUP_TIMEOUT
    ) -> Any:
        if final is JobStatus.CANCELLED:
            raise JobCancelled(f"input {self.index} of batch {self.group} was cancelled")
        if self.container:
            if final is JobStatus.SUCCEEDED:
                return self._container_result()
            raise self._failure(final)
        outcome = self.read_result()
        if outcome is None:
            raise self._failure(final)
        if cleanup if cleanup is not None else outcome.ok:
            self.cleanup(k8s=False, timeout=wait)
        return payload.raise_remote(outcome)

    def _failure(self, final: JobStatus) -> Exception:
        """The exception for an input that left no result to return."""
        where = f"input {self.index} of batch {self.group}"
        if final is JobStatus.SUCCEEDED:
            return ResultDeleted(
                f"{where} succeeded, but its result is no longer at {self.result_uri}: it was "
                "deleted after an earlier read (results() and result() delete each result "
                "they read unless cleanup=False; pass cleanup=False to keep results)"
            )
        submitted = self._submission_failure()
        if submitted is not None:
            return submission_exception(self.index, *submitted)
        if final is JobStatus.NOT_FOUND:
            return JobFailed(
                f"{where} is unknown: the batch is gone from namespace {self.namespace} and its "
                "manifest has no outcome for it"
            )
        record = self._record()
        if record is None or record.outcome not in FINAL_OUTCOMES:
            record = self._wait_for_record()
        return JobFailed(f"{where} {final.value}: {self._message(record) or 'no message'}")

    def _wait_for_record(self) -> InputRecord | None:
        """The input's record once the manifest has its outcome (it is written debounced)."""
        deadline = time.monotonic() + RECORD_WAIT
        while True:
            record = self._record()
            if record is not None and record.outcome in FINAL_OUTCOMES:
                return record
            if time.monotonic() > deadline:
                return record
            time.sleep(1.0)

    def _container_result(self) -> str | None:
        """The succeeded attempt's termination message: from its Pod, else from the manifest
        as the batch's status vouches for it.

        Pods are listed first: the operator writes the shard before it deletes
        a Pod, so a Pod missing from the list is already in the shard. Once
        the batch is gone, nothing vouches for the shard: `digest.Unverifiable`.
        """
        for pod in reversed(self._live_pods()):
            ended = terminated_state(pod)
            if pod.status and pod.status.phase == "Succeeded" and ended is not None:
                return ended.message
        manifest = self._vouched()
        if manifest is not None and not manifest.vouched:
            where = manifest.home.manifest_shard_uri(layout.shard_of(self.index))
            raise digest.Unverifiable(where, manifest.why_not(), what="recorded result")
        record = self._wait_for_record()
        return record.result if record is not None and record.outcome == "SUCCEEDED" else None

    # ----------------------------------------------------------------- acting

    def cancel(
        self,
        cleanup_timeout: float | None = None,
        cleanup_poll_interval: float | None = None,
        *,
        timeout: float | None = None,
        keep: bool = False,
    ) -> JobStatus:
        """Cancel this input alone and wait until the batch records it ended.

        Its index is added to the batch's ``spec.cancelIndexes``; the other
        inputs carry on. An input that already ended keeps its outcome. An
        input has no object of its own to delete (``keep`` is accepted, as on a
        job's handle, and changes nothing): it stays CANCELLED in its batch,
        which `status()` reports, so a loop waiting for SUCCEEDED, FAILED or
        NOT_FOUND on an input should also stop at CANCELLED (or use `wait()`).
        `timeout` (or the reference's `cleanup_timeout`) bounds the wait, 180 s
        by default; `cleanup_poll_interval` cannot matter (it is a watch) and warns once.
        """
        timeout = self._cleanup_wait("cancel", timeout, cleanup_timeout, cleanup_poll_interval)
        if add_cancel_indexes(self.namespace, self.group, [self.index], self._kube) is None:
            return self._status_after_batch()
        return self.wait(timeout=timeout)

    def cleanup(
        self,
        k8s: bool = True,
        gcs: bool = True,
        cleanup_timeout: float | None = None,
        cleanup_poll_interval: float | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Delete the input's Pods (k8s) and its stored result (gcs); never the manifest.

        A running input is cancelled first (deleting its Pod alone would only
        get it re-run). With gcs=False the logs of the deleted Pods are
        archived first, so they stay readable. Outputs under
        KINETIC_OUTPUT_DIR are kept either way. `timeout` (or the reference's
        `cleanup_timeout`) bounds the wait for that cancel, 180 s by default;
        `cleanup_poll_interval` cannot matter (it is a watch) and warns once.
        """
        timeout = self._cleanup_wait("cleanup", timeout, cleanup_timeout, cleanup_poll_interval)
        if k8s:
            final = self.status()
            if not final.terminal:
                final = self.cancel(timeout=timeout)
            if final is not JobStatus.NOT_FOUND:
                self._delete_pods(archive_logs=not gcs)
        if gcs and self.result_uri is not None:
            storage.delete(self.result_uri)  # the only object in the input's own folder

    def _delete_pods(self, archive_logs: bool) -> None:
        pods = self._live_pods()
        if not pods:
            return
        if self._several:
            size = self.chunk_size if not self.sized else len(self._unit_inputs())
            siblings = range(self.unit, self.unit + size)
            obj = self._batch()
            outcomes = RecordedOutcomes(self._header)
            if obj is not None:
                outcomes.update(obj.get("status", {}), final=True)
            if any(outcomes.of(i) is None for i in siblings if i < self._total(obj)):
                log.info(
                    "keeping %s: other inputs of its chunk have not ended", pods[-1].metadata.name
                )
                return
        # The operator writes the input's record before it deletes a Pod itself; give it the
        # chance to, so what only the Pod knows (a container's result) is not lost with it.
        self._wait_for_record()
        for pod in pods:
            name = pod.metadata.name
            if archive_logs:
                self._archive_log(name)
            self._kube.delete_pod(name, self.namespace)

    def _archive_log(self, pod: str) -> None:
        """Keep a Pod's log where the operator would have put it (if it has not already)."""
        uri = self._archived_log_uri(pod)
        text = self._kube.pod_log(pod, self.namespace, None)
        if not text or uri is None:
            return
        try:
            storage.write_if_generation(uri, text.encode(), 0)
        except storage.PreconditionFailed:
            pass  # already archived

    def _total(self, obj: dict | None) -> int:
        if obj is not None:
            return obj.get("status", {}).get("total") or spec_input_total(obj["spec"])
        header = self._header()
        return header.total if header is not None else 0


def add_cancel_indexes(
    namespace: str, group_id: str, indexes: Iterable[int], kube: KubeClient
) -> dict | None:
    """Add inputs to the batch's spec.cancelIndexes; None when the batch is gone.

    A guarded update (resourceVersion, retried on conflict), so a concurrent
    change by another client is never overwritten. Inputs already ended and
    batches already ended are left alone.
    """
    wanted = IndexSet(indexes)
    limit = _cancel_indexes_limit()

    def change(obj: dict) -> dict | None:
        status = obj.get("status", {})
        if r.Phase(status.get("phase", "PENDING")).terminal:
            return None
        done = IndexSet.parse(status.get("succeededIndexes", "")).union(
            IndexSet.parse(status.get("failedIndexes", "")),
            IndexSet.parse(status.get("cancelledIndexes", "")),
        )
        current = IndexSet.parse(obj["spec"].get("cancelIndexes", ""))
        updated = current | (wanted - done)
        if updated == current:
            return None
        text = str(updated)
        if len(text) > limit:
            raise ValueError(
                f"spec.cancelIndexes of batch {group_id} would be {len(text)} characters, over "
                f"its limit of {limit}: cancel runs of consecutive inputs, or the whole batch "
                "with BatchHandle.cancel()"
            )
        return {"cancelIndexes": text}

    return kube.update_spec(r.BATCH_PLURAL, namespace, group_id, change)


def input_job_spec(spec: dict, index: int) -> dict[str, Any]:
    """What input ``index`` of a batch with this raw spec runs: its entry of ``spec.jobs``,
    else the batch's template ({} when it has neither)."""
    jobs = spec.get("jobs")
    if isinstance(jobs, list):
        return jobs[index] if 0 <= index < len(jobs) else {}
    return spec.get("template") or {}


def spec_input_total(spec: dict) -> int:
    """A batch's input count from its raw spec: its jobs (spec.jobs), else its inputs."""
    if isinstance(spec.get("jobs"), list):
        return len(spec["jobs"])
    return input_total(spec.get("inputs", {}))


def input_total(inputs: dict) -> int:
    if "indexes" in inputs:  # a subset of the inputs below (a resolved rerun)
        return len(IndexSet.parse(inputs["indexes"]))
    if "fromBatch" in inputs:  # unresolved: known only when it names its inputs as ranges
        chosen = (inputs["fromBatch"] or {}).get("indexes", "failed")
        return 0 if chosen in ("failed", "all") else len(IndexSet.parse(chosen))
    if "count" in inputs:
        return inputs["count"]
    if "items" in inputs:
        return len(inputs["items"])
    total = 1
    for values in inputs.get("grid", {}).values():
        total *= len(values)
    return total


def _stored(record: InputRecord) -> digest.Reported | None:
    """The result hash and size an input's manifest record holds (None: no hash)."""
    if not record.result_sha256:
        return None
    return digest.Reported(record.result_sha256, record.result_bytes)
