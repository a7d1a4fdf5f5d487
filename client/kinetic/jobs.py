"""Single remote calls: the `JobHandle` a user holds and the submission that creates it.

A handle is a small, JSON-serialisable description of one KineticJob. It holds
no live state: every question (status, result, logs) goes to the API server
or to storage, so a handle rebuilt in another process by `attach()` is as
good as the original.
"""

from __future__ import annotations

import enum
import logging
import re
import secrets
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any

from kinetic import kube, payload, storage
from kinetic import resources as r
from kinetic.config import ClientConfig, resolve

log = logging.getLogger("kinetic")


class JobStatus(enum.Enum):
    """What a user sees of a job. NOT_FOUND: the resource no longer exists."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    NOT_FOUND = "NOT_FOUND"

    @property
    def terminal(self) -> bool:
        return self is not JobStatus.PENDING and self is not JobStatus.RUNNING

    @classmethod
    def of(cls, obj: dict | None) -> JobStatus:
        if obj is None:
            return cls.NOT_FOUND
        return cls(obj.get("status", {}).get("phase") or "PENDING")


class JobCancelled(RuntimeError):
    """The job was cancelled before it produced a result."""


class JobFailed(RuntimeError):
    """The job failed without a result payload (a container job, or a pod that died)."""


@dataclass
class JobHandle:
    """Durable description of one submitted job; rebuild it anywhere with `kinetic.attach`."""

    job_id: str
    namespace: str
    func_name: str = ""
    accelerator: str = "cpu"
    created_at: str = ""
    result_uri: str | None = None
    artifacts_uri: str | None = None
    context: str | None = None
    group_id: str | None = None
    group_index: int | None = None

    # ----------------------------------------------------------------- building

    @classmethod
    def from_resource(cls, obj: dict, context: str | None = None) -> JobHandle:
        meta, spec = obj["metadata"], obj.get("spec", {})
        fn = spec.get("function") or {}
        labels = meta.get("labels") or {}
        result_uri = fn.get("resultURI") or obj.get("status", {}).get("resultURI")
        index = labels.get(r.LABEL_INDEX)
        return cls(
            job_id=meta["name"],
            namespace=meta["namespace"],
            func_name=fn.get("name") or " ".join((spec.get("container") or {}).get("command", [])),
            accelerator=spec.get("accelerator", "cpu"),
            created_at=meta.get("creationTimestamp", ""),
            result_uri=result_uri,
            artifacts_uri=_parent(result_uri),
            context=context,
            group_id=labels.get(r.LABEL_BATCH),
            group_index=int(index) if index is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobHandle:
        """Rebuild from `to_dict()`; unknown keys (from newer versions) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    # ----------------------------------------------------------------- observing

    def _get(self) -> dict | None:
        return kube.get(r.JOB_PLURAL, self.namespace, self.job_id, self.context)

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
        for obj in kube.watch_one(r.JOB_PLURAL, self.namespace, self.job_id, timeout, self.context):
            current = JobStatus.of(obj)
            if current != last:
                last = current
                _notify(on_status_change, current)
            if current.terminal:
                return current
        return JobStatus.NOT_FOUND

    def result(
        self,
        timeout: float | None = None,
        cleanup: bool | None = None,
        on_status_change: Callable[[JobStatus], None] | None = None,
    ) -> Any:
        """Wait for the job and return its value, or raise the remote exception.

        By default a successful download is followed by cleanup of the resource
        and its artifacts; failed jobs are kept so their logs can be read.
        """
        final = self.wait(timeout=timeout, on_status_change=on_status_change)
        if final is JobStatus.CANCELLED:
            raise JobCancelled(f"job {self.job_id} was cancelled before it finished")
        outcome = self._read_result()
        if outcome is None:
            message = self.describe().get("message") or "no result was recorded"
            if final is JobStatus.NOT_FOUND:
                raise JobFailed(
                    f"job {self.job_id} no longer exists in namespace {self.namespace} and left "
                    "no result in storage"
                )
            if final is JobStatus.SUCCEEDED and self.result_uri is None:
                return self.describe().get("result")  # container job: its termination message
            raise JobFailed(f"job {self.job_id} {final.value}: {message}")
        if cleanup if cleanup is not None else outcome.ok:
            self.cleanup()
        return payload.raise_remote(outcome)

    def _read_result(self) -> payload.Result | None:
        if not self.result_uri:
            return None
        try:
            return payload.load_result(storage.read_bytes(self.result_uri))
        except storage.NotFound:
            return None

    # ----------------------------------------------------------------- logs

    def _pod(self) -> str | None:
        """The newest pod of the newest attempt, or None before one exists."""
        pods = (
            kube.core(self.context)
            .list_namespaced_pod(self.namespace, label_selector=f"{r.LABEL_JOB}={self.job_id}")
            .items
        )
        if not pods:
            return None
        pods.sort(
            key=lambda p: (
                int(p.metadata.labels.get(r.LABEL_ATTEMPT, 0)),
                p.metadata.creation_timestamp,
            )
        )
        return pods[-1].metadata.name

    def tail(self, n: int = 100) -> str:
        """The last `n` log lines of the current attempt ('' before its pod starts)."""
        pod = self._pod()
        if pod is None:
            return ""
        return kube.core(self.context).read_namespaced_pod_log(pod, self.namespace, tail_lines=n)

    def logs(self, follow: bool = False) -> str | None:
        """The whole log, or with follow=True stream it to stdout until the pod ends."""
        pod = self._pod()
        if pod is None:
            return None if follow else ""
        api = kube.core(self.context)
        if not follow:
            return api.read_namespaced_pod_log(pod, self.namespace)
        for line in self.stream_logs(pod):
            sys.stdout.write(line)
            sys.stdout.flush()
        return None

    def stream_logs(self, pod: str | None = None) -> Iterator[str]:
        """Yield log lines as the pod writes them."""
        pod = pod or self._pod()
        if pod is None:
            return
        resp = kube.core(self.context).read_namespaced_pod_log(
            pod, self.namespace, follow=True, _preload_content=False
        )
        try:
            for chunk in resp.stream(amt=4096, decode_content=True):
                yield chunk.decode(errors="replace")
        finally:
            resp.release_conn()

    # ----------------------------------------------------------------- acting

    def cancel(self, timeout: float = 180) -> JobStatus:
        """Ask the operator to stop the job and wait until it has (CANCELLED or already done)."""
        if (
            kube.patch_spec(
                r.JOB_PLURAL, self.namespace, self.job_id, {"cancel": True}, self.context
            )
            is None
        ):
            return JobStatus.NOT_FOUND
        return self.wait(timeout=timeout)

    def cleanup(self, k8s: bool = True, gcs: bool = True, timeout: float = 180) -> None:
        """Delete the resource (its Jobs and Pods go with it) and/or its stored artifacts.

        Anything the job wrote under KINETIC_OUTPUT_DIR is kept either way.
        """
        if k8s and kube.delete(r.JOB_PLURAL, self.namespace, self.job_id, self.context):
            for obj in kube.watch_one(
                r.JOB_PLURAL, self.namespace, self.job_id, timeout, self.context
            ):
                if obj is None:
                    break
        if gcs and self.artifacts_uri:
            storage.delete_prefix(self.artifacts_uri + "/")


