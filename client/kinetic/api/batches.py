"""Fan-out: `run_async_map()`, the `BatchHandle` that watches a KineticBatch, and input handles.

The client packages the function once and the inputs in parallel, creates one
KineticBatch and returns. Concurrency, retries, fail-fast and the manifest
are the operator's job, so the submitting process may exit at once and any
process can pick the batch up again with `attach_batch()`.

There is no Kubernetes object per input: `kinetic.api.inputs` says where what
the client knows of one input comes from (the batch status, its Pods, the
manifest), and `InputHandle` reads it.

Handles keep no state beyond what they were created with, so a handle from
`attach_batch()` or `kinetic.attach("<grp>-<i>")` in another process is as
good as the original.
"""

from __future__ import annotations

import json
import logging
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kinetic import storage
from kinetic.api import reference
from kinetic.api.batch_rerun import create_rerun
from kinetic.api.cleanup import delete_stored
from kinetic.api.config import ClientConfig, default_namespace, resolve
from kinetic.api.handle import (
    JobCancelled,
    JobFailed,
    JobHandle,
    JobStatus,
    label_int,
    last_uid,
    recorded_pods,
    sort_by_attempt,
)
from kinetic.api.inputs import (
    RECORD_WAIT,
    InputHandle,
    RecordedOutcomes,
    add_cancel_indexes,
    input_summary,
    live_phase,
    read_manifest,
    spec_input_total,
    status_from_header,
    terminated_state,
    vouched_manifest,
)
from kinetic.api.inputs import read_shard as read_shard  # kinetic.api.batches.read_shard, as before
from kinetic.api.kube import KubeClient, client_for
from kinetic.api.staging import Stager
from kinetic.api.submission import SubmissionError as SubmissionError  # kinetic.SubmissionError
from kinetic.api.submission import (
    mark_unsubmitted,
    submission_exception,
    submission_failure,
    wrong_typed_inputs,
)
from kinetic.api.unread import unread_error, unread_note
from kinetic.api.vouched import VouchedManifest
from kinetic.model import catalog, digest, gang, layout, limits, names, payload
from kinetic.model import resources as r
from kinetic.model.data import Data, walk_data
from kinetic.model.digest import Unverifiable
from kinetic.model.grid import Grid
from kinetic.model.manifest import InputRecord, ManifestHeader, ManifestShard
from kinetic.model.ranges import IndexSet

if TYPE_CHECKING:
    from kubernetes.client import V1Pod
    from rich.progress import Progress, TaskID

log = logging.getLogger("kinetic")


class Submittable(Protocol):
    """What submitting a batch needs of a function bound by `kinetic.run`.

    `kinetic.api.remote.RemoteFunction` is one. It sits above this module (its
    `run_async_map` calls `submit_map`), so this module names only what it uses.
    """

    fn: Callable[..., Any]
    options: dict[str, Any]

    @property
    def func_name(self) -> str: ...

    def _config(self) -> ClientConfig: ...

    def check_cluster(self, cfg: ClientConfig) -> None: ...

    def captured_env(self) -> dict[str, str]: ...

    def ship_project(self, cfg: ClientConfig) -> dict[str, Any] | None: ...

    def job_spec(
        self,
        function: r.FunctionSpec,
        retries: int | None = None,
        volumes: list[r.DataVolume] | None = None,
    ) -> r.KineticJobSpec: ...


