"""One attempt of one unit of a KineticBatch as a Pod. Pure: no API calls.

A unit is one input, or ``spec.chunkSize`` consecutive inputs of a function
batch. A one-input unit runs exactly like a KineticJob (the runner's single
contract, or the user's container with the input in its environment); a
chunk hands the runner every input of the unit in ``KINETIC_CHUNK`` and the
function once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kinetic.model import layout
from kinetic.model.batchjobs import batch_total, retries_of
from kinetic.model.catalog import Catalog
from kinetic.model.fanout import child_spec, job_template
from kinetic.model.gang import effective_hosts
from kinetic.model.names import (
    ENV_CHUNK,
    ENV_FAIL_FAST,
    ENV_INDEX,
    ENV_JOB_NAME,
    ENV_JOB_NAMESPACE,
    ENV_PAYLOAD_URI,
    ENV_RESULT_URI,
    ENV_STOP_URI,
    LABEL_ATTEMPT,
    LABEL_BATCH,
    LABEL_CHUNK,
    LABEL_INDEX,
    input_id,
    input_pod_name,
)
from kinetic.model.rerun import original_index
from kinetic.model.resources import BATCH_KIND, KineticBatchSpec, KineticJobSpec

from kinetic_operator.logic.batch_logic import unit_inputs
from kinetic_operator.logic.errors import UnitRefused
from kinetic_operator.logic.podspec import Owner, build_pod, function_env
from kinetic_operator.settings import OperatorSettings


@dataclass(frozen=True)
class SizedUnit:
    """A unit the operator sized: how many inputs it holds, and those its next Pod runs."""

    size: int
    inputs: tuple[int, ...]


def build_unit_pod(
    batch: str,
    namespace: str,
    uid: str,
    spec: KineticBatchSpec,
    settings: OperatorSettings,
    unit: int,
    attempt: int,
    hashes: Sequence[str | None] | None,
    known: Mapping[int, str] | None = None,
    fuse_driver: bool | None = None,
    sized: SizedUnit | None = None,
) -> dict[str, Any]:
    """The Pod of attempt ``attempt`` of the unit starting at input ``unit``.

    ``sized``: a unit the operator sized (chunkSize auto): the Pod runs the unit's inputs
    not settled yet, always as a chunk (its runner marks each input's begin and end in the
    log, `kinetic.model.progress`), and stops before its next input once the batch stops.

    ``fuse_driver``: whether the cluster has the GCS FUSE CSI driver (see
    `datavolumes.apply`), asked by the caller only for a batch with fuse volumes.

    ``known``: result hashes of inputs an earlier attempt of the unit recorded,
    as its checked report said. A chunk's entry carries its input's
    (``resultSHA256``), so the runner keeps that result instead of running
    the input again, and replaces any other it finds (`kinetic.runtime.runner`).
    """
    home = layout.batch_home(settings.storage_root or "", namespace, batch, uid)
    total = batch_total(spec)
    indexes = list(unit_inputs(unit, spec.fixed_chunk, total))
    if sized is not None:
        indexes = list(sized.inputs)
    labels = {LABEL_BATCH: batch, LABEL_INDEX: str(unit), LABEL_ATTEMPT: str(attempt)}
    env = {
        ENV_JOB_NAME: input_id(batch, unit),
        ENV_JOB_NAMESPACE: namespace,
        "KINETIC_ATTEMPT": str(attempt),
    }
    if len(indexes) == 1 and sized is None:
        child = _input_child(home, spec, unit, hashes, env)
    else:
        labels[LABEL_CHUNK] = str(sized.size if sized is not None else len(indexes))
        child = _chunk_child(home, spec, (batch, unit, attempt), indexes, hashes, known, sized, env)
    owner = Owner(batch, namespace, uid, BATCH_KIND)
    return build_pod(
        owner,
        child,
        settings,
        name=input_pod_name(batch, unit, attempt),
        labels=labels,
        env=env,
        fuse_driver=fuse_driver,
        volumes_at="spec.template" if spec.template is not None else f"spec.jobs[{unit}]",
        home=home if settings.storage_root else None,
    )


def _input_child(
    home: layout.Home,
    spec: KineticBatchSpec,
    unit: int,
    hashes: Sequence[str | None] | None,
    env: dict[str, str],
) -> KineticJobSpec:
    """A one-input unit: the input's own job, its index, output and result in ``env``."""
    child = child_spec(home, spec, unit, input_sha256=_hash(hashes, unit, spec))
    if child.function is not None:  # containers get it with their input, in spec.env
        indexes_ = spec.inputs.indexes if spec.inputs is not None else None
        env[ENV_INDEX] = str(original_index(indexes_, unit))
    if child.output_dir:
        env["KINETIC_OUTPUT_DIR"] = child.output_dir
    env |= function_env(child)
    if child.function is not None and child.function.result_uri is not None:
        env[ENV_RESULT_URI] = child.function.result_uri
    return child


