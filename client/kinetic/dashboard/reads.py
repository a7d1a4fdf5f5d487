"""What the pages show, read through the client's own handles: never a second reading.

A batch, an input and a job are read exactly as `kinetic.attach_batch`,
`kinetic.attach` and their handles read them (the batch status, the Pods the
operator recorded, the manifest as the status vouches for it, archived logs),
each handle given the server's one `KubeClient`.
Everything here is synchronous; the server runs it in worker threads.

Nothing is unpickled on its own. A result's size and digest are shown as
stored and as the API server vouches for them; a failure's traceback is read
as text (`kinetic.dashboard.tracebacks`) after the same digest check the client
makes; a value is loaded only by `reveal`, which the page calls on an explicit
click that says it runs code from whoever ran the job.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiException

from kinetic import storage
from kinetic.api import doctor
from kinetic.api.batches import BatchHandle, attach_batch, attach_input
from kinetic.api.config import operator_namespace, resolve
from kinetic.api.handle import JobHandle
from kinetic.api.inputs import InputHandle
from kinetic.api.jobs import attach
from kinetic.api.kube import ClusterUnreachable, KubeClient, kube_reason
from kinetic.dashboard import charts
from kinetic.dashboard.tables import Attempt, InputRow, input_row, summary
from kinetic.dashboard.tracebacks import MAX_FAILURE_BYTES, Failure, read_failure
from kinetic.model import digest, names, payload
from kinetic.model import resources as r
from kinetic.model.policy_keys import POLICY_CONFIG_MAP

log = logging.getLogger("kinetic.dashboard")

LOG_LINES = 2000  # the end of a log the page shows; the archive or the Pod has the rest
SHOWN_FAILURES = 20  # failures a batch's page lists with their tracebacks
REVEAL_CHARS = 20_000  # the most of a value's repr the page shows
_READERS = 8


# --------------------------------------------------------------------------- a batch


def warm_up(kube: KubeClient) -> None:
    """Load what the first page's read needs (the Kubernetes client's Pod API takes seconds
    to import) and the operator's published settings, before anyone asks."""
    try:
        kube.core  # noqa: B018 — made for its import, not its value
        resolve(context=kube.context)
    except Exception as e:  # noqa: BLE001 — the first page's read will say what is wrong
        log.info("warming up: %s", e)


@dataclass
class BatchView:
    """One read of a batch and all its inputs, shared by every tab that shows it."""

    handle: BatchHandle
    obj: dict[str, Any] | None
    rows: list[InputRow]
    built_at: float
    failures: dict[int, Failure | None] = field(default_factory=dict)  # read once each

    def head(self) -> dict[str, Any]:
        """The batch's own facts, counts and charts (the table comes a page at a time)."""
        h = self.handle
        status = (self.obj or {}).get("status") or h.status()
        row = summary(self.obj) if self.obj is not None else {}
        return {
            "namespace": h.namespace,
            "name": h.group_id,
            "title": h.name or h.func_name,
            "tags": h.tags,
            "total": h.total,
            "deleted": self.obj is None,
            "phase": status.get("phase", "PENDING"),
            "message": status.get("message"),
            "cancel": bool(((self.obj or {}).get("spec") or {}).get("cancel")),
            "summary": row,
            "counts": status.get("counts") or {},
            "failedIndexes": status.get("failedIndexes") or "",
            "completions": charts.completions(self.rows),
            "timeline": charts.timeline(self.rows, time.time()),
            "histogram": charts.histogram(self.rows),
            "builtAt": self.built_at,
        }


def open_batch(namespace: str, group_id: str, kube: KubeClient) -> BatchView:
    """Read a batch and every input's phase, attempts and message (`BatchHandle.overview`:
    one read of the batch, one LIST of its Pods, one read per manifest shard)."""
    handle = attach_batch(group_id, namespace=namespace, kube=kube)
    obj = kube.get(r.BATCH_PLURAL, namespace, group_id)
    return BatchView(handle, obj, batch_rows(handle), time.time())