_UNBOUNDED_WARNING_THRESHOLD = 100
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
class BatchHandle:
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

    def __post_init__(self) -> None:
        """A handle given a client talks through that client's context (`client_for`)."""
        if self.kube is not None:
            self.context = client_for(self.context, self.kube).context

    @property
    def _kube(self) -> KubeClient:
        """The client this handle asks through: the one it was given, else one made for its
        context (again if the context was changed since)."""
        if self.kube is None or self.kube.context != self.context:
            self.kube = KubeClient(self.context)
        return self.kube

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
        with _Progress(self, progress) as bar:
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
        with _Progress(self, progress) as bar, ThreadPoolExecutor(_READERS) as pool:
            for status in self._watch(timeout):
                bar.update(status)
                got.saw(status)
                if manifest is not None:
                    manifest.seen(None if got.deleted else status)
                new = self._newly_done(outcomes, status, seen)
                seen = seen | new
                got.ended(new, outcomes.failed)
                got.add(self._collect(list(new), outcomes, cleanup, pool, manifest))
        return got

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

        Inputs not recorded yet are left out; their handles find the hash
        themselves (from the Pod, or by waiting for the record). With no
        manifest that the status vouches for, there are none.
        """
        if manifest is None or not indexes:
            return {}
        records = self._manifest_records(indexes, manifest)
        return {
            i: digest.Reported(rec.result_sha256, rec.result_bytes)
            for i, rec in records.items()
            if rec.result_sha256
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


@dataclass(frozen=True)
class InputOverview:
    """What `BatchHandle.overview` read: enough to say each input's phase, attempt and message."""

    phases: dict[int, JobStatus]  # launched inputs (submission failures aside)
    pod_attempts: dict[int, int]  # unit start -> its newest live Pod's attempt
    record: Callable[[int], InputRecord | None]  # the manifest's record of an input
    unit_of: Callable[[int], int] = lambda index: index  # the unit (its first input) of one

    def of(self, index: int) -> dict[str, Any]:
        """Input ``index``'s phase, attempt and message, shaped like a KineticJob's status."""
        phase = self.phases.get(index, JobStatus.PENDING)
        record = self.record(index) if index in self.phases else None
        live = self.pod_attempts.get(self.unit_of(index), 0)
        return input_summary(phase, record, live)


@dataclass
class _Results:
    """What `BatchHandle.results()` has gathered: each input's value or exception so far."""

    values: dict[int, Any]
    errors: dict[int, Exception]
    order: list[int]  # completion order, submission failures first
    failed: set[int] = field(default_factory=set)  # inputs recorded FAILED, for `failures()`
    deleted: bool = False  # the batch was deleted while we followed it
    launched: int = 0  # the most inputs any status said were launched

    @classmethod
    def starting(cls, submission_failures: dict[int, Exception]) -> _Results:
        """Inputs that failed at submission are done before anything runs."""
        return cls({}, dict(submission_failures), sorted(submission_failures))

    def saw(self, status: dict) -> None:
        """Note what a status says of the whole batch: deleted, and how many inputs launched."""
        self.deleted = self.deleted or bool(status.get("deleted"))
        self.launched = max(self.launched, status.get("launched", 0))

    def ended(self, new: IndexSet, failed: IndexSet) -> None:
        """Inputs just recorded ended, in completion order; the failed ones kept apart."""
        self.order.extend(new)
        self.failed.update(i for i in new if i in failed)

    def add(self, collected: list[tuple[int, bool, Any]]) -> None:
        """Each input's value (ok) or exception, as `BatchHandle._collect` read it."""
        for i, ok, value in collected:
            (self.values if ok else self.errors)[i] = value

    def close(self, group_id: str, total: int) -> None:
        """An exception for every input that never ended: its batch was deleted, or it never
        ran (cancelled, or not launched before the batch ended)."""
        for i in range(total):
            if i not in self.values and i not in self.errors:
                self.errors[i] = (
                    JobFailed(f"input {i} of {group_id} did not end: its batch was deleted")
                    if self.deleted and i < self.launched
                    else JobCancelled(f"input {i} of {group_id} was never run")
                )
                self.order.append(i)


