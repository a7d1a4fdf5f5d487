"""`BatchHandle`: one KineticBatch seen from the client, and rerunning its inputs.

The handle reads what the batch status, its Pods and the manifest say of each
input (`kinetic.api.inputs`), waits, collects results and acts on the batch
(cancel, rerun, clean up). Submitting and attaching are `kinetic.api.batches`,
which re-exports these names at their documented paths.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kinetic.api.batch_rerun import create_rerun
from kinetic.api.batch_results import InputOverview, _Progress, _Results
from kinetic.api.cleanup import delete_stored
from kinetic.api.config import resolve
from kinetic.api.handle import (
    JobCancelled,
    JobHandle,
    JobStatus,
    label_int,
    recorded_pods,
    sort_by_attempt,
)
from kinetic.api.inputs import (
    RECORD_WAIT,
    InputHandle,
    RecordedOutcomes,
    add_cancel_indexes,
    live_phase,
    spec_input_total,
    status_from_header,
    terminated_state,
    vouched_manifest,
)
from kinetic.api.kube import KubeClient, ThroughContext, client_for
from kinetic.api.submission import (
    SubmissionError,
    submission_exception,
)
from kinetic.api.unread import unread_error, unread_note
from kinetic.api.vouched import VouchedManifest
from kinetic.model import digest, layout, names
from kinetic.model import resources as r
from kinetic.model.digest import Unverifiable
from kinetic.model.grid import Grid
from kinetic.model.manifest import FINAL_OUTCOMES, InputRecord, ManifestHeader, ManifestShard
from kinetic.model.ranges import IndexSet

if TYPE_CHECKING:
    from kubernetes.client import V1Pod


_READERS = 16  # parallel storage reads when collecting results


class BatchError(Exception):
    """Some inputs of a batch failed; the rest of the results are in `partial_results`.

    ``unread`` are inputs that did not fail but have no value to return (their
    result was deleted after an earlier read, or nothing vouches for it any
    more): the message names the first reason (`kinetic.api.unread`).
    """

    def __init__(
        self,
        group_id: str,
        failures: list[JobHandle],
        partial_results: list[Any],
        *,
        submission_failures: dict[int, Exception] | None = None,
        cancelled: Iterable[int] = (),
        unread: Mapping[int, Exception] | None = None,
    ) -> None:
        self.group_id = group_id
        self.failures = failures
        self.partial_results = partial_results
        self.submission_failures = dict(submission_failures or {})
        self.cancelled = sorted(cancelled)
        self.unread = dict(unread or {})
        failed = len(failures) + len(self.submission_failures)
        message = f"Batch {group_id}: {failed} of {len(partial_results)} jobs failed"
        if self.cancelled:
            message += f", {len(self.cancelled)} cancelled"
        super().__init__(message + unread_note(self.unread))


# --------------------------------------------------------------------------- the batch


@dataclass
class BatchHandle(ThroughContext):
    """One KineticBatch, seen from the client."""

    group_id: str
    namespace: str
    name: str | None
    tags: dict[str, str]
    total: int
    storage_root: str
    context: str | None = None
    container: bool = False
    chunk_size: int = 1
    sized: bool = False  # chunkSize auto: each unit's size is the status's unitGrid
    func_name: str = ""
    created_at: str = ""
    accelerator: str = "cpu"
    uid: str | None = None
    payload_uri: str | None = None
    # A mixed batch (spec.jobs): the inputs that run containers; `container` is then unused.
    container_inputs: IndexSet | None = None
    # A mixed batch: each input's own function (or command) and accelerator, where
    # `func_name` and `accelerator` sum up the whole batch.
    input_names: tuple[str, ...] | None = None
    input_accelerators: tuple[str, ...] | None = None
    # How the handle asks the API server: the client it was given (the dashboard gives every
    # handle its one), else one made for ``context`` on first use; its inputs' handles get it.
    kube: KubeClient | None = field(default=None, repr=False, compare=False)
    _submission_failures: dict[int, Exception] = field(default_factory=dict, repr=False)
    _cached_failures: list[JobHandle] | None = field(default=None, repr=False)

    # ----------------------------------------------------------------- building

    @classmethod
    def from_resource(
        cls, obj: dict, storage_root: str, context: str | None, kube: KubeClient | None = None
    ) -> BatchHandle:
        spec = obj["spec"]
        if isinstance(spec.get("jobs"), list):
            return cls._from_jobs(obj, storage_root, context, kube)
        template = spec.get("template", {})
        chunk = spec.get("chunkSize") or 1
        failures: dict[int, Exception] = {
            f["index"]: submission_exception(f["index"], f["message"], f.get("errorType"))
            for f in spec.get("submissionFailures", [])
        }
        return cls(
            group_id=obj["metadata"]["name"],
            namespace=obj["metadata"]["namespace"],
            name=spec.get("name"),
            tags=dict(spec.get("tags") or {}),
            total=obj.get("status", {}).get("total") or spec_input_total(spec),
            storage_root=storage_root,
            context=context,
            container="container" in template,
            chunk_size=chunk if isinstance(chunk, int) else 1,
            sized=chunk == "auto" and "function" in template,
            func_name=(template.get("function") or {}).get("name")
            or " ".join((template.get("container") or {}).get("command", [])),
            created_at=obj["metadata"].get("creationTimestamp", ""),
            accelerator=template.get("accelerator", "cpu"),
            uid=obj["metadata"].get("uid"),
            payload_uri=(template.get("function") or {}).get("payloadURI"),
            kube=kube,
            _submission_failures=failures,
        )

    @classmethod
    def _from_jobs(
        cls, obj: dict, storage_root: str, context: str | None, kube: KubeClient | None
    ) -> BatchHandle:
        """A handle for a heterogeneous batch: each input is a function or a container."""
        spec = obj["spec"]
        jobs: list[dict] = spec["jobs"]
        names_ = [
            (j.get("function") or {}).get("name")
            or " ".join((j.get("container") or {}).get("command", []))
            for j in jobs
        ]
        return cls(
            group_id=obj["metadata"]["name"],
            namespace=obj["metadata"]["namespace"],
            name=spec.get("name"),
            tags=dict(spec.get("tags") or {}),
            total=len(jobs),
            storage_root=storage_root,
            context=context,
            func_name=", ".join(dict.fromkeys(n for n in names_ if n))[:200],
            created_at=obj["metadata"].get("creationTimestamp", ""),
            accelerator=",".join(sorted({j.get("accelerator", "cpu") for j in jobs})),
            uid=obj["metadata"].get("uid"),
            container_inputs=IndexSet(i for i, j in enumerate(jobs) if "container" in j),
            input_names=tuple(n or "" for n in names_),
            input_accelerators=tuple(j.get("accelerator", "cpu") for j in jobs),
            kube=kube,
            _submission_failures={
                f["index"]: SubmissionError(f["index"], f["message"])
                for f in spec.get("submissionFailures", [])
            },
        )

    def is_container(self, index: int) -> bool:
        """Whether input ``index`` runs a container (its result is its termination message)."""
        if self.container_inputs is not None:
            return index in self.container_inputs
        return self.container

    @classmethod
    def from_manifest(
        cls,
        header: ManifestHeader,
        namespace: str,
        storage_root: str,
        context: str | None,
        kube: KubeClient | None = None,
    ) -> BatchHandle:
        """A handle for a batch whose resource is gone but whose manifest remains."""
        failures: dict[int, Exception] = {
            f.index: submission_exception(f.index, f.message, f.error_type)
            for f in header.submission_failures
        }
        return cls(
            group_id=header.group_id,
            namespace=namespace,
            name=header.name,
            tags=dict(header.tags),
            total=header.total,
            storage_root=storage_root,
            context=context,
            container=header.kind == "container",
            container_inputs=IndexSet.parse(header.container_indexes)
            if header.kind == "mixed"
            else None,
            chunk_size=header.chunk_size,
            sized=header.unit_grid is not None,
            func_name=header.function_name or "",
            created_at=header.created_at or "",
            uid=header.uid,
            kube=kube,
            _submission_failures=failures,
        )

    def _home(self) -> layout.Home | None:
        """The batch's own storage prefix; None when its UID is unknown."""
        if not self.uid:
            return None
        return layout.batch_home(self.storage_root, self.namespace, self.group_id, self.uid)

    def child(self, index: int) -> InputHandle:
        """The handle of input `index` (whether or not it has run)."""
        home = self._home()
        container = self.is_container(index)
        return InputHandle(
            job_id=names.input_id(self.group_id, index),
            namespace=self.namespace,
            func_name=_own(self.input_names, index) or self.func_name or self.name or "",
            created_at=self.created_at,
            accelerator=_own(self.input_accelerators, index) or self.accelerator,
            result_uri=None if container or home is None else home.input_result_uri(index),
            context=self.context,
            uid=self.uid,
            function=not container,
            group_id=self.group_id,
            group_index=index,
            storage_root=self.storage_root,
            container=container,
            chunk_size=self.chunk_size,
            sized=self.sized,
            kube=self._kube,
        )

    # ----------------------------------------------------------------- observing

    def _unit_of(self, obj: dict | None) -> Callable[[int], int]:
        """Input -> the first input of the unit (the Pod) that runs it: a sized batch's
        grid as its status (or, once it is gone, its manifest) says, else every
        ``chunk_size`` inputs."""
        if not self.sized:
            return lambda i: names.unit_start(i, self.chunk_size)
        text = ((obj or {}).get("status") or {}).get("unitGrid")
        if text is None and obj is None:
            header = self._manifest()
            text = header.unit_grid if header is not None else None
        return Grid.parse(text).unit_of

    def _get(self) -> dict | None:
        return self._kube.get(r.BATCH_PLURAL, self.namespace, self.group_id)

    def _vouched(self) -> VouchedManifest | None:
        """The manifest as the batch's status vouches for it (None: the UID is unknown)."""
        home = self._home()
        if home is None:
            return None
        return vouched_manifest(home, self.namespace, self.group_id, self._kube)

    def _manifest(self) -> ManifestHeader | None:
        """The manifest header the operator keeps in storage, as the batch's status vouches
        for it (once the batch is gone: as stored), or None when there is none."""
        manifest = self._vouched()
        return manifest.header() if manifest is not None else None

    def status(self) -> dict[str, Any]:
        """The batch's status as the operator wrote it; from the manifest once deleted."""
        obj = self._get()
        if obj is not None:
            return obj.get("status", {})
        header = self._manifest()
        return {} if header is None else status_from_header(header)

    @property
    def submission_failures(self) -> dict[int, Exception]:
        """Inputs that failed at submission (their `jobs` slot is None)."""
        return dict(self._submission_failures)

    @property
    def jobs(self) -> list[JobHandle | None]:
        """One slot per input: a handle once launched, None before or on submission failure."""
        launched = self.status().get("launched", 0)
        return [
            self.child(i) if i < launched and i not in self._submission_failures else None
            for i in range(self.total)
        ]

    def statuses(self) -> list[tuple[int, JobStatus]]:
        """(index, status) for every launched input, from one read of the batch and its Pods.

        Recorded outcomes come from the batch status (or the manifest once the
        batch is deleted); the rest from each unit's newest Pod. Inputs of a
        deleted batch that never ended are NOT_FOUND.
        """
        return self._statuses(None)

    def overview(self) -> InputOverview:
        """Each input's phase, attempt and message, as `kinetic jobs list` shows them.

        One read of the batch and one LIST of its Pods for the whole batch;
        attempts and messages from the manifest, a shard at a time, only for
        the inputs asked about (as `InputHandle.describe` reads them, without
        reading the batch again per input).
        """
        pods = self._newest_pods()
        phases = dict(self._statuses(pods))
        manifest = self._vouched()
        shards: dict[int, ManifestShard | None] = {}  # each read once, even when not written

        def record(index: int) -> InputRecord | None:
            if manifest is None:
                return None
            number = layout.shard_of(index)
            if number not in shards:
                shards[number] = manifest.shard(number)
            shard = shards[number]
            return None if shard is None else shard.inputs.get(str(index))

        attempts = {unit: label_int(pod, names.LABEL_ATTEMPT) for unit, pod in pods.items()}
        return InputOverview(phases, attempts, record, self._unit_of(self._get()))

    def _statuses(self, pods: dict[int, V1Pod] | None) -> list[tuple[int, JobStatus]]:
        """`statuses`, with the newest Pods of each unit when already listed."""
        obj = self._get()
        outcomes = RecordedOutcomes(self._manifest)
        live: Callable[[int], JobStatus]
        if obj is None:
            header = self._manifest()
            if header is None:
                return []
            status = status_from_header(header)
            outcomes.update(status)

            def live(_: int) -> JobStatus:
                return JobStatus.NOT_FOUND
        else:
            status = obj.get("status", {})
            outcomes.update(status, final=r.Phase(status.get("phase", "PENDING")).terminal)
            launched = IndexSet.range(0, min(status.get("launched", 0), self.total))
            unended = launched - outcomes.done() - IndexSet(self._submission_failures)
            newest = (self._newest_pods() if pods is None else pods) if unended else {}

            unit_of = self._unit_of(obj)

            def live(i: int) -> JobStatus:
                return live_phase(newest.get(unit_of(i)))

        launched = status.get("launched", 0)
        return [
            (i, outcomes.of(i) or live(i))
            for i in range(min(launched, self.total))
            if i not in self._submission_failures
        ]

    def _newest_pods(self) -> dict[int, V1Pod]:
        """The newest attempt's Pod of every unit that has one (one LIST)."""
        pods = self._kube.list_pods(self.namespace, f"{names.LABEL_BATCH}={self.group_id}")
        newest: dict[int, V1Pod] = {}
        for pod in sort_by_attempt(pods):
            index = (pod.metadata.labels or {}).get(names.LABEL_INDEX)
            if index is not None:
                newest[int(index)] = pod
        return newest

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, st in self.statuses():
            counts[st.value] = counts.get(st.value, 0) + 1
        return counts

    def _watch(self, timeout: float | None) -> Iterator[dict]:
        """Yield the batch's status on every change until it is terminal (or deleted)."""
        for obj in self._kube.watch_one(r.BATCH_PLURAL, self.namespace, self.group_id, timeout):
            if obj is None:
                # Deleted: what the manifest recorded is all there will ever be.
                header = self._manifest()
                if header is None:
                    raise LookupError(f"batch {self.group_id} was deleted while waiting for it")
                yield status_from_header(header) | {"deleted": True}
                return
            status = obj.get("status", {})
            yield status
            if r.Phase(status.get("phase", "PENDING")).terminal:
                return

    def wait(self, *, timeout: float | None = None, progress: bool | None = None) -> None:
        """Block until every input has reached a terminal state."""
        with _Progress(self.group_id, self.total, progress) as bar:
            for status in self._watch(timeout):
                bar.update(status)

    def _newly_done(self, outcomes: RecordedOutcomes, status: dict, seen: IndexSet) -> IndexSet:
        """Launched inputs recorded terminal and not handled yet (submission failures aside)."""
        outcomes.update(status, final=_final(status))
        launched = IndexSet.range(0, min(status.get("launched", 0), self.total))
        return (outcomes.done() & launched) - seen - IndexSet(self._submission_failures)

    def as_completed(
        self, *, poll_interval: float = 5.0, timeout: float | None = None
    ) -> Iterator[JobHandle]:
        """Yield inputs' handles as they finish, in completion order, while others still run.

        Driven by a watch on the batch; `poll_interval` is kept for compatibility
        and has no effect.
        """
        del poll_interval
        outcomes = RecordedOutcomes(self._manifest)
        seen = IndexSet()
        for status in self._watch(timeout):
            new = self._newly_done(outcomes, status, seen)
            seen = seen | new
            for i in new:
                yield self.child(i)

    def results(
        self,
        *,
        timeout: float | None = None,
        ordered: bool = True,
        cleanup: bool = True,
        return_exceptions: bool = False,
        progress: bool | None = None,
    ) -> list[Any]:
        """Every input's result, in input order (or completion order with ordered=False).

        Follows the batch status on a watch and reads each input's result as
        soon as the operator records it ended, several at a time. With
        cleanup=True each successful input's stored result is deleted once
        read (only after its outcome is recorded, so it is never re-run); the
        manifest stays, so `attach_batch()` still works, and Pods go after the
        operator's TTL. Failed inputs are kept for their logs. A TimeoutError
        leaves the batch running.
        """
        got = self._collect_as_recorded(timeout, cleanup, progress)
        got.close(self.group_id, self.total)
        self._cached_failures = [self.child(i) for i in sorted(got.failed)]
        if got.errors and not return_exceptions:
            raise self._results_error(got, self._cached_failures)
        index_order = range(self.total) if ordered else got.order
        return [got.values[i] if i in got.values else got.errors[i] for i in index_order]

    def _collect_as_recorded(
        self, timeout: float | None, cleanup: bool, progress: bool | None
    ) -> _Results:
        """Follow the batch on a watch, reading each input's result once it is recorded ended.

        The manifest is told every status seen (until the batch is deleted),
        so what it says is read only as that status vouches for it.
        """
        got = _Results.starting(self._submission_failures)
        manifest = self._vouched()
        outcomes = RecordedOutcomes(manifest.header if manifest is not None else lambda: None)
        seen = IndexSet()
        waiting: list[int] = []  # ended, their records not in the vouched manifest yet
        with (
            _Progress(self.group_id, self.total, progress) as bar,
            ThreadPoolExecutor(_READERS) as pool,
        ):
            for status in self._watch(timeout):
                bar.update(status)
                got.saw(status)
                if manifest is not None:
                    manifest.seen(None if got.deleted else status)
                new = self._newly_done(outcomes, status, seen)
                seen = seen | new
                got.ended(new, outcomes.failed)
                ready, waiting = self._ready([*waiting, *new], manifest, _final(status))
                got.add(self._collect(ready, outcomes, cleanup, pool, manifest))
            got.add(self._collect(waiting, outcomes, cleanup, pool, manifest))
        return got

    def _ready(
        self, indexes: list[int], manifest: VouchedManifest | None, final: bool
    ) -> tuple[list[int], list[int]]:
        """Which ended inputs can be read now, and which wait for the manifest: a function
        input's result is checked against its record's hash, and the manifest is written
        every few seconds, after the status counts the input. Read now, it would hold up
        the watch; it waits for a later status instead (the batch's last always has it)."""
        if final or manifest is None or not manifest.vouched:
            return indexes, []
        functions = [i for i in indexes if not self.is_container(i)]
        records = self._manifest_records(functions, manifest)
        waiting = {
            i
            for i in functions
            if (record := records.get(i)) is None or record.outcome not in FINAL_OUTCOMES
        }
        return [i for i in indexes if i not in waiting], sorted(waiting)

    def _results_error(self, got: _Results, failures: list[JobHandle]) -> Exception:
        """The error `results()` raises when some input has no value.

        Inputs that failed, failed at submission or were cancelled make it a
        `BatchError`, the others' values kept in it. When none did, the inputs
        without a value succeeded (or never ended) and the reason is not a
        failure: it is raised itself (`kinetic.api.unread`), never "0 failed".
        """
        cancelled = [i for i, e in got.errors.items() if isinstance(e, JobCancelled)]
        unread = {
            i: e
            for i, e in got.errors.items()
            if i not in got.failed and i not in self._submission_failures and i not in cancelled
        }
        if unread and not (failures or self._submission_failures or cancelled):
            home = self._home()
            where = home.prefix if home is not None else self.group_id
            return unread_error(self.group_id, self.total, unread, where)
        partial = [got.values.get(i) for i in range(self.total)]
        return BatchError(
            self.group_id,
            failures,
            partial,
            submission_failures=self._submission_failures,
            cancelled=cancelled,
            unread=unread,
        )

    def _collect(
        self,
        indexes: list[int],
        outcomes: RecordedOutcomes,
        cleanup: bool,
        pool: ThreadPoolExecutor,
        manifest: VouchedManifest | None,
    ) -> list[tuple[int, bool, Any]]:
        """(index, ok, value or exception) for inputs recorded terminal.

        Result hashes and container results come from the manifest only as the
        batch's status vouches for it; once the batch is gone, nothing does,
        and each input's result is refused (`digest.Unverifiable`, saying why).
        """
        if not indexes:
            return []
        out: list[tuple[int, bool, Any]] = []
        rest: list[int] = []
        for i in indexes:
            if i in outcomes.cancelled:
                out.append((i, False, JobCancelled(f"input {i} of {self.group_id} was cancelled")))
            else:
                rest.append(i)
        unvouched = None
        if manifest is not None and not manifest.vouched:
            unvouched = manifest.why_not()
        messages = self._container_results(
            [i for i in rest if i in outcomes.succeeded and self.is_container(i)],
            manifest if unvouched is None else None,
        )
        hashes = self._recorded_hashes(
            [i for i in rest if not self.is_container(i)],
            manifest if unvouched is None else None,
        )

        def one(i: int) -> tuple[int, bool, Any]:
            final = outcomes.of(i) or JobStatus.NOT_FOUND
            handle = self.child(i)
            handle.recorded_sha256, handle.recorded_bytes = hashes.get(i) or (None, None)
            handle.unvouched = unvouched
            try:
                if self.is_container(i) and final is JobStatus.SUCCEEDED:
                    if i not in messages and unvouched is not None and self._home() is not None:
                        where = self._home().manifest_shard_uri(layout.shard_of(i))  # type: ignore[union-attr]
                        raise Unverifiable(where, unvouched, what="recorded result")
                    return i, True, messages.get(i)
                return i, True, handle._value(final, cleanup and final is JobStatus.SUCCEEDED)
            except Exception as e:  # the input's remote exception, or why it has none
                return i, False, e

        out.extend(pool.map(one, rest))
        return out

    def _manifest_records(
        self, indexes: Iterable[int], manifest: VouchedManifest | None = None
    ) -> dict[int, InputRecord]:
        """The manifest's records of those ``indexes`` it has: one read per shard.

        Not one read per input: a whole shard comes back for each read, and
        `results()` asks for thousands of inputs at once. As the batch's
        status vouches for them (`kinetic.api.vouched`; as stored once it is gone).
        """
        manifest = manifest or self._vouched()
        found: dict[int, InputRecord] = {}
        if manifest is None:
            return found
        by_shard: dict[int, list[int]] = {}
        for i in indexes:
            by_shard.setdefault(layout.shard_of(i), []).append(i)
        for shard_no, members in sorted(by_shard.items()):
            shard = manifest.shard(shard_no)
            if shard is None:
                continue
            for i in members:
                record = shard.inputs.get(str(i))
                if record is not None:
                    found[i] = record
        return found

    def _recorded_hashes(
        self, indexes: list[int], manifest: VouchedManifest | None
    ) -> dict[int, digest.Reported]:
        """The result hashes (and sizes) the vouched-for manifest already records for
        ``indexes``.

        Only a record of how the input ended counts: one written while it was
        still running (a retry pending) holds the hash an earlier attempt
        reported, of its exception. Inputs not recorded so yet are left out;
        their handles find the hash themselves (from the Pod, or by waiting for
        the record). With no manifest that the status vouches for, there are none.
        """
        if manifest is None or not indexes:
            return {}
        records = self._manifest_records(indexes, manifest)
        return {
            i: digest.Reported(rec.result_sha256, rec.result_bytes)
            for i, rec in records.items()
            if rec.result_sha256 and rec.outcome in FINAL_OUTCOMES
        }

    def _container_results(
        self, indexes: list[int], manifest: VouchedManifest | None
    ) -> dict[int, str | None]:
        """Termination messages of succeeded container inputs, from the shards as the status
        vouches for them (none when ``manifest`` is None), or from the Pods those shards
        record (by name and UID) when a record does not hold the result yet.

        One LIST of the batch's Pods and one read per shard, not a read per
        input. Only a Pod the operator recorded counts: anyone who may create
        Pods in the namespace can give one a batch's labels and a message of
        their choosing (`handle.recorded_pods`).
        """
        found: dict[int, str | None] = {}
        if not indexes or manifest is None:
            return found
        wanted = set(indexes)
        pods = self._kube.list_pods(self.namespace, f"{names.LABEL_BATCH}={self.group_id}")
        deadline = time.monotonic() + RECORD_WAIT
        while True:
            records = self._manifest_records(wanted - set(found), manifest)
            for i, record in records.items():
                if record.outcome == "SUCCEEDED":
                    found[i] = record.result
            found |= _recorded_messages(pods, records)
            if wanted <= set(found) or time.monotonic() > deadline:
                return found
            time.sleep(1.0)
            manifest = self._vouched() or manifest  # what the status vouches for now

    def failures(self) -> list[JobHandle]:
        """Inputs that FAILED (cached after `results()`).

        Submission failures are not here (they never ran): see
        `submission_failures`.
        """
        if self._cached_failures is not None:
            return list(self._cached_failures)
        status = self.status()
        outcomes = RecordedOutcomes(self._manifest)
        outcomes.update(status, final=_final(status))
        return [self.child(i) for i in outcomes.failed if i not in self._submission_failures]

    # ----------------------------------------------------------------- acting

    def cancel(self) -> None:
        """Stop launching and cancel every running input; the batch ends CANCELLED."""
        self._kube.patch_spec(r.BATCH_PLURAL, self.namespace, self.group_id, {"cancel": True})

    def cancel_inputs(self, indexes: Iterable[int]) -> None:
        """Cancel some inputs only (added to spec.cancelIndexes); the others carry on.

        Returns at once; `jobs[i].wait()` or `statuses()` show when they ended.
        """
        add_cancel_indexes(self.namespace, self.group_id, indexes, self._kube)

    def rerun(self, *, failed: bool = True, name: str | None = None) -> BatchHandle:
        """A new batch running this batch's failed inputs (``failed=False``: all) again.

        Each input keeps its original index (``KINETIC_INDEX``); the new
        batch's manifest maps it back to this one. See `kinetic.api.batch_rerun`.
        """
        return rerun_batch(
            self.group_id,
            failed=failed,
            name=name,
            namespace=self.namespace,
            kube=self._kube,
        )

    def cleanup(self, *, k8s: bool = True, gcs: bool = True) -> None:
        """Delete the batch and its Pods, and with gcs=True every artifact, log and the manifest.

        Storage cleanup deletes only the batch's own prefix (namespace, name and
        UID) and the upload folder the client made for it. Outputs under
        KINETIC_OUTPUT_DIR are kept.
        """
        if k8s and self._kube.delete(r.BATCH_PLURAL, self.namespace, self.group_id):
            for obj in self._kube.watch_one(r.BATCH_PLURAL, self.namespace, self.group_id, 180):
                if obj is None:
                    break
        if gcs:
            upload = layout.upload_dir_of(
                self.storage_root, self.namespace, self.group_id, self.payload_uri
            )
            delete_stored(self._home(), upload)


