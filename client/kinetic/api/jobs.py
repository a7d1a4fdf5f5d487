"""Single remote calls: submitting a KineticJob, and finding any handle again (`attach`).

A handle (`kinetic.api.handle.JobHandle`, exported here as before) is a
small, JSON-serialisable description of one KineticJob that answers every
question from the API server or storage, so a handle rebuilt in another
process by `attach()` is as good as the original.

The inputs of a batch are not KineticJobs; their handles
(`kinetic.api.inputs.InputHandle`, a subclass) answer the same questions from
the batch's status, its Pods and its manifest. `attach("<grp>-<i>")` returns
one, so this module sits above the batches' (`kinetic.api.batches`) and
importing it makes every kind of saved handle rebuildable by
`JobHandle.from_dict`.
"""

from __future__ import annotations

import functools
import itertools
import re
import secrets
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

from kinetic import storage
from kinetic.api import reference
from kinetic.api.batches import BatchHandle, InputOverview, attach_input
from kinetic.api.config import ClientConfig, default_namespace, resolve
from kinetic.api.handle import JobCancelled as JobCancelled  # kinetic.api.jobs.*, as before
from kinetic.api.handle import JobFailed as JobFailed
from kinetic.api.handle import JobHandle as JobHandle
from kinetic.api.handle import JobStatus as JobStatus
from kinetic.api.handle import last_lines as last_lines
from kinetic.api.handle import last_uid as last_uid
from kinetic.api.handle import sort_by_attempt as sort_by_attempt
from kinetic.api.kube import KubeClient
from kinetic.model import layout, names
from kinetic.model import resources as r

# --------------------------------------------------------------------------- submitting


_NAME_UNSAFE = re.compile(r"[^a-z0-9]+")
_TRAILING_INDEX = re.compile(r"^(.+)-(0|[1-9][0-9]{0,8})$")


def new_job_id(func_name: str) -> str:
    """A DNS-1123 name that leaves room for `-<attempt>` on its attempt Pods."""
    slug = _NAME_UNSAFE.sub("-", func_name.lower()).strip("-")[:40].strip("-") or "job"
    return f"{slug}-{secrets.token_hex(4)}"


def now_iso() -> str:
    return names.fmt_time(datetime.now(UTC))


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
            "labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY, **(labels or {})},
        },
        "spec": spec.wire(),
    }
    kube = KubeClient(cfg.context)
    created = kube.create(r.JOB_PLURAL, cfg.namespace, body)
    return JobHandle.from_resource(created, cfg.context, cfg.storage_root, kube)


@reference.moved_positions("kinetic.attach", ("job_id", "namespace", "cluster"))
def attach(
    job_id: str,
    project: str | None = None,
    cluster: str | None = None,
    *,
    namespace: str | None = None,
    context: str | None = None,
    zone: str | None = None,
    backend: str | None = None,
    base_image_repo: str | None = None,
    kube: KubeClient | None = None,
) -> JobHandle:
    """Rebuild the handle of a job, or of one input of a batch (``<group>-<i>``), anywhere.

    A job whose resource was cleaned up but whose result is still in storage is
    still attachable, so `result()` can read it. An input of a batch is
    attachable while its batch or the batch's manifest exists.

    The positional order is the reference's (``job_id, project, cluster``);
    ``namespace`` and ``context`` are keyword-only. A second positional
    argument, the namespace before this order, warns (`ArgumentMoved`) and is
    taken as ``project``. A context's name passed as ``cluster`` selects that
    context, as ``context=`` does.

    The reference API's arguments (`kinetic.api.reference`): `cluster` selects
    the kubeconfig context (a name that selects none is a `ConfigError`
    listing them); `backend` is "gke" or None; `project`, `zone` and
    `base_image_repo` cannot matter here and warn once, naming the equivalent.

    ``kube`` is the client the handle asks the API server through: pass one to
    share it between handles (the dashboard does); by default one is made for
    the context.
    """
    reference.accept(
        "kinetic.attach",
        backend=backend,
        project=project,
        zone=zone,
        base_image_repo=base_image_repo,
    )
    kube = reference.kube_for("kinetic.attach", cluster, context, kube)
    cfg = resolve(namespace=namespace, context=kube.context)
    split = names.split_input_id(job_id)
    if split is not None:
        return attach_input(split[0], split[1], cfg, kube)
    obj = kube.get(r.JOB_PLURAL, cfg.namespace, job_id)
    if obj is not None:
        return JobHandle.from_resource(obj, kube.context, cfg.storage_root, kube)
    match = _TRAILING_INDEX.match(job_id)
    if match is not None:  # an input of a batch named by hand (kubectl), e.g. "sweep-3"
        try:
            return attach_input(match.group(1), int(match.group(2)), cfg, kube)
        except LookupError:
            pass
    uid = last_uid(cfg.storage_root, cfg.namespace, "jobs", job_id)
    if uid is not None:
        home = layout.job_home(cfg.storage_root, cfg.namespace, job_id, uid)
        if storage.exists(home.result_uri):
            return JobHandle(
                job_id=job_id,
                namespace=cfg.namespace,
                result_uri=home.result_uri,
                context=kube.context,
                storage_root=cfg.storage_root,
                uid=uid,
                function=True,
                kube=kube,
            )
    raise LookupError(
        f"No KineticJob {job_id!r} in namespace {cfg.namespace!r} and no result recorded "
        f"for that name under {layout.namespace_prefix(cfg.storage_root, cfg.namespace)}. "
        "Check the id and namespace "
        "(`kinetic jobs list -n NAMESPACE`; an input of a batch is `<group id>-<index>`). "
        "A job whose result was read is gone with it: result() deletes the job and its "
        "result after a success unless cleanup=False (`kinetic jobs result --keep`)."
    )


