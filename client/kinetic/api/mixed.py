"""Different calls as one batch: `kinetic.batch([...])`, a KineticBatch of ``spec.jobs``.

    @kinetic.run()
    def prepare(path): ...

    @kinetic.run(accelerator="gpu-l4", image="trainer:1.2")
    def train(lr, epochs=3): ...

    batch = kinetic.batch(
        [
            prepare.call("gs://data/raw"),
            train.call(0.01, epochs=5),
            train.with_options(image="trainer:1.3").call(0.02),
            kinetic.container(["sh", "-c", 'printf "$GREETING" > /dev/termination-log'],
                              image="busybox:1.36", env={"GREETING": "hi"}),
        ],
        max_concurrent=2,
        fail_fast=True,
    )
    batch.results()   # in the order given; a container's result is its termination message

Each entry is one input of the batch and runs with its own options (image,
accelerator, env, retries, deadline...). The batch is an ordinary
`BatchHandle`: `results()`, `as_completed()`, `failures()`, `cancel()`,
``batch.jobs[i]``, ``kinetic.attach("<group>-<i>")`` and ``kinetic jobs
status <group>-<i>`` work as for `run_async_map`. A function call's whole
payload (function, arguments, captured env) is uploaded once per entry,
exactly as `run_async` does; a call that cannot be pickled becomes a
submission failure of its index (it counts as a failure for fail-fast)
rather than losing the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kinetic import storage
from kinetic.api import accelerators, reference
from kinetic.api.batches import (
    BatchHandle,
    Submittable,
    create_batch,
    new_group_id,
)
from kinetic.api.config import ClientConfig, resolve
from kinetic.api.hosts import check_hosts
from kinetic.model import layout, limits, payload
from kinetic.model import resources as r

# The job spec an input gets when its call could not be packaged: never run (the
# operator records a submission failure as failed at once), only there to keep indexes.
_NOT_SUBMITTED = r.ContainerSpec(command=["kinetic-submission-failed"])


@dataclass(frozen=True)
class Call:
    """One call of a `RemoteFunction`, not submitted yet (`RemoteFunction.call`)."""

    fn: Submittable  # a `kinetic.api.remote.RemoteFunction` (above: its `call()` makes this)
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerCall:
    """One container command, not submitted yet (`kinetic.container`)."""

    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    accelerator: str = "cpu"
    retries: int | None = None
    deadline: int | None = None
    hosts: int | None = None

    def job_spec(self) -> r.BatchJobSpec:
        return r.BatchJobSpec(
            container=r.ContainerSpec(command=list(self.command), args=list(self.args)),
            image=self.image,
            accelerator=self.accelerator,
            env=[r.EnvVar(name=k, value=str(v)) for k, v in self.env.items()],
            retries=self.retries,
            deadline_seconds=self.deadline,
            hosts=self.hosts,
        )


def container(
    command: Sequence[str],
    *,
    args: Sequence[str] = (),
    image: str | None = None,
    env: Mapping[str, str] | None = None,
    accelerator: str = "cpu",
    retries: int | None = None,
    deadline: int | None = None,
    hosts: int | None = None,
) -> ContainerCall:
    """A container command for `batch`: its termination message (or log tail) is its result.

    ``retries`` unset means the batch's ``retries``. ``hosts=N`` runs it as a
    gang of N Pods (rank 0's termination message is the result); unset, the
    accelerator's own count. Invalid values (an env name that is not an
    identifier, a negative retry count, a host count the accelerator cannot
    have, ...) raise here.
    """
    check_hosts(hosts, accelerator)
    if isinstance(command, str):
        raise TypeError("command must be a list of strings, e.g. ['sh', '-c', 'echo hi']")
    call = ContainerCall(
        command=tuple(command),
        args=tuple(args),
        image=image,
        env=dict(env or {}),
        accelerator=accelerator,
        retries=retries,
        deadline=deadline,
        hosts=hosts,
    )
    call.job_spec()  # pydantic says what is wrong, before anything is uploaded
    return call


def batch(
    calls: Iterable[Call | ContainerCall],
    *,
    max_concurrent: int | None = limits.DEFAULT_MAX_CONCURRENT,
    retries: int | None = None,
    fail_fast: bool = False,
    cancel_running_on_fail: bool = False,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    namespace: str | None = None,
    context: str | None = None,
) -> BatchHandle:
    """Submit different calls as one KineticBatch (``spec.jobs``) and return its handle.

    Input ``i`` is ``calls[i]``. ``retries`` set applies to every entry; unset,
    each function call keeps its own ``@kinetic.run(retries=...)`` and each
    container its own ``retries`` (default 0). ``namespace`` / ``context``
    default to the first function call's, then to the client's configuration.
    """
    entries = list(calls)
    if not entries:
        raise ValueError("kinetic.batch needs at least one call")
    for i, entry in enumerate(entries):
        if not isinstance(entry, Call | ContainerCall):
            raise TypeError(
                f"entry {i} is a {type(entry).__name__}: pass fn.call(...) of a "
                "@kinetic.run function, or kinetic.container([...])"
            )
    limits.check_max_concurrent(max_concurrent)
    cfg = _config(entries, namespace, context)
    # Each function once, then the containers' accelerators: before anything is uploaded.
    for fn in dict.fromkeys(e.fn for e in entries if isinstance(e, Call)):
        fn.check_cluster(cfg)
    containers = [e.accelerator for e in entries if isinstance(e, ContainerCall)]
    accelerators.check(containers, accelerators.ClusterReads(cfg.context))
    limits.refuse(
        limits.check_batch_spec(
            {"jobs": [{}] * len(entries)}, storage_root=None, max_inputs=cfg.max_inputs
        )
    )
    group_id = new_group_id()
    jobs, failures = _package(cfg, group_id, entries, per_job_retries=retries is None)
    spec = r.KineticBatchSpec(
        jobs=jobs,
        max_concurrent=max_concurrent,
        retries=retries or 0,
        fail_fast=fail_fast,
        cancel_running_on_fail=cancel_running_on_fail,
        name=name,
        tags=dict(tags or {}),
        submission_failures=[r.SubmissionFailure(index=i, message=m) for i, m in failures.items()],
    )
    created = create_batch(cfg, group_id, spec)
    return BatchHandle.from_resource(created, cfg.storage_root, cfg.context)


def _config(
    entries: list[Call | ContainerCall], namespace: str | None, context: str | None
) -> ClientConfig:
    first = next((e.fn for e in entries if isinstance(e, Call)), None)
    if first is not None:
        namespace = namespace or first.options["namespace"]
        context = context or reference.context_for(
            "kinetic.run", first.options.get("cluster"), first.options["context"]
        )
    return resolve(namespace=namespace, context=context)


def _package(
    cfg: ClientConfig,
    group_id: str,
    entries: list[Call | ContainerCall],
    *,
    per_job_retries: bool,
) -> tuple[list[r.BatchJobSpec], dict[int, str]]:
    """Each entry's job spec, uploading function payloads in parallel; failures by index."""

    def one(i: int) -> tuple[r.BatchJobSpec, str | None]:
        entry = entries[i]
        if isinstance(entry, ContainerCall):
            spec = entry.job_spec()
            return (spec if per_job_retries else spec.model_copy(update={"retries": None})), None
        fn = entry.fn
        try:
            data = payload.build_job_payload(fn.fn, entry.args, entry.kwargs, env=fn.captured_env())
        except Exception as e:  # an unpicklable call fails alone, as a submission failure
            message = f"could not pickle the call of {fn.func_name}: {type(e).__name__}: {e}"
            return r.BatchJobSpec(container=_NOT_SUBMITTED), message
        upload = layout.new_upload_dir(cfg.storage_root, cfg.namespace, group_id)
        uri = layout.job_payload_uri(upload)
        storage.write_bytes(uri, data)
        job = fn.job_spec(
            r.FunctionSpec(payload_uri=uri, sha256=payload.sha256(data), name=fn.func_name)
        )
        fields = job.model_dump(exclude={"retries"}, exclude_none=True)
        fields["retries"] = job.retries if per_job_retries else None
        return r.BatchJobSpec.model_validate(fields), None

    jobs: list[r.BatchJobSpec] = []
    failures: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=16) as pool:
        for i, (job, error) in enumerate(pool.map(one, range(len(entries)))):
            jobs.append(job)
            if error is not None:
                failures[i] = error
    return jobs, failures
