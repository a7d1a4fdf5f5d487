"""The batch-submission guide's request format, for `kinetic batches submit`. Pure, no I/O.

Besides KineticBatch and KineticJob documents, a submission file may be one
request as the guide writes it (YAML or JSON)::

    jobs:
      - {type: training, name: job1, project: team-a, image: pytorch/pytorch:2,
         command: python train.py, gpus: 2, gpu_type: l4}
    dry_run: false            # optional; the flags --dry-run/--no-dry-run win
    confirmed: true           # optional; as --yes
    continue_on_error: true   # optional; the flags --continue-on-error/--stop-on-error win

Each job becomes one KineticJob, created and reported on its own:
``name`` is its name, ``project`` its namespace (default: the command's),
``image`` and ``command`` its container (a string runs under ``sh -c``, a
list as it stands). ``command`` is optional, as in the guide: without one the
image's own entrypoint runs (the Pod's container gets no command).

GPUs: the guide counts them (``gpus: 2``) but names no key for their type, so
``gpu_type`` is ours, spelt like the guide's ``workspace_type``. Without it
the administrator's ``defaultGpuType`` applies (`kinetic.model.policy_keys`);
with neither the job is refused, listing the types and both fixes, since
guessing a type would pick the price of someone's job. The pair is looked up
in the accelerator catalog the cluster offers (the operator's published
names, `kinetic.model.catalog`): ``gpus: 2, gpu_type: l4`` is ``gpu-l4x2``. A
count the catalog does not offer for that type is refused with the counts it
does offer.

How many jobs one request may hold is the policy's ``maxJobsPerRequest`` (the
guide's ``max_batch_size``), checked by the command for the whole request
(`kinetic.cli.submit_plan.request_size_problem`).

A ``distributed`` job is a multi-host job (``spec.hosts``): ``workers: N``
runs N Pods, ranks 0 .. N-1, each with ``gpus`` GPUs of ``gpu_type``, started
together and retried together. ``workers`` counts every Pod: there is no
separate master Pod, since rank 0 is both a worker and the coordinator the
others reach through ``MASTER_ADDR``; ``workers: 4, gpus: 2`` is 4 Pods and 8
GPUs. (Run:AI's own distributed CLI adds a master to its workers; a file
written for that count wants ``workers`` one higher here.) ``framework`` is
one of the guide's values and changes nothing about the job: every member
gets the same rendezvous environment (``MASTER_ADDR``, ``MASTER_PORT``,
``RANK``, ``WORLD_SIZE``, ``KINETIC_COORDINATOR_ADDRESS``, ...), which
torch.distributed and ``jax.distributed.initialize`` read as they stand and
from which a TensorFlow, MPI or XGBoost script builds its own cluster
description. An unknown value is refused, as it is likely a typo.

A ``workspace`` is interactive, and Kinetic runs each job to completion, so
it is refused with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kinetic.model import catalog, gang
from kinetic.model.policy_keys import DEFAULT_GPU_TYPE
from kinetic.model.resources import API_VERSION, JOB_KIND

REQUEST_KEYS = ("jobs", "dry_run", "confirmed", "continue_on_error")
JOB_KEYS = ("type", "name", "project", "image", "command", "gpus", "gpu_type")
DISTRIBUTED_KEYS = (*JOB_KEYS, "workers", "framework")
JOB_TYPES = ("training", "distributed")
# The guide's values; the rendezvous environment serves them all alike (module docstring).
FRAMEWORKS = ("pytorch", "tensorflow", "mpi", "jax", "xgboost")


class GuideError(ValueError):
    """A request or one of its jobs cannot be submitted; ``where`` names it, the text the fix."""

    def __init__(self, problem: str, where: str = "") -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


@dataclass(frozen=True)
class RequestSettings:
    """The request's own switches; None where it does not say."""

    continue_on_error: bool | None = None
    dry_run: bool | None = None
    confirmed: bool | None = None