class _Progress:
    """A progress bar on a terminal; silent elsewhere."""

    def __init__(self, batch: BatchHandle, enabled: bool | None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.batch = batch
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self._progress = Progress(
                "[bold]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                "{task.fields[detail]}",
                TimeRemainingColumn(),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self.batch.group_id, total=self.batch.total, detail=""
            )
        return self

    def update(self, status: dict) -> None:
        if self._progress is None or self._task is None:
            return
        c = status.get("counts", {})
        done = c.get("succeeded", 0) + c.get("failed", 0) + c.get("cancelled", 0)
        detail = f"running {c.get('running', 0)}  failed {c.get('failed', 0)}"
        self._progress.update(self._task, completed=done, detail=detail)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


# --------------------------------------------------------------------------- submitting


AUTO = r.AUTO_CHUNK


def new_group_id() -> str:
    return f"grp-{secrets.token_hex(4)}"


def _check_chunk_size(chunk_size: object) -> r.ChunkSize:
    if chunk_size == AUTO:
        return AUTO
    if (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int)
        or not 1 <= chunk_size <= r.MAX_CHUNK_SIZE
    ):
        raise ValueError(
            f"chunk_size must be 'auto' or an integer from 1 to {r.MAX_CHUNK_SIZE} (consecutive "
            f"inputs run by one Pod); got {chunk_size!r}. 'auto' (the default) lets the "
            "operator size each Pod's share from the inputs' measured durations; 1 runs one "
            f"input per Pod; at most {r.MAX_CHUNK_SIZE} fixes a size."
        )
    return chunk_size


def check_hosts(hosts: object, accelerator: str) -> None:
    """Refuse a ``hosts=`` the operator would refuse, now rather than after an upload.

    The built-in catalog says how many hosts a multi-host TPU slice has; an
    accelerator only the cluster's own catalog knows is left to the operator,
    which checks it again against that catalog (and the policy's maxHostsPerJob).
    """
    problems = gang.hosts_problems(hosts, accelerator, catalog.default_catalog(), None, "hosts")
    if problems:
        raise ValueError("; ".join(problems))


