"""Accepting a KineticBatch's spec: what the operator will act on, and why it may not.

A reconcile's second step (`batches._accept_spec`) asks this module, in
order: is the live spec valid for this operator (`load_spec`); may the spec
stored when the batch was first accepted be trusted, and is it still allowed
(`check_stored`); which spec to act on, given the immutable fields
(`accept`); what a rerun's ``fromBatch`` resolves to (`resolve_rerun`); and
whether the input hash list reads (`load_hashes`). `spec_condition` reports
a refused change in the status. Each answer is a spec or the sentences that
say why it cannot run; the caller writes them to the status.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kinetic import storage
from kinetic.model import digest, layout, limits
from kinetic.model.fanout import (
    foreign_batch_uris,
    parse_sha256_list,
    validate_batch_spec,
)
from kinetic.model.gang import batch_hosts_problems
from kinetic.model.limits import hash_list_max_bytes
from kinetic.model.resources import (
    FromBatch,
    KineticBatchSpec,
    KineticBatchStatus,
    Phase,
)
from pydantic import ValidationError

from kinetic_operator.accepted import accepted_bytes, judge_stored, read_accepted
from kinetic_operator.bounded_read import TooLarge, read_at_most
from kinetic_operator.handlers.batch_memory import BatchMemory
from kinetic_operator.kube import Kube
from kinetic_operator.logic.batch_logic import (
    Event,
    immutable_change,
    merge_mutable,
    with_condition,
)
from kinetic_operator.logic.policy import Policy
from kinetic_operator.rerun_source import SourceProblem, load_source, rerun_spec
from kinetic_operator.settings import OperatorSettings

COND_SPEC = "SpecAccepted"


def load_spec(
    body: dict[str, Any], settings: OperatorSettings, namespace: str
) -> tuple[KineticBatchSpec | None, list[str]]:
    """The spec, or the sentences that say why it cannot run."""
    if not settings.storage_root:
        return None, [
            "the operator has no storage root (KINETIC_STORAGE_ROOT) for the batch manifest"
        ]
    # First, on the raw spec: a hostile value (deep, huge) is judged before it is parsed.
    too_big = limits.check_batch_spec(
        body.get("spec"), storage_root=settings.storage_root, max_inputs=settings.max_inputs
    )
    if too_big:
        return None, too_big
    try:
        spec = KineticBatchSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        return None, [_problem(err) for err in exc.errors()]
    foreign = foreign_batch_uris(settings.storage_root, namespace, spec)
    return spec, foreign or validate_batch_spec(spec) or batch_hosts_problems(
        spec, settings.accelerator_catalog
    )


def _problem(err: Any) -> str:
    """One pydantic error as a sentence naming its field (a whole-spec error names itself)."""
    if not err["loc"]:  # KineticBatchSpec's own check: its message names the fields
        return str(err["msg"]).removeprefix("Value error, ")
    return f"spec.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"


def check_stored(
    mem: BatchMemory,
    home: layout.Home,
    old: KineticBatchStatus,
    accepted_before: bool,
    live: KineticBatchSpec,
    settings: OperatorSettings,
    policy: Policy | None,
) -> list[str]:
    """Once per process: the accepted spec stored for this batch, checked against its status
    and judged again (`kinetic_operator.accepted`); why it may not be used, if so.
    ``accepted_before``: the status has a phase (the operator wrote it)."""
    accepted = mem.accepted
    if accepted.stored_checked:
        return []
    if Phase(old.phase).terminal and from_batch(live) is None:
        return []  # an ended batch acts on nothing stored
    stored, why = read_accepted(home, old.accepted_spec_sha256, accepted_before, live)
    if why is not None:
        return [why]
    if stored is not None:
        problems = judge_stored(stored.spec, live, home, settings, policy)
        if problems:
            return problems
    accepted.stored, accepted.stored_checked = stored, True
    return []


def accept(
    mem: BatchMemory, home: layout.Home, spec: KineticBatchSpec
) -> tuple[KineticBatchSpec, str | None]:
    """The spec to act on, and a refusal message if someone changed an immutable field.

    The first spec accepted is stored next to the manifest, so the accepted
    template and inputs survive an operator restart; later edits only take
    effect for maxConcurrent and cancel. Its digest goes into the status with
    the next status write, before any Pod exists (`batch_round.vouching`); one already
    vouched for is taken as read back (`check_stored`). Anything stored that
    nothing vouches for is written over. The name's ``current.json`` is
    pointed at this batch's UID at the same time, so `attach_batch` finds the
    manifest once the batch is deleted.
    """
    accepted = mem.accepted
    if accepted.spec is None:
        if accepted.stored is not None:
            accepted.spec, accepted.sha256 = accepted.stored.spec, accepted.stored.sha256
        else:
            uid = home.uid
            data = accepted_bytes(uid, spec)
            storage.write_bytes(home.current_uri, layout.CurrentRecord(uid=uid).to_bytes())
            storage.write_bytes(home.accepted_spec_uri, data)
            accepted.spec, accepted.sha256 = spec, digest.sha256(data)
    change = immutable_change(accepted.spec, spec)
    if change is None:
        return spec, None
    return merge_mutable(accepted.spec, spec), change


def resolve_rerun(
    kube: Kube,
    settings: OperatorSettings,
    mem: BatchMemory,
    home: layout.Home,
    spec: KineticBatchSpec,
) -> tuple[KineticBatchSpec | None, list[str]]:
    """A ``fromBatch`` spec as it runs, resolved from its source once.

    Later reconciles (and a restarted operator, through the accepted spec
    stored for this UID, which its status vouches for) reuse the first
    resolution, so the rerun keeps the inputs it started with whatever
    happens to the source afterwards. The source is read through the API
    server (`rerun_source`). What it resolves to is judged as any batch's
    spec is: bounds, storage URIs, cross-field rules.
    """
    base = _rerun_base(mem)
    try:
        if base is not None:
            resolved = spec.model_copy(
                update={
                    "template": base.template,
                    "inputs": base.inputs,
                    "input_mode": base.input_mode,
                }
            )
        else:
            resolved = _rerun_from_source(kube, home, spec)
    except SourceProblem as exc:
        return None, [str(exc)]
    mem.accepted.rerun = resolved
    return resolved, _rerun_problems(settings, home, resolved)


def _rerun_base(mem: BatchMemory) -> KineticBatchSpec | None:
    """The rerun's first resolution: this process's, else the accepted spec stored."""
    accepted = mem.accepted
    stored = accepted.stored.spec if accepted.stored is not None else None
    return accepted.rerun or (
        stored if stored and stored.inputs and stored.inputs.indexes is not None else None
    )


def _rerun_from_source(kube: Kube, home: layout.Home, spec: KineticBatchSpec) -> KineticBatchSpec:
    """The rerun resolved from its source batch, read through the API server."""
    wanted = from_batch(spec)
    assert wanted is not None
    source = kube.get_kinetic_batch(home.namespace, wanted.name)
    return rerun_spec(spec, load_source(home.root, home.namespace, wanted, source))


def _rerun_problems(
    settings: OperatorSettings, home: layout.Home, resolved: KineticBatchSpec
) -> list[str]:
    """Why a resolved rerun cannot run, judged as any batch's spec is."""
    assert resolved.inputs is not None  # a rerun's are the source's, resolved
    plain = resolved.model_copy(
        update={"inputs": resolved.inputs.model_copy(update={"from_batch": None})}
    )
    bounds = limits.check_batch_spec(
        resolved.wire(), storage_root=home.root, max_inputs=settings.max_inputs
    )
    foreign = foreign_batch_uris(home.root, home.namespace, resolved)
    return bounds or foreign or validate_batch_spec(plain)