def is_request(doc: Any) -> bool:
    """Whether a document is a guide request (a ``jobs`` list, no Kubernetes ``kind``)."""
    return isinstance(doc, dict) and "jobs" in doc and "kind" not in doc


def request_settings(doc: dict[str, Any]) -> RequestSettings:
    """The request's switches; raises GuideError for an unknown key or a non-boolean."""
    unknown = sorted(set(doc) - set(REQUEST_KEYS))
    if unknown:
        raise GuideError(
            f"{', '.join(unknown)}: not a key of a submission request "
            f"(known keys: {', '.join(REQUEST_KEYS)})"
        )
    values = {}
    for key in REQUEST_KEYS[1:]:
        value = doc.get(key)
        if value is not None and not isinstance(value, bool):
            raise GuideError(f"{key} must be true or false (got {value!r})")
        values[key] = value
    if not isinstance(doc["jobs"], list) or not doc["jobs"]:
        raise GuideError("jobs must be a non-empty list of job specifications")
    return RequestSettings(**values)


def job_object(
    index: int,
    job: Any,
    accelerators: Sequence[str],
    default_gpu_type: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Job ``index`` of a request as a KineticJob (where it is, for messages; the object).

    ``accelerators`` are the names the cluster's catalog offers;
    ``default_gpu_type`` the policy's type for ``gpus`` without ``gpu_type``.
    The object still goes through the same checks as any document; a job that
    cannot become one raises GuideError naming the field and the fix.
    """
    where = f"jobs[{index}]"
    if not isinstance(job, dict):
        raise GuideError(f"expected a mapping, got {type(job).__name__}", where)
    name = job.get("name")
    if isinstance(name, str) and name:
        where = f"{where} ({name})"
    kind = _job_type(job.get("type", "training"), where)
    known = DISTRIBUTED_KEYS if kind == "distributed" else JOB_KEYS
    unknown = sorted(set(job) - set(known))
    if unknown:
        raise GuideError(
            f"{', '.join(unknown)}: not a key of a {kind} job (known keys: {', '.join(known)})",
            where,
        )
    if not isinstance(name, str) or not name:
        raise GuideError("name is required", where)
    container: dict[str, Any] = {}
    if job.get("command") is not None:
        container["command"] = _command(job["command"], where)
    if job.get("image") is not None:
        container["image"] = job["image"]
    metadata = {"name": name}
    if job.get("project") is not None:
        metadata["namespace"] = job["project"]
    accelerator = gpu_accelerator(
        job.get("gpus"), job.get("gpu_type"), accelerators, where, default_gpu_type
    )
    spec: dict[str, Any] = {"accelerator": accelerator, "container": container}
    if kind == "distributed":
        spec["hosts"] = distributed_hosts(job, accelerator, where)
    return where, {"apiVersion": API_VERSION, "kind": JOB_KIND, "metadata": metadata, "spec": spec}


def _job_type(kind: Any, where: str) -> str:
    if kind in JOB_TYPES:
        return str(kind)
    if kind == "workspace":
        raise GuideError(
            "type 'workspace' cannot be submitted: a workspace is interactive, and Kinetic "
            "runs each job to completion; use type: training (or distributed) with a command",
            where,
        )
    raise GuideError(f"type {kind!r} is not a job type; use one of: {', '.join(JOB_TYPES)}", where)


def distributed_hosts(job: dict[str, Any], accelerator: str, where: str) -> int:
    """A distributed job's ``workers``, checked as ``spec.hosts`` is, and its ``framework``.

    ``workers`` is every Pod of the job, rank 0 included (no separate
    master; see the module docstring), so it is ``spec.hosts`` as it stands.
    """
    framework = job.get("framework")
    if framework is not None and framework not in FRAMEWORKS:
        raise GuideError(
            f"framework: {framework!r} is not one of {', '.join(FRAMEWORKS)}; any of them runs "
            "the same way here (every worker gets MASTER_ADDR, RANK, WORLD_SIZE, ...), so pick "
            "the closest or leave framework out",
            where,
        )
    workers = job.get("workers")
    if workers is None:
        raise GuideError(
            "workers is required for a distributed job: the number of Pods to run, rank 0 "
            "included (e.g. workers: 4)",
            where,
        )
    problems = gang.hosts_problems(workers, accelerator, catalog.default_catalog(), None, "workers")
    if problems:
        raise GuideError("; ".join(problems), where)
    return int(workers)


def _command(command: Any, where: str) -> list[Any]:
    if isinstance(command, str) and command.strip():
        return ["sh", "-c", command]
    if isinstance(command, list) and command:
        return command
    raise GuideError(
        f"command: {command!r} is not a command: give a string (run under sh -c, e.g. "
        "python train.py) or a list such as [python, train.py], or leave command out to "
        "run the image's entrypoint",
        where,
    )


def _default_gpu_type(
    gpus: Any, default: str | None, accelerators: Sequence[str], where: str
) -> str:
    """The policy's ``defaultGpuType`` for a job that counts GPUs but names no type."""
    if default is not None:
        return default
    types = ", ".join(gpu_offers(accelerators)) or "none"
    count = f"{gpus} GPU{'s' * (gpus != 1)}" if isinstance(gpus, int) else f"{gpus!r} GPUs"
    raise GuideError(
        f"gpus: {count} of which type? Add gpu_type (one of: {types}), or ask the "
        f"administrator to set {DEFAULT_GPU_TYPE} in the policy",
        where,
    )


def gpu_offers(accelerators: Sequence[str]) -> dict[str, list[int]]:
    """GPU type -> the counts one job may request, from a catalog's accelerator names."""
    offers: dict[str, list[int]] = {}
    for name in accelerators:
        if m := catalog.GPU_NAME.match(name):
            offers.setdefault(m["type"], []).append(int(m["count"] or 1))
    return {kind: sorted(counts) for kind, counts in sorted(offers.items())}


def gpu_accelerator(
    gpus: Any,
    gpu_type: Any,
    accelerators: Sequence[str],
    where: str,
    default_gpu_type: str | None = None,
) -> str:
    """The accelerator for ``gpus`` GPUs of ``gpu_type`` ("cpu" for none); raises GuideError.

    Without ``gpu_type`` the policy's ``default_gpu_type`` is the type, and
    the messages say it came from there.
    """
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        raise GuideError(f"gpus: expected a whole number of GPUs, got {gpus!r}", where)
    if not gpus and gpu_type is None:
        return "cpu"
    field = "gpu_type"
    if gpu_type is None:
        gpu_type = _default_gpu_type(gpus, default_gpu_type, accelerators, where)
        field = f"{DEFAULT_GPU_TYPE} (the policy's, for a job without gpu_type)"
    if not isinstance(gpu_type, str):
        raise GuideError(f"gpu_type: expected a GPU type such as l4, got {gpu_type!r}", where)
    if gpus == 0:
        return "cpu"
    return _offered_gpu(gpu_type, 1 if gpus is None else gpus, accelerators, where, field)


def _offered_gpu(
    gpu_type: str, count: int, accelerators: Sequence[str], where: str, field: str
) -> str:
    """The accelerator for ``count`` GPUs of ``gpu_type``, when the cluster offers that type
    in that count; else a GuideError naming ``field`` and what is offered."""
    offers = gpu_offers(accelerators)
    kind = gpu_type.strip().lower().removeprefix("gpu-")
    if kind not in offers:
        near = catalog.close_matches(kind, offers)
        hint = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
        raise GuideError(
            f"{field}: {gpu_type!r} is not a GPU type this cluster offers; {hint}"
            f"GPU types: {', '.join(offers) or 'none'}",
            where,
        )
    if count not in offers[kind]:
        counts = ", ".join(map(str, offers[kind]))
        raise GuideError(
            f"gpus: {count} {kind} GPUs per job is not offered; {kind} comes in {counts} "
            "GPUs per job: set gpus to one of those",
            where,
        )
    return catalog.canonical_name(f"{kind}x{count}")