def submit_map(
    fn: Submittable,
    inputs: Iterable[Any],
    input_mode: r.InputMode = "auto",
    max_concurrent: int | None = limits.DEFAULT_MAX_CONCURRENT,
    retries: int | None = None,
    fail_fast: bool = False,
    cancel_running_on_fail: bool = False,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    chunk_size: r.ChunkSize = AUTO,
    hosts: int | None = None,
) -> BatchHandle:
    """Package the function once and every input, create one KineticBatch, return its handle.

    Inputs that cannot be pickled are recorded in the batch as submission
    failures (they count as failures for fail-fast) rather than raising, so
    one bad input never loses the others. `chunk_size=k` runs k consecutive
    inputs in each Pod, for very short functions whose Pod start would cost
    more than the call; each input is still recorded, retried and reported
    on its own. `hosts=N` runs every input as a gang of N Pods (the batch's
    ``template.hosts``); unset, the function's own ``kinetic.run(hosts=...)``.
    """
    if hosts is not None:
        check_hosts(hosts, fn.options["accelerator"])
    items = list(inputs)
    if input_mode not in payload.INPUT_MODES:
        raise ValueError(
            f"input_mode must be one of {', '.join(payload.INPUT_MODES)}; got {input_mode!r}"
        )
    limits.check_max_concurrent(max_concurrent)
    chunk_size = _check_chunk_size(chunk_size)
    gang_hosts = hosts if hosts is not None else fn.options.get("hosts")
    gang_batch = gang_hosts is not None and gang_hosts > 1
    if chunk_size == AUTO and gang_batch:
        chunk_size = 1  # a gang runs one input on several Pods: nothing to size
    if isinstance(chunk_size, int) and chunk_size > 1 and gang_batch:
        raise ValueError(
            f"chunk_size={chunk_size} with hosts={gang_hosts}: a chunk runs several inputs in "
            "one Pod, a gang runs one input on several Pods; use chunk_size=1 for multi-host "
            "inputs"
        )
    # A wrong-typed item fails its own slot (never uploaded), not the whole call.
    refused = wrong_typed_inputs(items, input_mode)
    if max_concurrent is None and len(items) > _UNBOUNDED_WARNING_THRESHOLD:
        log.warning(
            "submitting %d inputs with max_concurrent=None starts them all at once; "
            "set max_concurrent to bound cluster usage",
            len(items),
        )
    cfg = fn._config()
    fn.check_cluster(cfg)
    # The operator's bounds, before anything is uploaded: the same check its webhook makes.
    limits.refuse(
        limits.check_batch_spec(
            {"inputs": {"count": len(items)}}, storage_root=None, max_inputs=cfg.max_inputs
        )
    )
    group_id = new_group_id()
    root = cfg.storage_root

    # kinetic.Data: uploaded once, referenced per input; fuse=True refused before any upload
    # when the cluster cannot mount it, and mounted (volumes, after the inputs) when it can.
    # The function's volumes concern every input; an input's own Data only that input.
    stager = Stager(root, cfg.namespace, cfg.context)
    stager.check(fn.options["volumes"], [])
    items, refused = _staged_inputs(stager, fn.options["volumes"], items, refused)
    volumes = stager.volumes(fn.options["volumes"])

    # Uploaded before the batch exists: a fresh folder of the namespace's uploads.
    upload = layout.new_upload_dir(root, cfg.namespace, group_id)
    function_bytes = payload.build_function_payload(
        fn.fn, env=fn.captured_env(), project=fn.ship_project(cfg)
    )
    function_uri = layout.batch_function_uri(upload)
    storage.write_bytes(function_uri, function_bytes)
    inline = (
        payload.inline_inputs(items) if 0 < len(items) <= limits.MAX_ITEMS and not refused else None
    )
    failures: dict[int, Exception] = {}
    if inline is not None:
        batch_inputs = r.BatchInputs(items=inline)
    else:
        batch_inputs, failures = _pickled_inputs(upload, items, refused)

    function = r.FunctionSpec(
        payload_uri=function_uri, sha256=payload.sha256(function_bytes), name=fn.func_name
    )
    spec = r.KineticBatchSpec(
        template=batch_template(fn, function, volumes, hosts),
        inputs=batch_inputs,
        input_mode=input_mode,
        max_concurrent=max_concurrent,
        chunk_size=chunk_size,
        retries=fn.options["retries"] if retries is None else retries,
        fail_fast=fail_fast,
        cancel_running_on_fail=cancel_running_on_fail,
        name=name,
        tags=dict(tags or {}),
        submission_failures=[submission_failure(i, e) for i, e in sorted(failures.items())],
    )
    created = create_batch(cfg, group_id, spec)
    handle = BatchHandle.from_resource(created, root, cfg.context)
    # This process still has the exceptions themselves: their type, message and traceback.
    handle._submission_failures = {i: mark_unsubmitted(e, i) for i, e in failures.items()}
    return handle


def _staged_inputs(
    stager: Stager, volumes: Mapping[str, Data], items: list[Any], refused: dict[int, Exception]
) -> tuple[list[Any], dict[int, Exception]]:
    """Each input with its `Data` checked and staged on its own; the inputs that failed.

    A problem of one input's data (fuse data this cluster cannot mount, a
    local file gone or unreadable since ``Data()`` checked it: a ValueError or
    OSError) fails that input alone, recorded in its slot as the reference
    records a packaging error; the others are submitted. Inputs in
    ``refused`` (wrong-typed) are not staged. What concerns the batch as a
    whole (more fuse mounts than a Pod may have) and a storage outage, which
    is no input's problem, fail the call as before.
    """
    failures = dict(refused)
    for i, item in enumerate(items):
        if i in failures:
            continue
        try:
            stager.check(volumes, list(walk_data(item, f"input {i}")))
        except ValueError as e:  # FuseUnavailable, a DataError
            failures[i] = e
    kept = [d for i, x in enumerate(items) if i not in failures for d in walk_data(x, f"input {i}")]
    stager.check(volumes, kept)
    staged = list(items)
    for i, item in enumerate(items):
        if i in failures:
            continue
        try:
            staged[i] = stager.value(item)
        except (ValueError, OSError) as e:
            failures[i] = e
    return staged, failures