# --------------------------------------------------------------------------- submitting


_NAME_UNSAFE = re.compile(r"[^a-z0-9]+")


def new_job_id(func_name: str) -> str:
    """A DNS-1123 name that leaves room for `-<attempt>` on the batch/v1 Job."""
    slug = _NAME_UNSAFE.sub("-", func_name.lower()).strip("-")[:40].strip("-") or "job"
    return f"{slug}-{secrets.token_hex(4)}"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def submit_job(
    cfg: ClientConfig,
    spec: r.KineticJobSpec,
    job_id: str,
    labels: dict[str, str] | None = None,
) -> JobHandle:
    """Create the KineticJob and return its handle."""
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.JOB_KIND,
        "metadata": {
            "name": job_id,
            "namespace": cfg.namespace,
            "labels": {"app.kubernetes.io/managed-by": "kinetic", **(labels or {})},
        },
        "spec": spec.wire(),
    }
    created = kube.create(r.JOB_PLURAL, cfg.namespace, body, cfg.context)
    return JobHandle.from_resource(created, cfg.context)


def attach(job_id: str, namespace: str | None = None, context: str | None = None) -> JobHandle:
    """Rebuild the handle of a job from any process.

    A job whose resource was cleaned up but whose result is still in storage is
    still attachable, so `result()` can read it.
    """
    cfg = resolve(namespace=namespace, context=context)
    obj = kube.get(r.JOB_PLURAL, cfg.namespace, job_id, cfg.context)
    if obj is not None:
        return JobHandle.from_resource(obj, cfg.context)
    artifacts = storage.join(cfg.storage_root, "jobs", job_id)
    result_uri = storage.join(artifacts, "result.pkl")
    if storage.exists(result_uri):
        return JobHandle(
            job_id=job_id,
            namespace=cfg.namespace,
            result_uri=result_uri,
            artifacts_uri=artifacts,
            context=cfg.context,
        )
    raise LookupError(
        f"No KineticJob {job_id!r} in namespace {cfg.namespace!r} and no result under "
        f"{artifacts}. Check the id and namespace (`kinetic jobs list -n NAMESPACE`)."
    )


def list_jobs(
    namespace: str | None = None,
    context: str | None = None,
    include_batch_children: bool = False,
) -> list[JobHandle]:
    """Handles for every KineticJob in the namespace, oldest first."""
    return [h for h, _ in list_jobs_with_status(namespace, context, include_batch_children)]


def list_jobs_with_status(
    namespace: str | None = None,
    context: str | None = None,
    include_batch_children: bool = False,
) -> list[tuple[JobHandle, dict[str, Any]]]:
    """Each job's handle and the status the same LIST returned (no read per job)."""
    ns = namespace or kube.current_namespace(context)
    pairs = [
        (JobHandle.from_resource(o, context), o.get("status", {}))
        for o in kube.list_(r.JOB_PLURAL, ns, context)
    ]
    if not include_batch_children:
        pairs = [(h, st) for h, st in pairs if h.group_id is None]
    return sorted(pairs, key=lambda pair: pair[0].created_at)


def _parent(uri: str | None) -> str | None:
    return uri.rsplit("/", 1)[0] if uri else None


def _notify(callback: Callable[[JobStatus], None] | None, status: JobStatus) -> None:
    if callback is None:
        return
    try:
        callback(status)
    except Exception:  # a user's callback must never break result collection
        log.exception("on_status_change callback raised; ignoring")
