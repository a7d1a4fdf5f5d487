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
list as it stands; a command is required: a Kinetic job runs to completion).

GPUs: the guide counts them (``gpus: 2``) but names no key for their type, so
``gpu_type`` is ours, spelt like the guide's ``workspace_type``. The pair is
looked up in the accelerator catalog the cluster offers (the operator's
published names, `kinetic.model.catalog`): ``gpus: 2, gpu_type: l4`` is
``gpu-l4x2``. A count the catalog does not offer for that type is refused
with the counts it does offer; ``gpus`` without ``gpu_type`` is refused too,
listing the types, since the catalog has no default GPU and guessing one
would pick the price of someone's job.

Only ``training`` jobs exist here: a ``distributed`` job needs several Pods
that start together and a ``workspace`` is interactive, and Kinetic runs one
Pod per job to completion, so both are refused with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kinetic.model import catalog
from kinetic.model.resources import API_VERSION, JOB_KIND

REQUEST_KEYS = ("jobs", "dry_run", "confirmed", "continue_on_error")
JOB_KEYS = ("type", "name", "project", "image", "command", "gpus", "gpu_type")


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


def job_object(index: int, job: Any, accelerators: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """Job ``index`` of a request as a KineticJob (where it is, for messages; the object).

    ``accelerators`` are the names the cluster's catalog offers. The object
    still goes through the same checks as any document; a job that cannot
    become one raises GuideError naming the field and the fix.
    """
    where = f"jobs[{index}]"
    if not isinstance(job, dict):
        raise GuideError(f"expected a mapping, got {type(job).__name__}", where)
    name = job.get("name")
    if isinstance(name, str) and name:
        where = f"{where} ({name})"
    kind = job.get("type", "training")
    if kind != "training":
        raise GuideError(
            f"type {kind!r} cannot be submitted: Kinetic runs each job as one Pod to completion "
            "(a distributed job needs Pods that start together, a workspace is interactive); "
            "use type: training",
            where,
        )
    unknown = sorted(set(job) - set(JOB_KEYS))
    if unknown:
        raise GuideError(
            f"{', '.join(unknown)}: not a key of a training job "
            f"(known keys: {', '.join(JOB_KEYS)})",
            where,
        )
    if not isinstance(name, str) or not name:
        raise GuideError("name is required", where)
    container: dict[str, Any] = {"command": _command(job.get("command"), where)}
    if job.get("image") is not None:
        container["image"] = job["image"]
    metadata = {"name": name}
    if job.get("project") is not None:
        metadata["namespace"] = job["project"]
    accelerator = gpu_accelerator(job.get("gpus"), job.get("gpu_type"), accelerators, where)
    spec = {"accelerator": accelerator, "container": container}
    return where, {"apiVersion": API_VERSION, "kind": JOB_KIND, "metadata": metadata, "spec": spec}


def _command(command: Any, where: str) -> list[Any]:
    if isinstance(command, str) and command.strip():
        return ["sh", "-c", command]
    if isinstance(command, list) and command:
        return command
    raise GuideError(
        "command is required: a Kinetic job runs a command to completion "
        "(e.g. command: python train.py, or a list such as [python, train.py])",
        where,
    )


def gpu_offers(accelerators: Sequence[str]) -> dict[str, list[int]]:
    """GPU type -> the counts one job may request, from a catalog's accelerator names."""
    offers: dict[str, list[int]] = {}
    for name in accelerators:
        if m := catalog.GPU_NAME.match(name):
            offers.setdefault(m["type"], []).append(int(m["count"] or 1))
    return {kind: sorted(counts) for kind, counts in sorted(offers.items())}


def gpu_accelerator(gpus: Any, gpu_type: Any, accelerators: Sequence[str], where: str) -> str:
    """The accelerator for ``gpus`` GPUs of ``gpu_type`` ("cpu" for none); raises GuideError."""
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        raise GuideError(f"gpus: expected a whole number of GPUs, got {gpus!r}", where)
    offers = gpu_offers(accelerators)
    types = ", ".join(offers) or "none"
    if gpu_type is None:
        if not gpus:
            return "cpu"
        raise GuideError(
            f"gpus: {gpus} GPU{'s' * (gpus != 1)} of which type? Add gpu_type, one of: {types}",
            where,
        )
    if not isinstance(gpu_type, str):
        raise GuideError(f"gpu_type: expected a GPU type such as l4, got {gpu_type!r}", where)
    if gpus == 0:
        return "cpu"
    kind = gpu_type.strip().lower().removeprefix("gpu-")
    count = 1 if gpus is None else gpus
    if kind not in offers:
        near = catalog.close_matches(kind, offers)
        hint = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
        raise GuideError(
            f"gpu_type: {gpu_type!r} is not a GPU type this cluster offers; {hint}"
            f"GPU types: {types}",
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