def batch_template(
    fn: Submittable,
    function: r.FunctionSpec,
    volumes: list[r.DataVolume] | None,
    hosts: int | None,
) -> r.KineticJobSpec:
    """What every input runs: the function's job spec, with ``hosts`` when the call gives it.

    Retries are the batch's (``spec.retries``), not the template's. ``hosts``
    unset keeps the function's own (``kinetic.run(hosts=...)``, itself left
    out of the spec when not given: the accelerator's own count).
    """
    template = fn.job_spec(function, retries=0, volumes=volumes)
    if hosts is None:
        return template
    return template.model_copy(update={"hosts": hosts})


def create_batch(cfg: ClientConfig, group_id: str, spec: r.KineticBatchSpec) -> dict[str, Any]:
    """Check the spec as it will be sent (the operator's own bounds), then create the batch.

    ``maxConcurrent`` is always sent, null included: null means unlimited,
    while leaving it out would mean the CRD's default.
    """
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {
            "name": group_id,
            "namespace": cfg.namespace,
            "labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY},
        },
        "spec": _spec_body(spec) | {"maxConcurrent": spec.max_concurrent},
    }
    limits.refuse(
        limits.check_batch_spec(
            body["spec"], storage_root=cfg.storage_root, max_inputs=cfg.max_inputs
        )
    )
    return KubeClient(cfg.context).create(r.BATCH_PLURAL, cfg.namespace, body)


def _spec_body(spec: r.KineticBatchSpec) -> dict[str, Any]:
    """The spec as sent; an empty cancelIndexes is left out, as the API server may refuse it."""
    body = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    if not body.get("cancelIndexes"):
        body.pop("cancelIndexes", None)
    return body


def _pickled_inputs(
    upload: str, items: list[Any], refused: dict[int, Exception]
) -> tuple[r.BatchInputs, dict[int, Exception]]:
    """Upload every input pickled, with the list of their hashes; per-index failures."""
    inputs_prefix = layout.batch_inputs_prefix(upload)
    hashes, failures = _upload_inputs(inputs_prefix, items, refused)
    hashes_bytes = json.dumps(hashes).encode()
    hashes_uri = layout.batch_hashes_uri(upload)
    storage.write_bytes(hashes_uri, hashes_bytes)
    inputs = r.BatchInputs(
        count=len(items),
        uri_prefix=inputs_prefix,
        sha256_uri=hashes_uri,
        sha256=payload.sha256(hashes_bytes),
    )
    return inputs, failures


def _upload_inputs(
    inputs_prefix: str, items: list[Any], refused: dict[int, Exception]
) -> tuple[list[str | None], dict[int, Exception]]:
    """Pickle and upload every input in parallel; returns hashes and per-index failures.

    Inputs in `refused` are not uploaded: they are failures already.
    """

    def one(i: int) -> tuple[int, str | None, Exception | None]:
        if i in refused:
            return i, None, refused[i]
        try:
            data = payload.build_input_payload(items[i])
        except payload.PayloadError as e:  # an unpicklable input fails alone, with its own error
            return i, None, e.__cause__ if isinstance(e.__cause__, Exception) else e
        storage.write_bytes(layout.batch_input_uri(inputs_prefix, i), data)
        return i, payload.sha256(data), None

    hashes: list[str | None] = [None] * len(items)
    failures: dict[int, Exception] = {}
    with ThreadPoolExecutor(max_workers=16) as pool:
        for i, digest, error in pool.map(one, range(len(items))):
            hashes[i] = digest
            if error is not None:
                failures[i] = error
    return hashes, failures


