"""A batch's accepted spec: stored next to its manifest, vouched for by its status.

The operator stores the spec it accepts for a batch (``accepted-spec.json``,
`kinetic.model.layout`) so that, after a restart, it still acts on that spec: an
edit of an immutable field made while the webhook was down stays refused,
and a rerun keeps the inputs it resolved from its source. Storage is
writable by every Pod and bucket writer, so the stored bytes count only
when they hash to ``status.acceptedSpecSHA256``, which the operator writes
with the first status write (before any Pod exists) and only the operator
can write. What passes that check is judged again, as the object's own spec
is, before it is used: its bounds, its storage URIs against the namespace's
prefix, its cross-field rules, and for a batch that is not a rerun, that it
adds nothing the policy refuses to what the object itself shows.

Cases, by what the status says (`read_accepted`):

* a digest: the stored spec must match it; anything else (gone, too large,
  changed, another object's) fails the batch with ``InvalidSpec`` and a
  message saying what changed;
* no digest and no phase: nothing was accepted yet (or the operator died
  before its first status write, when no Pod existed yet): whatever is
  stored is ignored and the object's spec is accepted afresh;
* no digest but a phase: a batch accepted by an operator from before
  digests. Its stored spec is taken only if it agrees with the object on
  every field that cannot change (a rerun's resolved inputs cannot be
  compared, and are taken as stored: the one case left to trust on first
  use), and its digest is recorded from then on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kinetic import storage
from kinetic.model import digest, layout, limits
from kinetic.model.fanout import foreign_batch_uris, validate_batch_spec
from kinetic.model.resources import KineticBatchSpec
from pydantic import ValidationError

from kinetic_operator.bounded_read import TooLarge, read_at_most
from kinetic_operator.logic.batch_logic import changed_fields
from kinetic_operator.logic.policy import Policy, UnreadPolicy, policy_violations
from kinetic_operator.settings import OperatorSettings

__all__ = ["Stored", "accepted_bytes", "judge_stored", "read_accepted"]


@dataclass(frozen=True)
class Stored:
    """The accepted spec as stored, and the SHA-256 of its bytes."""

    spec: KineticBatchSpec
    sha256: str


def accepted_bytes(uid: str, spec: KineticBatchSpec) -> bytes:
    """What is stored: the object's UID (a copy under another UID is not its own) and spec."""
    doc = {"uid": uid, "spec": spec.wire()}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def read_accepted(
    home: layout.Home, expected: str | None, accepted_before: bool, live: KineticBatchSpec | None
) -> tuple[Stored | None, str | None]:
    """The stored accepted spec if the status vouches for it, and why not when it must and
    does not (see the module docstring for the cases). ``live`` is the object's own spec."""
    if expected is None and not accepted_before:
        return None, None
    uri = home.accepted_spec_uri
    try:
        data = read_at_most(uri, limits.MAX_SPEC_BYTES)
    except storage.NotFound:
        if expected is None:
            return None, None
        return None, f"the accepted spec {uri} that status.acceptedSpecSHA256 vouches for is gone"
    except TooLarge as exc:
        return None, f"the accepted spec is not used: {exc}"
    actual = digest.sha256(data)
    stored = _parse(data, home.uid)
    if expected is not None and actual != expected:
        what = _what_changed(stored, live)
        return None, (
            f"the accepted spec {uri} was changed in storage after the batch was accepted: it "
            f"hashes to {actual}, status.acceptedSpecSHA256 says {expected}{what}; the batch "
            "is stopped rather than run from it: create a new batch"
        )
    if stored is None:
        return None, f"the accepted spec {uri} is not this batch's (uid {home.uid}) or unreadable"
    if expected is None and live is not None and not _is_rerun(live):
        change = changed_fields(stored, live)
        if change:
            return None, (
                f"the accepted spec {uri} (stored before digests were recorded) differs from "
                f"the batch's own spec in {', '.join(change)}, which cannot change: it is not "
                "used: create a new batch"
            )
    return Stored(stored, actual), None


def judge_stored(
    stored: KineticBatchSpec,
    live: KineticBatchSpec,
    home: layout.Home,
    settings: OperatorSettings,
    policy: Policy | None,
) -> list[str]:
    """Why the stored spec may not be used, judged as the object's own spec is (empty: fine)."""
    root, namespace = home.root, home.namespace
    plain = stored
    if stored.inputs is not None and stored.inputs.from_batch is not None:
        plain = stored.model_copy(
            update={"inputs": stored.inputs.model_copy(update={"from_batch": None})}
        )
    problems = limits.check_batch_spec(
        stored.wire(), storage_root=root, max_inputs=settings.max_inputs
    )
    problems += foreign_batch_uris(root, namespace, stored) + validate_batch_spec(plain)
    # A policy not read yet judges nothing here: this batch was accepted under a known one
    # (its stored spec is vouched for by the status), and only a first acceptance waits.
    if policy is not None and not isinstance(policy, UnreadPolicy) and not _is_rerun(live):

        def judged(spec: KineticBatchSpec) -> set[str]:
            return set(
                policy_violations(
                    "KineticBatch",
                    namespace,
                    spec.wire(),
                    policy,
                    settings.accelerator_catalog,
                    settings.default_image,
                )
            )

        problems += sorted(judged(stored) - judged(live))
    return [f"the accepted spec {home.accepted_spec_uri}: {p}" for p in problems]


def _is_rerun(spec: KineticBatchSpec) -> bool:
    return spec.inputs is not None and spec.inputs.from_batch is not None


def _parse(data: bytes, uid: str) -> KineticBatchSpec | None:
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("uid") != uid:
            return None
        return KineticBatchSpec.model_validate(doc.get("spec") or {})
    except (ValueError, ValidationError):
        return None


def _what_changed(stored: KineticBatchSpec | None, live: KineticBatchSpec | None) -> str:
    if stored is None or live is None or _is_rerun(live):
        return ""
    changed = changed_fields(live, stored)
    return f" (it differs from the batch's own spec in {', '.join(changed)})" if changed else ""
