"""Resolving ``spec.inputs.fromBatch``: a rerun's inputs from its source batch.

The source is the KineticBatch of that name in *this* namespace, as the API
server holds it: its spec (which may not change once accepted, beyond
maxConcurrent and the cancel fields) and its status say what it ran and
which inputs failed. Storage is read only where the object points and
vouches (`kinetic.model.manifest`): a source that is itself a rerun keeps its
resolved inputs in its accepted spec, checked against its
``status.acceptedSpecSHA256``; a status whose ranges were cut is completed
from the manifest header its ``status.manifestSHA256`` vouches for. Every
read is bounded, and a batch can never read another namespace's.

A source that was deleted is not rerun: nothing in the API server vouches
for its records any more, and any Pod or bucket writer could have changed
them (its template names the code the rerun would run). Decided so for
this reason; rerun a batch before deleting it.

The resolution happens once: the accepted spec stored for the rerun holds
the result (template, inputs with ``indexes``, input mode), and every
later reconcile, also after an operator restart, reuses it, checked
against the rerun's own ``status.acceptedSpecSHA256``.

`rerun_spec` is the pure decision; `load_source` the reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kinetic import storage
from kinetic.model import digest, layout
from kinetic.model.fanout import input_count
from kinetic.model.limits import MAX_SPEC_BYTES, header_max_bytes
from kinetic.model.manifest import Anchor, ManifestHeader, decode_header
from kinetic.model.rerun import SELECT_FAILED, SelectionError, originals, select
from kinetic.model.resources import FromBatch, KineticBatchSpec, Phase
from pydantic import ValidationError

from kinetic_operator.bounded_read import TooLarge, read_at_most

FIELD = "spec.inputs.fromBatch"


class SourceProblem(ValueError):
    """The source batch cannot be rerun; the message names the field and what to do."""


@dataclass(frozen=True)
class Source:
    """What the operator read about the source batch."""

    uid: str
    spec: KineticBatchSpec
    header: ManifestHeader | None


def rerun_spec(spec: KineticBatchSpec, source: Source) -> KineticBatchSpec:
    """The spec the rerun runs: the source's inputs restricted to the selection.

    The template is this spec's when given, else the source's; the input
    mode is always the source's (it says how its inputs are passed). Raises
    `SourceProblem`.
    """
    wanted = spec.inputs.from_batch if spec.inputs is not None else None
    assert wanted is not None
    src = source.spec
    if src.inputs is None:
        raise SourceProblem(
            f"{FIELD}.name: batch {wanted.name} is a batch of different jobs (spec.jobs), "
            "which fromBatch cannot rerun; list the jobs to run again in a new batch's spec.jobs"
        )
    if src.inputs.from_batch is not None and src.inputs.indexes is None:
        raise SourceProblem(
            f"{FIELD}.name: batch {wanted.name} never resolved its own inputs "
            "(it failed before it ran), so there is nothing to rerun"
        )
    header = source.header
    if wanted.indexes == SELECT_FAILED:
        if header is None:
            raise SourceProblem(
                f"{FIELD}.indexes: batch {wanted.name} has no manifest yet, so which of its "
                "inputs failed is not known; rerun it once it has finished"
            )
        if not Phase(header.phase).terminal:
            raise SourceProblem(
                f"{FIELD}.indexes: batch {wanted.name} is still {header.phase}; rerun its "
                "failed inputs once it has finished (or name them as ranges)"
            )
    try:
        positions = select(
            wanted.indexes,
            total=input_count(src.inputs),
            failed=header.failed_indexes if header else "",
            submission_failures=[f.index for f in src.submission_failures],
        )
    except SelectionError as exc:
        raise SourceProblem(f"{FIELD}.indexes: {exc}") from None
    inputs = src.inputs.model_copy(
        update={
            "indexes": str(originals(src.inputs.indexes, positions)),
            "from_batch": FromBatch(name=wanted.name, uid=source.uid, indexes=wanted.indexes),
        }
    )
    return spec.model_copy(
        update={
            "template": spec.template or src.template,
            "inputs": inputs,
            "input_mode": src.input_mode,
        }
    )


def load_source(root: str, namespace: str, wanted: FromBatch, obj: dict[str, Any] | None) -> Source:
    """The source batch ``obj`` (as the API server holds it, None when there is none),
    with what storage holds of it that its status vouches for.

    Raises `SourceProblem` for a source that is gone, replaced, or whose
    records do not match what its status vouches for; storage being
    unreachable propagates (the reconcile is retried).
    """
    meta = (obj or {}).get("metadata") or {}
    uid = meta.get("uid")
    if obj is None or not isinstance(uid, str):
        raise SourceProblem(
            f"{FIELD}.name: there is no batch {wanted.name} in namespace {namespace} (any "
            "more): a deleted batch is not rerun, since nothing in the API server vouches "
            "for its records once it is gone and any Pod or bucket writer can change them. "
            "Check the name (the group id, grp-...); rerun a batch before deleting it"
        )
    if wanted.uid is not None and wanted.uid != uid:
        raise SourceProblem(
            f"{FIELD}.uid: batch {wanted.name} was deleted and created again since (its uid "
            f"is {uid}, not {wanted.uid}); the batch this names is gone and is not rerun"
        )
    try:
        home = layout.batch_home(root, namespace, wanted.name, uid)
        live = KineticBatchSpec.model_validate(obj.get("spec") or {})
    except (ValueError, ValidationError) as exc:
        raise SourceProblem(f"{FIELD}.name: batch {wanted.name} cannot be read: {exc}") from None
    status = obj.get("status") or {}
    spec = live
    if live.inputs is not None and live.inputs.from_batch is not None:
        spec = _resolved_rerun(home, wanted.name, status.get("acceptedSpecSHA256"))
    header = _outcomes(home, wanted.name, status)
    return Source(uid=uid, spec=spec, header=header)


def _resolved_rerun(home: layout.Home, name: str, expected: Any) -> KineticBatchSpec:
    """A rerun source's own resolved spec (its inputs), as its status vouches for it."""
    if not isinstance(expected, str):
        raise SourceProblem(
            f"{FIELD}.name: batch {name} is a rerun whose resolved inputs nothing vouches for "
            "(it was accepted before the operator recorded digests): rerun its own source "
            "instead"
        )
    uri = home.accepted_spec_uri
    try:
        data = read_at_most(uri, MAX_SPEC_BYTES)
    except storage.NotFound:
        raise SourceProblem(f"{FIELD}.name: the accepted spec of batch {name} is gone") from None
    except TooLarge as exc:
        raise SourceProblem(f"{FIELD}.name: the accepted spec of batch {name}: {exc}") from None
    actual = digest.sha256(data)
    if actual != expected:
        raise SourceProblem(
            f"{FIELD}.name: the accepted spec of batch {name} ({uri}) was changed in "
            f"storage: it hashes to {actual}, its status.acceptedSpecSHA256 says {expected}; "
            "it is not rerun"
        )
    try:
        doc = json.loads(data)
        return KineticBatchSpec.model_validate(doc["spec"])
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        why = f"{FIELD}.name: the accepted spec of batch {name} is unreadable: {exc}"
        raise SourceProblem(why) from None


