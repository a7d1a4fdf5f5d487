"""What every handle is: `JobHandle`, the statuses and errors it reports, its logs.

A handle is a small, JSON-serialisable description of one KineticJob. It holds
no live state: every question (status, result, logs) goes to the API server
or to storage, so a handle rebuilt in another process by `attach()` is as
good as the original. It asks the API server through its `KubeClient`
(``kube``: the one it was given, else one for its context), which is how to
ask, never part of what is saved.

A handle knows its object's UID: everything it reads or deletes in storage is
under that object's own prefix (`kinetic.model.layout.Home`), and a result is
unpickled only after its bytes match the sha256 the runner reported, as the
API server holds it (``status.resultSHA256``), so a same-named job elsewhere
or a tampered file is refused. Once the job is deleted nothing vouches for
its result any more (storage alone can be rewritten by any Pod or bucket
writer), and it is not unpickled (`kinetic.model.digest.Unverifiable`).

Each attempt of a job is one Pod (`kinetic.model.names.job_pod_name`). The operator
deletes finished Pods after a TTL, archiving each one's log first, so logs
are read from the live Pod while it exists and from the archive after.

The inputs of a batch are not KineticJobs; their handles
(`kinetic.api.inputs.InputHandle`, a subclass) answer the same questions from
the batch's status, its Pods and its manifest. This module sits below them
and below batches, so it names neither: a subclass says which saved handles
are its own (`JobHandle.describes`), and `JobHandle.from_dict` asks each.
Submitting a job and `attach()` are `kinetic.api.jobs`, above both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

from kinetic import storage
from kinetic.api import debug as debugging
from kinetic.api import reference
from kinetic.api.attempt_pods import label_int as label_int  # kinetic.api.handle.*, as before
from kinetic.api.attempt_pods import pod_of_rank as pod_of_rank
from kinetic.api.attempt_pods import recorded_pods as recorded_pods
from kinetic.api.attempt_pods import sort_by_attempt as sort_by_attempt
from kinetic.api.cleanup import delete_stored
from kinetic.api.config import resolve
from kinetic.api.debug import debug_command as debug_command
from kinetic.api.hosts import hosts_of as hosts_of
from kinetic.api.hosts import member_pod as member_pod
from kinetic.api.hosts import rank_problem as rank_problem
from kinetic.api.hosts import recorded_hosts as recorded_hosts
from kinetic.api.job_context import input_fields
from kinetic.api.kube import KubeClient, ThroughContext
from kinetic.api.logstream import LogFollower
from kinetic.api.logstream import last_lines as last_lines
from kinetic.api.stored import last_uid as last_uid
from kinetic.api.stored import read_stored as read_stored
from kinetic.api.stored import reported_in as reported_in
from kinetic.api.waiting import notify as notify
from kinetic.model import digest, layout, names, payload
from kinetic.model import resources as r
from kinetic.model.job_status import JobStatus as JobStatus  # kinetic.api.handle.JobStatus

if TYPE_CHECKING:
    from kubernetes.client import V1Pod


class JobCancelled(RuntimeError):
    """The job was cancelled before it produced a result."""


class JobFailed(RuntimeError):
    """The job failed without a result payload (a container job, or a pod that died)."""


class ResultDeleted(JobFailed):
    """The job (or input) succeeded, but its stored result is gone from storage.

    `result()` and `BatchHandle.results()` delete each result once read unless
    ``cleanup=False``, so a second read finds nothing; a result deleted by hand
    reads the same. A subclass of `JobFailed` (there is no value to return) so
    that code catching that keeps working, with a message that says what
    happened and how to keep results.
    """


@dataclass
class JobHandle(ThroughContext):
    """Durable description of one submitted job; rebuild it anywhere with `kinetic.attach`.

    Every field after ``job_id`` is keyword-only: the reference's constructor
    takes other fields in another order (backend, project, ...), so its
    positional form is a TypeError here rather than a handle built wrong. A
    handle comes from `kinetic.attach`, or `JobHandle.from_dict` (which reads
    the reference's saved dicts too).
    """

    job_id: str
    _: KW_ONLY
    namespace: str
    func_name: str = ""
    accelerator: str = "cpu"
    created_at: str = ""
    result_uri: str | None = None
    artifacts_uri: str | None = None
    context: str | None = None
    group_id: str | None = None
    group_index: int | None = None
    storage_root: str | None = None
    uid: str | None = None
    function: bool = False
    payload_uri: str | None = None
    debug: bool = False  # started with debug=True: the runner waits for a debugger
    # How the handle asks the API server: the client it was given (the dashboard gives every
    # handle its one), else one made for ``context`` on first use. Never saved with the handle.
    kube: KubeClient | None = field(default=None, repr=False, compare=False)
    # The result hash and size the API server held just before `cleanup(gcs=False)` deleted
    # the job: held in memory only, never saved with the handle.
    _stored_before_deletion: digest.Reported | None = field(default=None, init=False, repr=False)
    # What this handle's own cleanup deleted ("result" after result(), "cleanup" after
    # cleanup(), "cancel" after cancel()), so a later result() says so: in memory only,
    # never saved with the handle.
    _cleaned_by: str | None = field(default=None, init=False, repr=False)
    # The subclasses, each rebuilding the saved handles it `describes` (see `from_dict`).
    _kinds: ClassVar[list[type[JobHandle]]] = []

    # ----------------------------------------------------------------- building

    @classmethod
    def from_resource(
        cls,
        obj: dict,
        context: str | None = None,
        storage_root: str | None = None,
        kube: KubeClient | None = None,
    ) -> JobHandle:
        meta, spec = obj["metadata"], obj.get("spec", {})
        fn = spec.get("function") or {}
        uid = meta.get("uid")
        result_uri = None
        if fn and storage_root and uid:
            result_uri = layout.job_home(
                storage_root, meta["namespace"], meta["name"], uid
            ).result_uri
        return cls(
            job_id=meta["name"],
            namespace=meta["namespace"],
            func_name=fn.get("name") or " ".join((spec.get("container") or {}).get("command", [])),
            accelerator=spec.get("accelerator", "cpu"),
            created_at=meta.get("creationTimestamp", ""),
            result_uri=result_uri,
            context=context,
            storage_root=storage_root,
            uid=uid,
            function=bool(fn),
            payload_uri=fn.get("payloadURI"),
            debug=bool(spec.get("debug")),
            kube=kube,
        )

    @classmethod
    def from_job_context(
        cls,
        ctx: Mapping[str, str] | None = None,
        backend_name: str | None = None,
        namespace: str | None = None,
        k8s_name: str | None = None,
    ) -> JobHandle:
        """The handle of the job this code runs in, built inside its Pod.

        The reference builds a handle from its submission context; on
        Kubernetes the context is the environment the operator gives every
        attempt Pod: ``KINETIC_JOB_NAME`` and ``KINETIC_JOB_NAMESPACE`` (``ctx``
        is a mapping to read instead of `os.environ`; ``k8s_name`` and
        ``namespace`` override the two). In a Pod of a batch it is the input's
        handle (`kinetic.InputHandle`, ``group_kind == "map"``); in a Pod that
        runs several inputs, the handle of the input running now. ``backend_name`` is
        checked like ``backend=`` ("gke" or None).

        Nothing is asked of the API server (the Pod's service account may read
        nothing), so the handle names the job (``job_id``, ``namespace``, the
        group fields, the result's location) but not its UID: save ``job_id``
        or `to_dict()` and `kinetic.attach()` it for a handle that reads everything.
        """
        where = f"{cls.__name__}.from_job_context"
        reference.check_backend(where, backend_name)
        env = os.environ if ctx is None else ctx
        name = k8s_name or env.get(names.ENV_JOB_NAME)
        ns = namespace or env.get(names.ENV_JOB_NAMESPACE)
        if not name or not ns:
            pairs = ((names.ENV_JOB_NAME, name), (names.ENV_JOB_NAMESPACE, ns))
            unset = [variable for variable, value in pairs if not value]
            raise RuntimeError(
                f"{where}(): {' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} not "
                "set. It builds the handle of the job running in "
                "this Pod from the environment Kinetic's operator gives every attempt Pod; "
                "outside one, use kinetic.attach(job_id), or pass k8s_name= and namespace=."
            )
        saved: dict[str, Any] = {
            "job_id": name,
            "namespace": ns,
            "function": names.ENV_PAYLOAD_URI in env,
            "result_uri": env.get(names.ENV_RESULT_URI),
        }
        return JobHandle.from_dict(saved | input_fields(name, env, from_env=k8s_name is None))

    @property
    def group_kind(self) -> str | None:
        """What group the job belongs to, as the reference names it: None for a job of its
        own, ``"map"`` for an input of a batch."""
        return None

    # The reference handle's other fields, with what each is on Kubernetes (read-only).

    @property
    def backend(self) -> str:
        """``"gke"``: the reference's name for how every job runs here (one Pod per attempt)."""
        return "gke"

    @property
    def project(self) -> None:
        """None: the kubeconfig context, not a cloud project, picks the cluster."""
        return None

    @property
    def zone(self) -> None:
        """None: the kubeconfig context, not a zone, picks the cluster."""
        return None

    @property
    def cluster_name(self) -> str | None:
        """The kubeconfig context the handle talks through (None: the current one)."""
        return self.context

    @property
    def k8s_name(self) -> str:
        """The Kubernetes object that holds the job: its KineticJob, or an input's KineticBatch."""
        return self.group_id or self.job_id

    @property
    def display_name(self) -> str:
        """The function's name, or a container job's command."""
        return self.func_name

    @property
    def bucket_name(self) -> str | None:
        """The bucket of the storage root (None until resolved, or for a file:// root)."""
        root = self.storage_root or ""
        return root.removeprefix("gs://").split("/", 1)[0] if root.startswith("gs://") else None

    def to_dict(self) -> dict[str, Any]:
        saved = {f.name: getattr(self, f.name) for f in fields(self) if f.init and f.name != "kube"}
        if self.group_kind is not None:  # for readers of the reference's saved handles
            saved["group_kind"] = self.group_kind
        return saved

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobHandle:
        """Rebuild from `to_dict()`; unknown keys (from newer versions) are ignored.

        A dict that describes one input of a batch (it has a ``group_index``)
        comes back as that input's handle, so a handle saved as JSON keeps
        answering from the batch rather than looking for a KineticJob.
        """
        if cls is JobHandle:
            kind = next((k for k in JobHandle._kinds if k.describes(d)), None)
            if kind is not None:
                return kind.from_dict(d)
        known = {f.name for f in fields(cls) if f.init and f.name != "kube"}
        return cls(**{k: v for k, v in d.items() if k in known})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register a subclass, so `JobHandle.from_dict` gives it the saved dicts it describes.

        The subclasses live in modules above this one (an input's handle needs
        the batch's manifest), so the base class learns of them here instead
        of importing them; `kinetic.api.jobs` imports them all.
        """
        super().__init_subclass__(**kwargs)
        JobHandle._kinds.append(cls)

    @classmethod
    def describes(cls, d: dict[str, Any]) -> bool:
        """Whether a saved handle is one of this subclass's; a job's own are the rest."""
        return False

    def _home(self) -> layout.Home | None:
        """This job's own storage prefix; None for a handle that does not know its UID."""
        if not self.uid:
            return None
        return layout.job_home(self._root(), self.namespace, self.job_id, self.uid)

    def result_location(self) -> str | None:
        """Where a function's result is stored (None for a container job, or a handle that
        knows neither the URI nor the job's UID). Knowing it reads nothing: nothing vouches
        for what is there until `result_anchor` does."""
        if self.result_uri:
            return self.result_uri
        home = self._home() if self.function else None
        return home.result_uri if home is not None else None

    def result_anchor(self) -> tuple[str | None, str | None]:
        """The result hash the API server holds (``status.resultSHA256``), and, when it holds
        none, why not if that means nothing vouches for the stored result (else None: the
        job simply recorded none).

        What a reader checks stored bytes against before it trusts them: `read_result`
        does, and so does the dashboard before it shows a failure's traceback.
        """
        stored, why = self.stored_result()
        return (stored.sha256 if stored is not None else None), why

    def stored_result(self) -> tuple[digest.Reported | None, str | None]:
        """`result_anchor` with the size the runner reported beside the hash
        (``status.resultBytes``): `read_result` reads no further."""
        obj = self._get()
        if obj is None:
            if self._stored_before_deletion is not None:
                return self._stored_before_deletion, None
            return None, (
                f"job {self.job_id} no longer exists in namespace {self.namespace}, so the API "
                "server holds no sha256 to check its result against, and storage alone can be "
                "rewritten by any Pod or bucket writer. Read a job's result before deleting it "
                "(result() does, and deletes it afterwards), or read it through the handle "
                "that deleted it (cleanup(gcs=False) keeps the hash it saw)"
            )
        if (obj.get("metadata") or {}).get("uid") != self.uid:
            return None, (
                f"the job named {self.job_id} in namespace {self.namespace} is another one now "
                "(created again since): nothing vouches for this one's result any more"
            )
        return reported_in(obj.get("status") or {}), None

    def _expected_sha256(self) -> str | None:
        """The result hash the API server holds for this job (None: none, or it is gone)."""
        return self.result_anchor()[0]

    def _root(self) -> str:
        """The storage root the job's artifacts live under."""
        if not self.storage_root:
            self.storage_root = resolve(namespace=self.namespace, context=self.context).storage_root
        return self.storage_root

    # ----------------------------------------------------------------- observing

    def _get(self) -> dict | None:
        return self._kube.get(r.JOB_PLURAL, self.namespace, self.job_id)

    def status(self) -> JobStatus:
        return JobStatus.of(self._get())

    def describe(self) -> dict[str, Any]:
        """The job's status block as the operator wrote it ({} when the job is gone)."""
        obj = self._get()
        return {} if obj is None else obj.get("status", {})

    def wait(
        self,
        timeout: float | None = None,
        on_status_change: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Block on a watch until the job is terminal or gone; TimeoutError leaves it running."""
        last: JobStatus | None = None
        for obj in self._kube.watch_one(r.JOB_PLURAL, self.namespace, self.job_id, timeout):
            current = JobStatus.of(obj)
            if current != last:
                last = current
                notify(on_status_change, current)
            if current.terminal:
                return current
        return JobStatus.NOT_FOUND

    @reference.moved_positions("JobHandle.result", reference.RESULT_BEFORE)
    def result(
        self,
        timeout: float | None = None,
        cleanup: bool | None = None,
        cleanup_timeout: float | None = None,
        cleanup_poll_interval: float | None = None,
        stream_logs: bool | None = None,
        on_status_change: Callable[[JobStatus], None] | None = None,
    ) -> Any:
        """Wait for the job and return its value, or raise the remote exception.

        By default a successful download is followed by cleanup of the resource
        and its artifacts; failed jobs are kept so their logs can be read, and so
        are debug jobs (`debug=True`), which a debugging session may revisit.
        With stream_logs=True every attempt's log is printed to stdout while waiting
        (False by default, for debug jobs too: a debugger owns that terminal).
        `cleanup_timeout` (the reference's) bounds the wait for that deletion
        (180 s by default); `cleanup_poll_interval` cannot matter (the deletion
        is watched, not polled) and warns once. The positional order is the
        reference's; ``on_status_change`` third or ``stream_logs`` fourth (this
        client's order before) warns (`kinetic.api.reference.ArgumentMoved`).
        """
        wait_for_deletion = self._cleanup_wait(
            "result", None, cleanup_timeout, cleanup_poll_interval
        )
        final = self._wait_streaming(timeout, on_status_change, bool(stream_logs))
        if final is JobStatus.CANCELLED:
            raise JobCancelled(f"job {self.job_id} was cancelled before it finished")
        outcome = self.read_result()
        if outcome is None:
            if final is JobStatus.NOT_FOUND:
                raise self._gone()
            if final is JobStatus.SUCCEEDED and not self.is_function():
                return self.describe().get("result")  # container job: its termination message
            if final is JobStatus.SUCCEEDED:
                raise ResultDeleted(
                    f"job {self.job_id} succeeded, but its result is no longer at "
                    f"{self.result_location()}: it was deleted from storage (by a cleanup, "
                    "or by hand). The job's status and logs are still readable; run it again "
                    "for its value"
                )
            message = self.describe().get("message") or "no result was recorded"
            raise JobFailed(f"job {self.job_id} {final.value}: {message}")
        if cleanup if cleanup is not None else outcome.ok and not self.debug:
            self.cleanup(timeout=wait_for_deletion)
            self._cleaned_by = "result"
        return payload.raise_remote(outcome)

    def _gone(self) -> JobFailed | JobCancelled:
        """Why a job that no longer exists, and left no result in storage, has no value."""
        where = f"job {self.job_id} in namespace {self.namespace}"
        if self._cleaned_by == "cancel":
            return JobCancelled(
                f"{where} was cancelled, and cancel() deleted it once it had stopped (as the "
                "reference's does; cancel(keep=True) keeps a cancelled job)"
            )
        if self._cleaned_by is not None:
            by = "an earlier result()" if self._cleaned_by == "result" else "cleanup()"
            return ResultDeleted(
                f"{where} was cleaned up by {by} on this handle: the job and its stored "
                "result are deleted, so there is nothing left to read. result() deletes them "
                "once it has read a success; pass cleanup=False to keep them for another read"
            )
        return JobFailed(
            f"{where} no longer exists and left no result in storage: it was deleted with "
            "its result (a result() or cleanup() elsewhere does that: result() cleans up "
            "after a success unless cleanup=False), or it never produced one"
        )

    def _cleanup_wait(
        self,
        method: str,
        timeout: float | None,
        cleanup_timeout: float | None,
        cleanup_poll_interval: float | None,
    ) -> float:
        """The reference's cleanup arguments of `method`, checked: how long to wait for a
        deletion (warning once when `cleanup_poll_interval`, which cannot matter, is given)."""
        where = f"{type(self).__name__}.{method}"
        reference.accept(where, cleanup_poll_interval=cleanup_poll_interval)
        return reference.cleanup_wait(where, timeout, cleanup_timeout)

    def _wait_streaming(
        self,
        timeout: float | None,
        on_status_change: Callable[[JobStatus], None] | None,
        stream_logs: bool,
    ) -> JobStatus:
        """`wait()`, printing the job's logs meanwhile when asked to."""
        if not stream_logs:
            return self.wait(timeout=timeout, on_status_change=on_status_change)
        with LogFollower(self):
            return self.wait(timeout=timeout, on_status_change=on_status_change)

    def is_function(self) -> bool:
        """Whether the job runs a function (its result is a stored pickle, `read_result`)
        rather than a container (its result is the termination message, in `describe`)."""
        return self.function or self.result_uri is not None

    def read_result(self) -> payload.Result | None:
        """The stored result, checked against the recorded sha256 before it is unpickled
        (None when there is none stored). Unpickling runs code from whoever ran the job:
        `result()` calls this once the job has ended, the dashboard only on an explicit ask.

        Raises `kinetic.model.digest.ResultMismatch` (naming the URI and both hashes)
        when the bytes differ or no hash was recorded, and its subclass
        `kinetic.model.digest.Unverifiable` (saying why) when nothing in the API
        server vouches for a hash any more.
        """
        uri = self.result_location()
        if not uri:
            return None
        stored, why = self.stored_result()
        if stored is None:  # nothing to check the bytes against: none are read
            if not storage.exists(uri):
                return None
            if why is not None:
                raise digest.Unverifiable(uri, why)
            raise digest.ResultMismatch(uri, None, "")
        try:
            data = read_stored(uri, stored)
        except storage.NotFound:
            return None
        digest.verify(data, stored.sha256, uri)
        return payload.load_result(data)

    # ----------------------------------------------------------------- logs

    def _pod_selector(self) -> str:
        return f"{names.LABEL_JOB}={self.job_id}"

    def _live_pods(self) -> list[V1Pod]:
        """This job's Pods that still exist, oldest attempt first: only those the operator
        recorded as its attempts' (`recorded_pods`), whatever other Pods carry its labels."""
        listed = self._kube.list_pods(self.namespace, self._pod_selector())
        return sort_by_attempt(self._trusted(listed))

    def _trusted(self, pods: list[V1Pod]) -> list[V1Pod]:
        """The Pods among ``pods`` the operator recorded for this job's attempts."""
        return recorded_pods(pods, self._recorded_attempts())

    def _recorded_attempts(self) -> list[dict[str, Any]]:
        """The attempts the operator recorded, as the job's status holds them."""
        return list(((self._get() or {}).get("status") or {}).get("attempts") or [])

    def pod(self, rank: int = 0) -> str | None:
        """The Pod of rank ``rank`` of the newest attempt while it exists, else None: the
        one whose log `stream_logs` follows (only a Pod the operator recorded counts)."""
        pod = pod_of_rank(self._live_pods(), rank)
        return pod.metadata.name if pod is not None else None

    def _spec(self) -> dict[str, Any]:
        """The job's spec as the API server holds it ({} once the job is gone)."""
        return (self._get() or {}).get("spec") or {}

    def _last_recorded_attempt(self) -> dict[str, Any] | None:
        """The newest attempt as the operator recorded it (its Pods may be gone)."""
        attempts = self.describe().get("attempts") or []
        if not attempts:
            return None
        return dict(max(attempts, key=lambda a: a.get("attempt", 0)))

    def hosts(self, attempt: dict[str, Any] | None) -> int:
        """Pods per attempt of this job (`hosts_of` its spec and ``attempt``, a recorded
        attempt or None): the ranks whose logs `logs(rank=...)` can read."""
        return hosts_of(self._spec(), attempt)

    def _archived_log_uri(self, pod: str) -> str | None:
        home = self._home()
        return home.log_uri(pod) if home is not None else None

    def _check_rank(self, rank: int) -> None:
        """Refuse a rank the job has no Pod for, naming its host count. Rank 0 always
        exists, so asking for it costs no lookup."""
        if isinstance(rank, int) and not isinstance(rank, bool) and rank == 0:
            return
        problem = rank_problem(self.job_id, rank, self.hosts(self._last_recorded_attempt()))
        if problem is not None:
            raise ValueError(problem)

    def _log_text(self, tail: int | None, rank: int = 0) -> str:
        """Rank ``rank``'s log of the newest attempt: from its Pod while it exists, else from
        the archive."""
        pod = self.pod(rank)
        if pod is not None:
            text = self._kube.pod_log(pod, self.namespace, tail)
            if text is not None:
                return text
            # Deleted between the LIST and the read; the operator archived it first.
            return self._archived_log(pod, tail)
        attempt = self._last_recorded_attempt()
        if attempt is None or not attempt.get("pod"):
            return ""
        return self._archived_log(member_pod(attempt, rank, self.hosts(attempt)), tail)

    def _archived_log(self, pod: str, tail: int | None) -> str:
        """The log the operator archived for ``pod`` before deleting it ('' if none)."""
        uri = self._archived_log_uri(pod)
        if uri is None:
            return ""
        try:
            text = storage.read_bytes(uri).decode(errors="replace")
        except storage.NotFound:
            return ""
        return last_lines(text, tail)

    def tail(self, n: int = 100, *, rank: int = 0) -> str:
        """The last `n` log lines of the newest attempt ('' before its Pod starts); of a
        multi-host job, rank ``rank``'s (0, the coordinator, by default)."""
        self._check_rank(rank)
        return self._log_text(n, rank)

    def logs(self, follow: bool = False, *, rank: int = 0) -> str | None:
        """The newest attempt's whole log, or with follow=True stream it to stdout until it ends.

        A multi-host job has one log per member: ``rank`` picks whose (0, the
        coordinator, whose result is the job's, by default); a rank the job
        does not have raises ValueError naming its host count. Once the
        attempt's Pods are gone the log comes from the archive the operator
        wrote, one per member, before deleting them.
        """
        self._check_rank(rank)
        if not follow:
            return self._log_text(None, rank)
        pod = self.pod(rank)
        if pod is None:
            sys.stdout.write(self._log_text(None, rank))
        else:
            for line in self.stream_logs(pod):
                sys.stdout.write(line)
                sys.stdout.flush()
        return None

    def stream_logs(self, pod: str | None = None) -> Iterator[str]:
        """Yield log lines as the pod writes them."""
        pod = pod or self.pod()
        if pod is None:
            return
        resp = self._kube.follow_log(pod, self.namespace)
        try:
            for chunk in resp.stream(amt=4096, decode_content=True):
                yield chunk.decode(errors="replace")
        finally:
            resp.release_conn()

    # ----------------------------------------------------------------- debugging

    def debug_attach(
        self,
        local_port: int = names.DEBUG_PORT,
        working_dir: str | None = None,
        *,
        timeout: float | None = 600.0,
        on_connection: Callable[[], None] | None = None,
    ) -> subprocess.Popen[str]:
        """Wait for the job's debugpy, forward `local_port` to it, and print the VS Code
        configuration that attaches; return the ``kubectl port-forward`` process.

        End the forward with `kinetic.debug.cleanup_port_forward(proc)`. The job
        must have been started with ``debug=True``; `timeout` bounds the wait for
        its Pod to start and its runner to listen. `working_dir` is the local
        folder of the function's source, for the path mappings (default: here).
        `on_connection` is called once, when a debugger first connects through
        the forward.
        """
        if not self.debug:
            raise debugging.DebugAttachError(
                f"job {self.job_id} was not started with debug=True, so nothing in its Pod "
                "waits for a debugger: submit it again with @kinetic.run(..., debug=True)"
            )
        pod = self.wait_for_debug_server(timeout)
        proc = debugging.start_port_forward(
            pod,
            self.namespace,
            local_port,
            names.DEBUG_PORT,
            self.context,
            on_connection=on_connection,
        )
        debugging.print_attach_instructions(local_port, working_dir)
        return proc

    def wait_for_debug_server(self, timeout: float | None = 600.0) -> str:
        """Wait until the job's runner says debugpy listens (its log's ready line); the Pod.

        Raises `DebugAttachError` when the job ends first, TimeoutError after
        `timeout` seconds (None: no bound).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pod = self.pod()
            if pod is not None and names.DEBUG_READY_LINE in (
                self._kube.pod_log(pod, self.namespace, 200) or ""
            ):
                return pod
            status = self.status()
            if status.terminal:
                raise debugging.DebugAttachError(
                    f"job {self.job_id} is {status.value}: there is no debugger to attach to"
                )
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {self.job_id}'s debugpy did not start within {timeout:.0f} s "
                    f"(status {status.value}); see `kinetic jobs logs {self.job_id}`"
                )
            time.sleep(1.0)

    def debug_result(self, timeout: float | None = None, *, local_port: int | None = None) -> Any:
        """A blocking call of a debug function: attach, then wait for the value.

        Says which job waits for a debugger and the command that attaches from
        another shell; forwards a local port (``local_port``, else 5678 when
        free, else any free one) once the Pod's debugpy listens, printing the
        VS Code configuration; says when a debugger connects; and returns
        `result()` (a debug job is kept). When no forward can be started
        (no kubectl, say) it says why and waits all the same: the command
        still attaches.
        """
        return debugging.debug_result(self, timeout, local_port)

    # ----------------------------------------------------------------- acting

    def cancel(
        self,
        cleanup_timeout: float | None = None,
        cleanup_poll_interval: float | None = None,
        *,
        timeout: float | None = None,
        keep: bool = False,
    ) -> JobStatus:
        """Stop the job, wait until it has stopped, then delete it, as the reference does.

        The operator stops the job's Pods (their logs are archived first) and
        records it CANCELLED; the KineticJob is then deleted, so `status()`
        says NOT_FOUND and a loop written for the reference (until SUCCEEDED,
        FAILED or NOT_FOUND) ends. Stored logs are kept, as the reference
        keeps a cancelled job's artifacts; this handle's `result()` raises
        `JobCancelled`. ``keep=True`` keeps the job, CANCELLED, readable with
        `status()`, `logs()` and ``kinetic jobs status``, until `cleanup()`.
        A job that had already ended keeps its outcome and is not deleted.

        Returns CANCELLED (or the outcome it had already). `cleanup_timeout`
        (or `timeout`) bounds each wait, 180 s by default;
        `cleanup_poll_interval` cannot matter (it is a watch) and warns once.
        """
        wait = self._cleanup_wait("cancel", timeout, cleanup_timeout, cleanup_poll_interval)
        if (
            self._kube.patch_spec(r.JOB_PLURAL, self.namespace, self.job_id, {"cancel": True})
            is None
        ):
            return JobStatus.NOT_FOUND
        final = self.wait(timeout=wait)
        if final is JobStatus.CANCELLED and not keep:
            self._delete(wait)
            self._cleaned_by = "cancel"
        return final

    def cleanup(
        self,
        k8s: bool = True,
        gcs: bool = True,
        cleanup_timeout: float | None = None,
        cleanup_poll_interval: float | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Delete the resource (its Pods go with it) and/or its stored artifacts and logs.

        `timeout` (or the reference's `cleanup_timeout`) bounds the wait for the
        deletion, 180 s by default; `cleanup_poll_interval` cannot matter (the
        deletion is watched) and warns once.

        Storage cleanup deletes only this job's own prefix (namespace, name and
        UID) and the upload folder the client made for it, never anything a
        URI in the spec points at. Anything the job wrote under
        KINETIC_OUTPUT_DIR is kept either way.

        With gcs=False this handle keeps the result hash the API server held
        just before the deletion (in memory only), so its result() still reads
        the kept result verified; a handle attached later cannot (nothing in
        the API server vouches for it any more) and raises
        `kinetic.model.digest.Unverifiable`.
        """
        timeout = self._cleanup_wait("cleanup", timeout, cleanup_timeout, cleanup_poll_interval)
        if k8s and not gcs:
            self._stored_before_deletion = self.stored_result()[0]
        if k8s:
            self._delete(timeout)
        if gcs:  # a container job has no result file, but may have archived logs there
            upload = layout.upload_dir_of(
                self._root(), self.namespace, self.job_id, self.payload_uri
            )
            delete_stored(self._home(), upload)
        if k8s and gcs:
            self._cleaned_by = "cleanup"

    def _delete(self, timeout: float) -> None:
        """Delete the KineticJob (its Pods go with it) and wait until it is gone."""
        if self._kube.delete(r.JOB_PLURAL, self.namespace, self.job_id):
            for obj in self._kube.watch_one(r.JOB_PLURAL, self.namespace, self.job_id, timeout):
                if obj is None:
                    break