def from_batch(spec: KineticBatchSpec) -> FromBatch | None:
    """The batch this one reruns, if any (a spec.jobs batch has no inputs)."""
    return spec.inputs.from_batch if spec.inputs is not None else None


def load_hashes(mem: BatchMemory, spec: KineticBatchSpec) -> list[str]:
    """Read the input hash list once per batch; a bad list fails the batch."""
    uri = spec.inputs.sha256_uri if spec.inputs is not None else None
    if uri is None or spec.inputs is None or mem.accepted.hashes is not None:
        return []
    try:
        data = read_at_most(uri, hash_list_max_bytes(spec.inputs.count or 0))
        mem.accepted.hashes = parse_sha256_list(
            data, expected_sha256=spec.inputs.sha256, count=spec.inputs.count or 0
        )
    except storage.NotFound:
        return [f"spec.inputs.sha256URI {uri} does not exist"]
    except TooLarge as exc:
        return [f"spec.inputs.sha256URI: {exc}"]
    except ValueError as exc:
        return [f"spec.inputs.sha256URI {uri}: {exc}"]
    return []


def spec_condition(
    status: KineticBatchStatus, refused: str | None, now: datetime
) -> tuple[KineticBatchStatus, list[Event]]:
    """SpecAccepted=False (and one Warning) while an immutable change is pending."""
    prev = next((c for c in status.conditions if c.type == COND_SPEC), None)
    if refused is None:
        if prev is None or prev.status == "True":
            return status, []
        return with_condition(
            status, COND_SPEC, "True", "Unchanged", "The spec matches the accepted one.", now
        ), []
    message = f"Refused a change to the batch: {refused}. It keeps running as created."
    new = with_condition(status, COND_SPEC, "False", "ImmutableFieldChanged", message, now)
    fresh = prev is None or prev.status != "False" or prev.message != message
    return new, [Event("Warning", "SpecChangeRefused", message)] if fresh else []
