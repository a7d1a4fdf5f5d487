"""Heterogeneous batches (``spec.jobs``): which job spec input ``i`` runs. Pure, no I/O.

A KineticBatch has one of two forms. ``template`` + ``inputs`` runs one job
spec over many inputs (`kinetic.model.fanout`); ``jobs`` lists a different job
spec per input, and input ``i`` runs ``jobs[i]`` as it stands: its own
function or container, image, accelerator, env, deadline and resources.
Everything else about the batch (maxConcurrent, failFast, cancel,
cancelIndexes, the manifest, the status's counts and ranges, Pod names
``<batch>-<i>-<attempt>``) is the same in both forms, so the operator's
planner and Pod builder only ever ask this module three questions:

* how many inputs the batch has (`batch_total`);
* what input ``i`` runs (`job_at`), with its result and output under the
  batch's own storage prefix, like any other input;
* how many retries input ``i`` has (`retries_of`): the job's own
  ``retries`` when it sets one, else the batch's ``spec.retries``.

A container job also gets ``KINETIC_INDEX`` (its index in the batch), as a
container template's inputs do; there is no ``KINETIC_INPUT``, since a job
of the list has no input other than its own spec.
"""

from __future__ import annotations

from typing import Any

from kinetic.model import layout
from kinetic.model.inputcount import input_count
from kinetic.model.names import ENV_INDEX
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import (
    BatchJobSpec,
    EnvVar,
    KineticBatchSpec,
    KineticJobSpec,
    debug_problem,
)

__all__ = [
    "batch_total",
    "container_indexes",
    "foreign_job_uris",
    "is_container",
    "job_at",
    "retries_of",
    "validate_jobs",
]


def batch_total(spec: KineticBatchSpec) -> int:
    """How many inputs a batch has, in either form."""
    if spec.jobs is not None:
        return len(spec.jobs)
    if spec.inputs is None:
        raise ValueError("spec.inputs is required with spec.template")
    return input_count(spec.inputs)


def _job(spec: KineticBatchSpec, index: int) -> BatchJobSpec:
    jobs = spec.jobs
    if jobs is None:
        raise ValueError("not a heterogeneous batch: spec.jobs is not set")
    if not 0 <= index < len(jobs):
        raise IndexError(f"input index {index} is out of range: the batch has {len(jobs)} jobs")
    return jobs[index]


def retries_of(spec: KineticBatchSpec, index: int) -> int:
    """Extra attempts input ``index`` gets: its job's own ``retries`` if set, else the batch's."""
    if spec.jobs is None:
        return spec.retries
    own = _job(spec, index).retries
    return spec.retries if own is None else own


def is_container(spec: KineticBatchSpec, index: int) -> bool:
    """Whether input ``index`` runs a container command (its result is a termination message)."""
    if spec.jobs is None:
        return spec.template is not None and spec.template.container is not None
    return _job(spec, index).container is not None


def container_indexes(spec: KineticBatchSpec) -> IndexSet:
    """Every input that runs a container command, as one set (for the manifest header)."""
    if spec.jobs is None:
        return IndexSet.range(0, batch_total(spec)) if is_container(spec, 0) else IndexSet()
    return IndexSet(i for i, job in enumerate(spec.jobs) if job.container is not None)


def job_at(home: layout.Home, spec: KineticBatchSpec, index: int) -> KineticJobSpec:
    """The job spec input ``index`` of a ``spec.jobs`` batch runs with.

    ``jobs[index]`` with: the retries `retries_of` says, cancel off (the
    batch's ``cancel`` and ``cancelIndexes`` stop it), the output directory
    made per input (``/<index>`` appended to its own, or the batch's
    default), a function's result under the batch's prefix (whatever the
    job named), and a container's ``KINETIC_INDEX``.
    """
    job = _job(spec, index)
    fields: dict[str, Any] = {
        name: getattr(job, name) for name in KineticJobSpec.model_fields if name != "retries"
    }
    fields |= {
        "retries": retries_of(spec, index),
        "cancel": False,
        "output_dir": home.input_output_dir(job.output_dir, index),
    }
    if job.function is not None:
        fields["function"] = job.function.model_copy(
            update={"result_uri": home.input_result_uri(index)}
        )
    elif job.container is not None:
        index_env = EnvVar(name=ENV_INDEX, value=str(index))
        fields["env"] = [e for e in job.env if e.name != ENV_INDEX] + [index_env]
    return KineticJobSpec.model_validate(fields).model_copy(deep=True)


def validate_jobs(spec: KineticBatchSpec) -> list[str]:
    """What is wrong with a ``spec.jobs`` batch beyond its schema, one sentence per problem.

    Each job needs exactly one of function or container, and must not set
    ``cancel`` (the batch's ``cancel`` / ``cancelIndexes`` stop inputs);
    ``chunkSize`` and ``inputMode`` belong to template batches.
    """
    jobs = spec.jobs or []
    problems: list[str] = []
    for i, job in enumerate(jobs):
        where = f"spec.jobs[{i}]"
        if (job.function is None) == (job.container is None):
            problems.append(f"{where} needs exactly one of function or container")
        if (debug := debug_problem(job, where)) is not None:
            problems.append(debug)
        if job.cancel:
            problems.append(
                f"{where}.cancel must be false; add {i} to spec.cancelIndexes to cancel this "
                "job, or set spec.cancel to stop the batch"
            )
        if len(problems) >= 10:
            problems.append("(further jobs not checked)")
            break
    if spec.fixed_chunk != 1:
        problems.append(
            f"spec.chunkSize is {spec.chunk_size}, but a batch of spec.jobs runs one job per "
            "Pod: set spec.chunkSize to 1"
        )
    if spec.input_mode != "auto":
        problems.append(
            "spec.inputMode applies to spec.template with spec.inputs; each of spec.jobs "
            "carries its own call: leave spec.inputMode unset"
        )
    _collect_submission_failures(spec, len(jobs), problems)
    return problems


def _collect_submission_failures(spec: KineticBatchSpec, total: int, problems: list[str]) -> None:
    entries = f"spec.jobs has only {total} entr{'y' if total == 1 else 'ies'}"
    problems += submission_failure_problems(spec, total, entries)


def submission_failure_problems(spec: KineticBatchSpec, total: int, size: str) -> list[str]:
    """Each submission failure must name an input that exists, once; ``size`` says how many
    there are ("the batch has only 3 inputs"), for the message."""
    problems: list[str] = []
    seen: set[int] = set()
    for failure in spec.submission_failures:
        if failure.index >= total:
            problems.append(f"spec.submissionFailures has index {failure.index}, but {size}")
        elif failure.index in seen:
            problems.append(f"spec.submissionFailures lists index {failure.index} twice")
        seen.add(failure.index)
    return problems


def foreign_job_uris(root: str, namespace: str, spec: KineticBatchSpec) -> list[str]:
    """Why each storage URI the operator or runner would read from ``spec.jobs`` is refused."""
    found: list[str] = []
    for i, job in enumerate(spec.jobs or []):
        fn = job.function
        if fn is None:
            continue
        named = {
            f"spec.jobs[{i}].function.payloadURI": fn.payload_uri,
            f"spec.jobs[{i}].function.resultURI": fn.result_uri,
            f"spec.jobs[{i}].function.inputURI": fn.input_uri,
        }
        for field, uri in named.items():
            why = layout.outside_namespace(root, namespace, uri, field) if uri else None
            if why is not None:
                found.append(why)
    return found
