"""Fan-out: `run_async_map()` and the `BatchHandle` that watches a KineticBatch.

The client packages the function once and the inputs in parallel, creates one
KineticBatch and returns. Concurrency, retries, fail-fast and the manifest
are the operator's job, so the submitting process may exit at once and any
process can pick the batch up again with `attach_batch()`.

A handle keeps no state of its own beyond what it was created with: every
answer is read from the batch's status (counts and index ranges) or from the
children, so a handle from `attach_batch()` in another process is as good as
the original.
"""

from __future__ import annotations

import json
import logging
import secrets
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kinetic import kube, payload, storage
from kinetic import resources as r
from kinetic.config import resolve
from kinetic.jobs import JobCancelled, JobFailed, JobHandle, JobStatus
from kinetic.ranges import parse_ranges

if TYPE_CHECKING:
    from kinetic.remote import RemoteFunction

log = logging.getLogger("kinetic")

INPUT_MODES = ("auto", "single", "args", "kwargs")
_UNBOUNDED_WARNING_THRESHOLD = 100


class SubmissionError(RuntimeError):
    """An input that could not be packaged, so it never ran."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"input {index} was not submitted: {message}")
        self.index = index


class BatchError(Exception):
    """Some inputs of a batch failed; the rest of the results are in `partial_results`."""

    def __init__(
        self,
        group_id: str,
        failures: list[JobHandle],
        partial_results: list[Any],
        submission_failures: dict[int, Exception] | None = None,
    ) -> None:
        self.group_id = group_id
        self.failures = failures
        self.partial_results = partial_results
        self.submission_failures = dict(submission_failures or {})
        failed = len(failures) + len(self.submission_failures)
        super().__init__(f"Batch {group_id}: {failed} of {len(partial_results)} jobs failed")


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
    _submission_failures: dict[int, Exception] = field(default_factory=dict, repr=False)
    _cached_failures: list[JobHandle] | None = field(default=None, repr=False)

    # ----------------------------------------------------------------- building

    @classmethod
    def from_resource(cls, obj: dict, storage_root: str, context: str | None) -> BatchHandle:
        spec = obj["spec"]
        failures = {
            f["index"]: SubmissionError(f["index"], f["message"])
            for f in spec.get("submissionFailures", [])
        }
        return cls(
            group_id=obj["metadata"]["name"],
            namespace=obj["metadata"]["namespace"],
            name=spec.get("name"),
            tags=dict(spec.get("tags") or {}),
            total=obj.get("status", {}).get("total") or _count(spec["inputs"]),
            storage_root=storage_root,
            context=context,
            container="container" in spec.get("template", {}),
            _submission_failures=failures,
        )

    @classmethod
    def from_manifest(
        cls, manifest: dict, namespace: str, storage_root: str, context: str | None
    ) -> BatchHandle:
        """A handle for a batch whose resource is gone but whose manifest remains."""
        failures = {
            f["index"]: SubmissionError(f["index"], f["message"])
            for f in manifest.get("submissionFailures", [])
        }
        return cls(
            group_id=manifest["groupId"],
            namespace=namespace,
            name=manifest.get("name"),
            tags=dict(manifest.get("tags") or {}),
            total=manifest.get("total", 0),
            storage_root=storage_root,
            context=context,
            container=manifest.get("kind") == "container",
            _submission_failures=failures,
        )

    def child(self, index: int) -> JobHandle:
        """The handle of the child for `index` (whether or not it exists right now)."""
        job_id = f"{self.group_id}-{index}"
        artifacts = storage.join(self.storage_root, "jobs", job_id)
        return JobHandle(
            job_id=job_id,
            namespace=self.namespace,
            func_name=self.name or "",
            result_uri=None if self.container else storage.join(artifacts, "result.pkl"),
            artifacts_uri=artifacts,
            context=self.context,
            group_id=self.group_id,
            group_index=index,
        )

    # ----------------------------------------------------------------- observing

    def _get(self) -> dict | None:
        return kube.get(r.BATCH_PLURAL, self.namespace, self.group_id, self.context)

    def status(self) -> dict[str, Any]:
        """The batch's status as the operator wrote it; from the manifest once deleted."""
        obj = self._get()
        if obj is not None:
            return obj.get("status", {})
        return _status_from_manifest(self._manifest() or {})

    def _manifest(self) -> dict[str, Any] | None:
        """The manifest the operator keeps in storage, or None when it is gone too."""
        return read_manifest(self.storage_root, self.group_id)

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
        """(index, status) for every launched input; cleaned-up children are NOT_FOUND."""
        launched = self.status().get("launched", 0)
        phases = self._child_phases()
        return [
            (i, phases.get(i, JobStatus.NOT_FOUND))
            for i in range(launched)
            if i not in self._submission_failures
        ]

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, st in self.statuses():
            counts[st.value] = counts.get(st.value, 0) + 1
        return counts

    def _child_phases(self) -> dict[int, JobStatus]:
        children = kube.list_(
            r.JOB_PLURAL, self.namespace, self.context, selector=f"{r.LABEL_BATCH}={self.group_id}"
        )
        return {int(c["metadata"]["labels"][r.LABEL_INDEX]): JobStatus.of(c) for c in children}

    def _watch(self, timeout: float | None) -> Iterator[dict]:
        """Yield the batch's status on every change until it is terminal."""
        for obj in kube.watch_one(
            r.BATCH_PLURAL, self.namespace, self.group_id, timeout, self.context
        ):
            if obj is None:
                # Deleted: what the manifest recorded is all there will ever be.
                manifest = self._manifest()
                if manifest is None:
                    raise LookupError(f"batch {self.group_id} was deleted while waiting for it")
                yield _status_from_manifest(manifest)
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

    def as_completed(
        self, *, poll_interval: float = 5.0, timeout: float | None = None
    ) -> Iterator[JobHandle]:
        """Yield children as they finish, in completion order, while others still launch.

        Driven by a watch on the batch; `poll_interval` is kept for compatibility
        and bounds how long one watch request stays open.
        """
        del poll_interval
        seen: set[int] = set()
        for status in self._watch(timeout):
            for i in _finished(status):
                if i not in seen and i not in self._submission_failures:
                    seen.add(i)
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
        soon as the operator records it finished. With cleanup=True each
        successful child is deleted (resource and artifacts) once its result
        is read — only after its outcome is in the batch status, so the
        operator never relaunches it; the manifest stays, so `attach_batch()`
        still works. Failed children are kept for their logs. A TimeoutError
        leaves the batch running.
        """
        values: dict[int, Any] = {}
        errors: dict[int, Exception] = dict(self._submission_failures)
        order: list[int] = sorted(self._submission_failures)
        failed: set[int] = set()
        with _Progress(self, progress) as bar:
            for status in self._watch(timeout):
                bar.update(status)
                failed_now = set(parse_ranges(status.get("failedIndexes", "")))
                cancelled_now = set(parse_ranges(status.get("cancelledIndexes", "")))
                for i in _finished(status):
                    if i in values or i in errors:
                        continue
                    order.append(i)
                    if i in cancelled_now:
                        errors[i] = JobCancelled(f"input {i} of {self.group_id} was cancelled")
                        continue
                    if i in failed_now:
                        failed.add(i)
                    try:
                        values[i] = self._collect(i, cleanup and i not in failed_now)
                    except Exception as e:  # the child's remote exception, or why it has none
                        errors[i] = e
        for i in range(self.total):  # never launched after a stop: cancelled
            if i not in values and i not in errors:
                errors[i] = JobCancelled(f"input {i} of {self.group_id} was never run")
                order.append(i)
        self._cached_failures = [self.child(i) for i in sorted(failed)]
        index_order = range(self.total) if ordered else order
        if errors and not return_exceptions:
            partial = [values.get(i) for i in range(self.total)]
            raise BatchError(
                self.group_id, self._cached_failures, partial, self._submission_failures
            )
        return [values[i] if i in values else errors[i] for i in index_order]

    def _collect(self, index: int, cleanup: bool) -> Any:
        """One finished child's value, or raise its exception (JobFailed if it left none)."""
        handle = self.child(index)
        if self.container:
            obj = handle._get()
            status = (obj or {}).get("status", {})
            phase = JobStatus.of(obj)
            if phase is JobStatus.SUCCEEDED:
                value = status.get("result")
                if cleanup:
                    handle.cleanup(gcs=False)
                return value
            raise _failure_for(handle, phase, status)
        return handle.result(timeout=60, cleanup=cleanup)

    def failures(self) -> list[JobHandle]:
        """Children that FAILED (cached after `results()`, so cleanup does not hide them).

        Submission failures are not here (they never had a job): see
        `submission_failures`.
        """
        if self._cached_failures is not None:
            return list(self._cached_failures)
        failed = parse_ranges(self.status().get("failedIndexes", ""))
        return [self.child(i) for i in failed if i not in self._submission_failures]

    # ----------------------------------------------------------------- acting

    def cancel(self) -> None:
        """Stop launching and cancel every running child; the batch ends CANCELLED."""
        kube.patch_spec(
            r.BATCH_PLURAL, self.namespace, self.group_id, {"cancel": True}, self.context
        )

    def cleanup(self, *, k8s: bool = True, gcs: bool = True) -> None:
        """Delete the batch and its children, and with gcs=True every artifact and the manifest."""
        if k8s and kube.delete(r.BATCH_PLURAL, self.namespace, self.group_id, self.context):
            for obj in kube.watch_one(
                r.BATCH_PLURAL, self.namespace, self.group_id, 180, self.context
            ):
                if obj is None:
                    break
        if gcs:
            storage.delete_prefix(storage.join(self.storage_root, "jobs", self.group_id) + "-")
            storage.delete_prefix(storage.join(self.storage_root, "batches", self.group_id) + "/")