def _attach(
    group_id: str, cfg: ClientConfig, kube: KubeClient
) -> tuple[BatchHandle, dict[str, Any]]:
    """The batch's handle and status, from its resource or, once deleted, its manifest."""
    obj = kube.get(r.BATCH_PLURAL, cfg.namespace, group_id)
    if obj is not None:
        handle = BatchHandle.from_resource(obj, cfg.storage_root, kube.context, kube)
        return handle, obj.get("status", {})
    uid = last_uid(cfg.storage_root, cfg.namespace, "batches", group_id)
    home = (
        None if uid is None else layout.batch_home(cfg.storage_root, cfg.namespace, group_id, uid)
    )
    header = read_manifest(home) if home is not None else None
    if header is None:
        raise LookupError(
            f"No KineticBatch {group_id!r} in namespace {cfg.namespace!r} and no manifest "
            f"recorded for that name under "
            f"{layout.namespace_prefix(cfg.storage_root, cfg.namespace)}. Check the id and "
            "namespace (`kinetic batches list -n NAMESPACE`)."
        )
    handle = BatchHandle.from_manifest(header, cfg.namespace, cfg.storage_root, kube.context, kube)
    return handle, status_from_header(header)


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


@reference.moved_positions("kinetic.attach_batch", ("group_id", "namespace", "cluster"))
def attach_batch(
    group_id: str,
    project: str | None = None,
    cluster: str | None = None,
    poll_interval: float | None = None,
    poll_timeout: float | None = None,
    *,
    namespace: str | None = None,
    context: str | None = None,
    zone: str | None = None,
    backend: str | None = None,
    base_image_repo: str | None = None,
    kube: KubeClient | None = None,
) -> BatchHandle:
    """Pick up a batch from any process; index alignment and submission failures are kept.

    The reference API's arguments (`kinetic.api.reference`): `cluster` selects
    the kubeconfig context (a name that selects none is a `ConfigError`
    listing them); `backend` is "gke" or None. `project`, `zone`,
    `base_image_repo`, `poll_interval` and `poll_timeout` cannot matter here
    and warn once, naming the equivalent: a KineticBatch has every input from
    the start, so there are no late inputs to poll for. The positional order
    is the reference's; a second positional argument (the namespace before
    this order) warns (`ArgumentMoved`).

    ``kube`` is the client the handle (and its inputs' handles) asks the API
    server through: pass one to share it (the dashboard does); by default one
    is made for the context.
    """
    reference.accept(
        "kinetic.attach_batch",
        backend=backend,
        project=project,
        zone=zone,
        base_image_repo=base_image_repo,
        poll_interval=poll_interval,
        poll_timeout=poll_timeout,
    )
    kube = reference.kube_for("kinetic.attach_batch", cluster, context, kube)
    cfg = resolve(namespace=namespace, context=kube.context)
    handle, status = _attach(group_id, cfg, kube)
    launched = status.get("launched", 0)
    if launched < handle.total and r.Phase(status.get("phase", "PENDING")).terminal:
        log.warning(
            "batch %s launched %d of %d inputs before it ended", group_id, launched, handle.total
        )
    return handle


def attach_input(
    group_id: str, index: int, cfg: ClientConfig, kube: KubeClient | None = None
) -> InputHandle:
    """The handle of input `index` of a batch (`kinetic.attach("<group>-<index>")`), asking
    through ``kube`` (by default a client for the configuration's context)."""
    batch, _ = _attach(group_id, cfg, kube or KubeClient(cfg.context))
    if not 0 <= index < batch.total:
        raise LookupError(
            f"Batch {group_id} has {batch.total} inputs (indexes 0 to {batch.total - 1}); "
            f"there is no input {index}. Check the index (`kinetic batches status {group_id}`)."
        )
    return batch.child(index)


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


def list_batches(namespace: str | None = None, context: str | None = None) -> list[dict[str, Any]]:
    """The batches in a namespace with their status, oldest first."""
    ns = namespace or default_namespace(context)
    items = KubeClient(context).list_(r.BATCH_PLURAL, ns)
    return sorted(items, key=lambda o: o["metadata"].get("creationTimestamp", ""))