def _outcomes(home: layout.Home, name: str, status: dict[str, Any]) -> ManifestHeader | None:
    """The source's phase and failed inputs: from its status, or, when its ranges were cut,
    from the manifest header the status vouches for (None before it has a phase)."""
    phase = status.get("phase")
    if not phase:
        return None
    total = status.get("total") or 0
    if not status.get("truncated"):
        return ManifestHeader(
            group_id=name, total=total, phase=phase, failed_indexes=status.get("failedIndexes", "")
        )
    anchor = Anchor.of(status)
    if anchor.uri is None or home.header_slot(anchor.uri) is None:
        raise SourceProblem(f"{FIELD}.name: batch {name} has no manifest to read its outcomes from")
    try:
        data = read_at_most(anchor.uri, header_max_bytes(total))
    except storage.NotFound:
        raise SourceProblem(f"{FIELD}.name: the manifest of {name} is gone") from None
    except TooLarge as exc:
        raise SourceProblem(f"{FIELD}.name: the manifest of {name}: {exc}") from None
    if anchor.sha256 is not None and digest.sha256(data) != anchor.sha256:
        raise SourceProblem(
            f"{FIELD}.name: the manifest of {name} ({anchor.uri}) was changed in storage: it "
            f"hashes to {digest.sha256(data)}, its status.manifestSHA256 says {anchor.sha256}"
        )
    try:
        header = decode_header(data)
    except ValueError as exc:
        why = f"{FIELD}.name: the manifest of {name} is unreadable: {exc}"
        raise SourceProblem(why) from None
    return header