T = TypeVar("T")

DEFAULT_LIST_LIMIT = 1000
"""How many handles `list_jobs` returns unless told: one batch may hold millions of inputs."""


@reference.moved_positions("kinetic.list_jobs", ("namespace", "context"))
def list_jobs(
    project: str | None = None,
    zone: str | None = None,
    cluster: str | None = None,
    namespace: str | None = None,
    *,
    context: str | None = None,
    include_batches: bool = True,
    limit: int | None = DEFAULT_LIST_LIMIT,
    offset: int = 0,
    backend: str | None = None,
    base_image_repo: str | None = None,
) -> list[JobHandle]:
    """Handles for the jobs in the namespace, newest first, as the reference lists them.

    Every KineticJob, and (``include_batches``, the default) every input of
    every batch, whose handle has ``group_id``, ``group_kind`` ("map") and
    ``group_index`` set; a batch's inputs follow each other in index order.
    At most ``limit`` handles (None: all) from position ``offset``: a page.
    `iter_jobs` walks them all lazily. The positional order is the
    reference's (``project, zone, cluster, namespace``); a first or second
    positional argument (the namespace and the context before this order)
    warns (`ArgumentMoved`). The reference API's arguments are taken as by
    `attach`.
    """
    reference.accept(
        "kinetic.list_jobs",
        backend=backend,
        project=project,
        zone=zone,
        base_image_repo=base_image_repo,
    )
    context = reference.context_for("kinetic.list_jobs", cluster, context)
    rows = iter_jobs_with_status(namespace, context, include_batches=include_batches)
    return [h for h, _ in page_of(rows, limit, offset)]


def iter_jobs(
    namespace: str | None = None, context: str | None = None, *, include_batches: bool = True
) -> Iterator[JobHandle]:
    """`list_jobs` without a bound: every handle, newest first, built as it is reached."""
    rows = iter_jobs_with_status(namespace, context, include_batches=include_batches)
    return (h for h, _ in rows)


def page_of(rows: Iterable[T], limit: int | None, offset: int = 0) -> list[T]:
    """Rows `offset` to `offset + limit` (all from `offset` when `limit` is None)."""
    if offset < 0 or (limit is not None and limit < 0):
        raise ValueError(f"limit and offset must be 0 or more; got limit={limit}, offset={offset}")
    stop = None if limit is None else offset + limit
    return list(itertools.islice(rows, offset, stop))


StatusOf = Callable[[], dict[str, Any]]


def iter_jobs_with_status(
    namespace: str | None = None, context: str | None = None, *, include_batches: bool = True
) -> Iterator[tuple[JobHandle, StatusOf]]:
    """Each handle, newest first, with how to read its status: a job's came with the LIST;
    a batch input's is read (once per batch, for all its inputs) only when asked for."""
    ns = namespace or default_namespace(context)
    kube = KubeClient(context)  # one client for every handle listed
    owners: list[tuple[str, str, JobHandle | BatchHandle]] = []
    jobs: dict[str, dict[str, Any]] = {}
    for obj in kube.iter_list(r.JOB_PLURAL, ns):
        h = JobHandle.from_resource(obj, context, kube=kube)
        jobs[h.job_id] = obj.get("status", {})
        owners.append((h.created_at, h.job_id, h))
    if include_batches:
        root: str | None = None  # resolved at the first batch: a namespace may have none
        for obj in kube.iter_list(r.BATCH_PLURAL, ns):
            root = root or resolve(namespace=ns, context=context).storage_root
            b = BatchHandle.from_resource(obj, root, context, kube)
            owners.append((b.created_at, b.group_id, b))
    # Creation times are RFC 3339 in UTC, so they sort as text.
    for _, name, owner in sorted(owners, key=lambda o: (o[0], o[1]), reverse=True):
        if isinstance(owner, BatchHandle):
            yield from _inputs_with_status(owner)
        else:
            yield owner, functools.partial(dict, jobs[name])


def _inputs_with_status(batch: BatchHandle) -> Iterator[tuple[JobHandle, StatusOf]]:
    """A batch's inputs in index order (not those that failed at submission), each with its
    phase, attempt and message (`BatchHandle.overview`, read once for the batch)."""
    read: list[InputOverview] = []

    def status_of(index: int) -> dict[str, Any]:
        if not read:
            read.append(batch.overview())
        return read[0].of(index)

    failed = batch.submission_failures
    for i in range(batch.total):
        if i not in failed:
            yield batch.child(i), functools.partial(status_of, i)


def list_jobs_with_status(
    namespace: str | None = None, context: str | None = None
) -> list[tuple[JobHandle, dict[str, Any]]]:
    """Each KineticJob's handle and the status the same LIST returned (no read per job)."""
    return [
        (h, status())
        for h, status in iter_jobs_with_status(namespace, context, include_batches=False)
    ]