def _finished(status: dict) -> list[int]:
    """Indexes the operator has recorded as terminal, launched ones only, ascending."""
    launched = status.get("launched", 0)
    done: set[int] = set()
    for key in ("succeededIndexes", "failedIndexes", "cancelledIndexes"):
        done.update(i for i in parse_ranges(status.get(key, "")) if i < launched)
    return sorted(done)


def _failure_for(handle: JobHandle, phase: JobStatus, status: dict) -> Exception:
    if phase is JobStatus.CANCELLED:
        return JobCancelled(f"job {handle.job_id} was cancelled")
    return JobFailed(f"job {handle.job_id} {phase.value}: {status.get('message') or 'no message'}")


def _count(inputs: dict) -> int:
    if "count" in inputs:
        return inputs["count"]
    if "items" in inputs:
        return len(inputs["items"])
    total = 1
    for values in inputs.get("grid", {}).values():
        total *= len(values)
    return total


class _Progress:
    """A progress bar on a terminal; silent elsewhere."""

    def __init__(self, batch: BatchHandle, enabled: bool | None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.batch = batch
        self._progress = None
        self._task = None

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
        if self._progress is None:
            return
        c = status.get("counts", {})
        done = c.get("succeeded", 0) + c.get("failed", 0) + c.get("cancelled", 0)
        detail = f"running {c.get('running', 0)}  failed {c.get('failed', 0)}"
        self._progress.update(self._task, completed=done, detail=detail)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


# --------------------------------------------------------------------------- submitting


def new_group_id() -> str:
    return f"grp-{secrets.token_hex(4)}"


def submit_map(
    fn: RemoteFunction,
    inputs: Iterable[Any],
    input_mode: str = "auto",
    max_concurrent: int | None = 64,
    retries: int | None = None,
    fail_fast: bool = False,
    cancel_running_on_fail: bool = False,
    name: str | None = None,
    tags: dict[str, str] | None = None,
) -> BatchHandle:
    """Package the function once and every input, create one KineticBatch, return its handle.

    Inputs that cannot be pickled are recorded in the batch as submission
    failures (they count as failures for fail-fast) rather than raising, so
    one bad input never loses the others.
    """
    items = list(inputs)
    if input_mode not in INPUT_MODES:
        raise ValueError(f"input_mode must be one of {', '.join(INPUT_MODES)}; got {input_mode!r}")
    if max_concurrent is not None and (not isinstance(max_concurrent, int) or max_concurrent < 1):
        raise ValueError(
            f"max_concurrent must be a positive integer or None (no limit); got {max_concurrent!r}"
        )
    for i, item in enumerate(items):  # a wrong-typed item fails here, before any upload
        try:
            payload.resolve_call(item, input_mode)
        except TypeError as e:
            raise TypeError(f"input {i}: {e}") from None
    if max_concurrent is None and len(items) > _UNBOUNDED_WARNING_THRESHOLD:
        log.warning(
            "submitting %d inputs with max_concurrent=None starts them all at once; "
            "set max_concurrent to bound cluster usage",
            len(items),
        )
    cfg = fn._config()
    group_id = new_group_id()
    base = storage.join(cfg.storage_root, "batches", group_id)

    function_bytes = payload.build_function_payload(fn.fn, env=fn.captured_env())
    function_uri = storage.join(base, "function.pkl")
    storage.write_bytes(function_uri, function_bytes)

    hashes, failures = _upload_inputs(base, items)
    hashes_bytes = json.dumps(hashes).encode()
    hashes_uri = storage.join(base, "inputs", "sha256.json")
    storage.write_bytes(hashes_uri, hashes_bytes)

    template = fn.job_spec(
        cfg.storage_root,
        group_id,
        r.FunctionSpec(
            payload_uri=function_uri,
            sha256=payload.sha256(function_bytes),
            name=fn.func_name,
        ),
        retries=0,
    )
    template.output_dir = fn.options["output_dir"]  # children default to outputs/<child id>
    spec = r.KineticBatchSpec(
        template=template,
        inputs=r.BatchInputs(
            count=len(items),
            uri_prefix=storage.join(base, "inputs"),
            sha256_uri=hashes_uri,
            sha256=payload.sha256(hashes_bytes),
        ),
        input_mode=input_mode,
        max_concurrent=max_concurrent,
        retries=fn.options["retries"] if retries is None else retries,
        fail_fast=fail_fast,
        cancel_running_on_fail=cancel_running_on_fail,
        name=name,
        tags=dict(tags or {}),
        submission_failures=[r.SubmissionFailure(index=i, message=m) for i, m in failures.items()],
    )
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {
            "name": group_id,
            "namespace": cfg.namespace,
            "labels": {"app.kubernetes.io/managed-by": "kinetic"},
        },
        "spec": spec.model_dump(by_alias=True, exclude_none=True, mode="json")
        | {"maxConcurrent": max_concurrent},
    }
    created = kube.create(r.BATCH_PLURAL, cfg.namespace, body, cfg.context)
    return BatchHandle.from_resource(created, cfg.storage_root, cfg.context)