def _chunk_child(
    home: layout.Home,
    spec: KineticBatchSpec,
    pod: tuple[str, int, int],
    indexes: list[int],
    hashes: Sequence[str | None] | None,
    known: Mapping[int, str] | None,
    sized: SizedUnit | None,
    env: dict[str, str],
) -> KineticJobSpec:
    """A chunk (or sized unit) of ``pod`` (batch, unit, attempt): the template's function,
    with its payload, inputs and where it reports in ``env``."""
    batch, unit, attempt = pod
    child = job_template(spec)  # validate_batch_spec: chunks are template batches only
    fn = child.function
    assert fn is not None  # validate_batch_spec: chunks are function templates only
    env[ENV_PAYLOAD_URI] = fn.payload_uri
    env["KINETIC_PAYLOAD_SHA256"] = fn.sha256
    env["KINETIC_INPUT_MODE"] = spec.input_mode
    if sized is None:  # a sized unit's inputs report their digests in its log's marks
        env["KINETIC_REPORT_URI"] = home.report_uri(input_pod_name(batch, unit, attempt))
    else:
        env[ENV_STOP_URI] = home.stop_uri
        if spec.fail_fast and retries_of(spec, unit) == 0:  # every failure is final
            env[ENV_FAIL_FAST] = "1"
    env[ENV_CHUNK] = json.dumps(
        [_chunk_entry(home, spec, i, hashes, known or {}) for i in indexes],
        separators=(",", ":"),
    )
    return child


def _chunk_entry(
    home: layout.Home,
    spec: KineticBatchSpec,
    index: int,
    hashes: Sequence[str | None] | None,
    known: Mapping[int, str],
) -> dict[str, Any]:
    one = child_spec(home, spec, index, input_sha256=_hash(hashes, index, spec))
    fn = one.function
    assert fn is not None  # validate_batch_spec: chunks are function templates only
    entry: dict[str, Any] = {"index": index, "resultURI": fn.result_uri}
    original = original_index(spec.inputs.indexes if spec.inputs else None, index)
    if original != index:  # a rerun's input keeps its KINETIC_INDEX (older runners: no key)
        entry["originalIndex"] = original
    if index in known:
        entry["resultSHA256"] = known[index]
    if one.output_dir:
        entry["outputDir"] = one.output_dir
    if fn.input_uri is not None:
        entry["inputURI"] = fn.input_uri
        entry["inputSHA256"] = fn.input_sha256
    else:
        entry["inputJSON"] = fn.input_json
    return entry


def _hash(hashes: Sequence[str | None] | None, index: int, spec: KineticBatchSpec) -> str | None:
    if spec.inputs is None or spec.inputs.count is None or hashes is None:
        return None
    original = original_index(spec.inputs.indexes, index)  # the list is the source's
    digest = hashes[original]
    if digest is None:
        raise UnitRefused(f"input {original} has no entry in the input hash list")
    return digest


def unit_job(spec: KineticBatchSpec, unit: int) -> KineticJobSpec | None:
    """The job spec unit ``unit`` runs: the template, or its own entry of ``spec.jobs``."""
    if spec.template is not None:
        return spec.template
    jobs = spec.jobs or []
    return jobs[unit] if 0 <= unit < len(jobs) else None


def unit_hosts(spec: KineticBatchSpec, catalog: Catalog) -> Callable[[int], int]:
    """Unit -> the Pods each of its attempts runs as (`gang.effective_hosts`), resolved here,
    once for the template or each job: the reconcile resolves them when it accepts the spec
    (`batch_round.Accepted.hosts`) and every later step reads that answer."""
    template = spec.template
    if template is not None:
        every = effective_hosts(template.hosts, catalog, template.accelerator)
        return lambda unit: every
    jobs = tuple(effective_hosts(job.hosts, catalog, job.accelerator) for job in spec.jobs or ())
    return lambda unit: jobs[unit] if 0 <= unit < len(jobs) else 1


def log_uri(home: layout.Home, pod: str) -> str:
    """Where the log of one of the batch's Pods is archived."""
    return home.log_uri(pod)