def _own(per_input: tuple[str, ...] | None, index: int) -> str | None:
    """Input ``index``'s own entry of a mixed batch's per-input values (None: not one)."""
    if per_input is None or not 0 <= index < len(per_input):
        return None
    return per_input[index]


def _final(status: dict) -> bool:
    """Whether no more outcomes can be recorded: the batch ended, or was deleted."""
    return bool(status.get("deleted")) or r.Phase(status.get("phase", "PENDING")).terminal


def _recorded_messages(pods: list[V1Pod], records: dict[int, InputRecord]) -> dict[int, str]:
    """Termination messages of succeeded Pods that these records name as their inputs'."""
    out: dict[int, str] = {}
    for i, record in records.items():
        attempts = [a.wire() for a in record.attempts]
        for pod in recorded_pods(pods, attempts):
            ended = terminated_state(pod)
            if pod.status.phase == "Succeeded" and ended is not None and ended.message:
                out[i] = ended.message
    return out


def new_group_id() -> str:
    return f"grp-{secrets.token_hex(4)}"


def rerun_batch(
    group_id: str,
    *,
    failed: bool = True,
    name: str | None = None,
    namespace: str | None = None,
    context: str | None = None,
    kube: KubeClient | None = None,
) -> BatchHandle:
    """Create a batch that runs the failed (or all) inputs of batch ``group_id`` again.

    Each input runs with the source's template and keeps its original index
    (``KINETIC_INDEX``); the new batch's manifest maps it back to the source.
    The source batch must still exist (see `kinetic.api.batch_rerun`). Raises
    LookupError (no such batch) or ValueError (nothing to rerun, or the
    source has not finished and ``failed`` is set).
    """
    if kube is not None:
        context = client_for(context, kube).context
    cfg = resolve(namespace=namespace, context=context)
    kube = kube or KubeClient(cfg.context)
    created = create_rerun(cfg, group_id, kube, failed=failed, new_name=name or new_group_id())
    return BatchHandle.from_resource(created, cfg.storage_root, kube.context, kube)