def batch_rows(handle: BatchHandle) -> list[InputRow]:
    """Every input's row, in index order."""
    overview = handle.overview()
    refused = handle.submission_failures
    rows = []
    for i in range(handle.total):
        if i in refused:
            rows.append(input_row(i, "FAILED", [], f"not submitted: {refused[i]}"))
            continue
        phase = overview.phases.get(i)
        if phase is None:
            rows.append(input_row(i, "PENDING", [], None))
            continue
        record = overview.record(i)
        said = overview.of(i)
        attempts = [a.wire() for a in record.attempts] if record is not None else []
        if not attempts and said["attempt"]:  # running, not recorded yet: its Pod's attempt
            attempts = [{"attempt": said["attempt"], "outcome": "running"}]
        rows.append(input_row(i, phase.value, attempts, said.get("message")))
    return rows


def shown_failures(view: BatchView, limit: int = SHOWN_FAILURES) -> list[dict[str, Any]]:
    """The first failed inputs with their remote tracebacks (each result read once)."""
    failed = [row for row in view.rows if row.phase == "FAILED"][:limit]
    read_failures(view, [row.index for row in failed])
    out = []
    for row in failed:
        failure = view.failures.get(row.index)
        out.append(
            row.wire()
            | {
                "exceptionType": failure.exception_type if failure else None,
                "traceback": failure.traceback if failure else None,
            }
        )
    return out


def read_failures(view: BatchView, indexes: Iterable[int]) -> None:
    """Read the failures of ``indexes`` not read yet into ``view.failures``, in parallel."""
    todo = [i for i in indexes if i not in view.failures]
    if not todo:
        return

    def one(i: int) -> tuple[int, Failure | None]:
        return i, failure_of(view.handle.child(i))[0]

    with ThreadPoolExecutor(_READERS) as pool:
        view.failures.update(pool.map(one, todo))


# --------------------------------------------------------------------------- an input, a job


def input_handle(namespace: str, group_id: str, index: int, kube: KubeClient) -> InputHandle:
    cfg = resolve(namespace=namespace, context=kube.context)
    return attach_input(group_id, index, cfg, kube)


def job_handle(namespace: str, name: str, kube: KubeClient) -> JobHandle:
    return attach(name, namespace=namespace, kube=kube)


def detail(handle: JobHandle) -> dict[str, Any]:
    """An input's or a job's page: its phase, attempts, message and result (never loaded)."""
    described = handle.describe()
    phase = described.get("phase") or handle.status().value
    attempts = [Attempt.of(a).wire() for a in described.get("attempts") or []]
    out: dict[str, Any] = {
        "id": handle.job_id,
        "namespace": handle.namespace,
        "function": handle.display_name,
        "accelerator": handle.accelerator,
        "phase": phase,
        "message": described.get("message"),
        "attempts": attempts,
        "ranks": _ranks(handle, described),
        "container": not handle.is_function(),
    }
    if isinstance(handle, InputHandle):
        out |= {"batch": handle.group, "index": handle.index}
    if not handle.is_function():
        out["result"] = described.get("result") if phase == "SUCCEEDED" else None
    elif phase in ("SUCCEEDED", "FAILED"):
        out |= result_info(handle)
    return out


def _ranks(handle: JobHandle, described: dict[str, Any]) -> int:
    """How many Pods each attempt has (a gang's members), from what the operator recorded."""
    attempts = described.get("attempts") or []
    newest = max(attempts, key=lambda a: a.get("attempt", 0)) if attempts else None
    return handle.hosts(newest)


def result_info(handle: JobHandle) -> dict[str, Any]:
    """Where a function's result is, its size, and the digest the API server vouches for
    (or why none does); a failure's type, message and traceback, read as text."""
    uri = handle.result_location()
    info: dict[str, Any] = {"resultURI": uri, "resultBytes": None, "resultSHA256": None}
    if not uri:
        return info
    expected, why = handle.result_anchor()
    info["resultSHA256"], info["unverifiable"] = expected, why
    data, problem = _bounded(uri)
    if data is None:
        info["problem"] = problem
        info["resultAtLeast"] = MAX_FAILURE_BYTES if problem is None else None
        return info
    info["resultBytes"] = len(data)
    failure, info["problem"] = _judged(data, expected, why, uri)
    if failure is not None:
        info["failure"] = {
            "exceptionType": failure.exception_type,
            "message": failure.message,
            "traceback": failure.traceback,
            "phase": failure.phase,
        }
    return info


def _bounded(uri: str) -> tuple[bytes | None, str | None]:
    """The stored result when it is small enough to be a failure (None, None: larger, so
    a value, which is never read here), or None and why there is none."""
    try:
        return storage.read_at_most(uri, MAX_FAILURE_BYTES), None
    except storage.NotFound:
        return None, f"no result at {uri} (deleted after a read, or never written)"
    except ValueError:  # storage.TooLarge
        return None, None