def _upload_inputs(base: str, items: list[Any]) -> tuple[list[str | None], dict[int, str]]:
    """Pickle and upload every input in parallel; returns hashes and per-index failures."""

    def one(i: int) -> tuple[int, str | None, str | None]:
        try:
            data = payload.build_input_payload(items[i])
        except Exception as e:  # an unpicklable input fails alone, as a submission failure
            return i, None, f"could not pickle input: {type(e).__name__}: {e}"
        storage.write_bytes(storage.join(base, "inputs", f"{i}.pkl"), data)
        return i, payload.sha256(data), None

    hashes: list[str | None] = [None] * len(items)
    failures: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=16) as pool:
        for i, digest, error in pool.map(one, range(len(items))):
            hashes[i] = digest
            if error is not None:
                failures[i] = error
    return hashes, failures


def attach_batch(
    group_id: str, namespace: str | None = None, context: str | None = None
) -> BatchHandle:
    """Pick up a batch from any process; index alignment and submission failures are kept."""
    cfg = resolve(namespace=namespace, context=context)
    obj = kube.get(r.BATCH_PLURAL, cfg.namespace, group_id, cfg.context)
    if obj is not None:
        handle = BatchHandle.from_resource(obj, cfg.storage_root, cfg.context)
        status = obj.get("status", {})
    else:
        manifest = read_manifest(cfg.storage_root, group_id)
        if manifest is None:
            raise LookupError(
                f"No KineticBatch {group_id!r} in namespace {cfg.namespace!r} and no manifest "
                f"under {storage.join(cfg.storage_root, 'batches', group_id)}. Check the id and "
                "namespace (`kinetic batches list -n NAMESPACE`)."
            )
        handle = BatchHandle.from_manifest(manifest, cfg.namespace, cfg.storage_root, cfg.context)
        status = _status_from_manifest(manifest)
    launched = status.get("launched", 0)
    if launched < handle.total and r.Phase(status.get("phase", "PENDING")).terminal:
        log.warning(
            "batch %s launched %d of %d inputs before it ended", group_id, launched, handle.total
        )
    return handle


def read_manifest(storage_root: str, group_id: str) -> dict[str, Any] | None:
    """The batch manifest (see kinetic_operator.manifest for its schema), or None."""
    uri = storage.join(storage_root, "batches", group_id, "manifest.json")
    try:
        return json.loads(storage.read_bytes(uri))
    except storage.NotFound:
        return None


def _status_from_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The parts of a batch status the manifest also records."""
    keys = ("phase", "total", "launched", "succeededIndexes", "failedIndexes", "cancelledIndexes")
    return {k: manifest[k] for k in keys if k in manifest}


def list_batches(namespace: str | None = None, context: str | None = None) -> list[dict[str, Any]]:
    """The batches in a namespace with their status, oldest first."""
    ns = namespace or kube.current_namespace(context)
    items = kube.list_(r.BATCH_PLURAL, ns, context)
    return sorted(items, key=lambda o: o["metadata"].get("creationTimestamp", ""))