def _judged(
    data: bytes, expected: str | None, why: str | None, uri: str
) -> tuple[Failure | None, str | None]:
    """The failure ``data`` records, once it matches the digest the API server holds (the
    client's own check); else None and why not (None, None: it records a success)."""
    if expected is None:
        return None, why or f"nothing vouches for {uri}: no digest was recorded for it"
    try:
        digest.verify(data, expected, uri)
    except digest.ResultMismatch as e:
        return None, str(e)
    return read_failure(data), None


def failure_of(handle: JobHandle) -> tuple[Failure | None, str | None]:
    """A failed call's text, checked as the client checks a result; else None and why not."""
    uri = handle.result_location()
    if not uri:
        return None, None
    data, problem = _bounded(uri)
    if data is None:
        return None, problem
    return _judged(data, *handle.result_anchor(), uri)


def reveal(handle: JobHandle) -> dict[str, Any]:
    """The value (or the exception) a function's result holds, loaded as the client loads
    it: `JobHandle.read_result` checks the digest first. Only on the user's explicit ask."""
    try:
        outcome = handle.read_result()
    except (digest.ResultMismatch, payload.PayloadError, storage.NotFound) as e:
        return {"ok": False, "refused": str(e)}
    if outcome is None:
        return {"ok": False, "refused": "there is no stored result to load"}
    shown = outcome.value if outcome.ok else outcome.exception
    text = repr(shown)
    return {
        "ok": outcome.ok,
        "type": type(shown).__qualname__,
        "repr": text[:REVEAL_CHARS],
        "cut": len(text) > REVEAL_CHARS,
    }


def log_of(handle: JobHandle, rank: int = 0) -> dict[str, Any]:
    """The end of the newest attempt's log (rank ``rank``'s), and the Pod that is writing
    it while one runs (the page then follows it live)."""
    text = handle.tail(LOG_LINES, rank=rank)
    pod = handle.pod(rank)
    return {"text": text, "pod": pod, "live": pod is not None and not handle.status().terminal}


# --------------------------------------------------------------------------- the operator


def operator_info(kube: KubeClient) -> dict[str, Any]:
    """The operator as this identity may see it: its replicas, the leader Lease's holder,
    the policy in force; each says "cannot tell" and why where it may not."""
    target = doctor.Target(None, kube.context)
    checks = {}
    for name, check in (("replicas", doctor.check_operator), ("leader", doctor.check_leader)):
        try:
            result = check(target)
            checks[name] = {"status": result.status.value, "detail": result.detail}
        except (ApiException, ClusterUnreachable) as e:
            checks[name] = {"status": "fail", "detail": f"cannot tell: {_why(e)}"}
    return {"namespace": operator_namespace(), **checks, "policy": _policy(kube)}


def _policy(kube: KubeClient) -> dict[str, Any]:
    try:
        cm = kube.config_map(operator_namespace(), POLICY_CONFIG_MAP)
    except ApiException as e:
        if e.status == 404:
            return {"found": False, "detail": f"no {POLICY_CONFIG_MAP}: no policy in force"}
        return {"found": None, "detail": f"cannot tell: {_why(e)}"}
    return {"found": True, "data": dict(cm.data or {})}


def _why(e: Exception) -> str:
    if isinstance(e, ApiException):
        return f"{e.status} {kube_reason(e)}"
    return str(e)


def objects_of(streams: Iterable[Any]) -> dict[str, Any]:
    """The list page's rows and each stream's state (a refusal shows the API server's word)."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    states = []
    for stream in streams:  # a namespace's stream and the all-namespaces one may overlap
        for obj in stream.snapshot():
            row = summary(obj)
            rows[(row["kind"], row["namespace"], row["name"])] = row
        states.append(
            {
                "plural": stream.plural,
                "namespace": stream.namespace,
                "synced": stream.synced,
                "refused": stream.refused,
            }
        )
    ordered = sorted(rows.values(), key=lambda row: row.get("created") or "", reverse=True)
    return {"rows": ordered, "streams": states}


def input_id(group_id: str, index: int) -> str:
    return names.input_id(group_id, index)


def dumps(value: Any) -> str:
    return json.dumps(value, default=str)
