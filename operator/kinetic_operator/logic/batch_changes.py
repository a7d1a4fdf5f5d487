"""Which changes an accepted KineticBatch spec may take: the mutable fields; the rest is refused.

Pure: compares two specs.
"""

from __future__ import annotations

from typing import Any

from kinetic.model.resources import (
    KineticBatchSpec,
)

# --------------------------------------------------------------------------- immutability

MUTABLE_FIELDS = frozenset({"max_concurrent", "cancel", "cancel_indexes"})


def immutable_change(old: KineticBatchSpec, new: KineticBatchSpec) -> str | None:
    """A message for users when ``new`` changes anything but maxConcurrent, cancel or
    cancelIndexes.

    A batch's Pods are a function of its template and inputs; changing
    them midway would leave Pods built from two different specs under
    one group id. The message names every changed field, e.g. "spec.template
    cannot change on an existing batch (only spec.maxConcurrent and
    spec.cancel can): create a new batch instead".
    """
    changed = changed_fields(old, new)
    if not changed:
        return None
    return (
        f"{', '.join(changed)} cannot change on an existing batch (only spec.maxConcurrent, "
        "spec.cancel and spec.cancelIndexes can): create a new batch instead"
    )


def changed_fields(old: KineticBatchSpec, new: KineticBatchSpec) -> list[str]:
    """The fields (``spec.template``, ...) in which ``new`` differs from ``old``, the ones that
    may change on a running batch (maxConcurrent, cancel, cancelIndexes) left aside."""
    return [
        f"spec.{info.alias or name}"
        for name, info in KineticBatchSpec.model_fields.items()
        if name not in MUTABLE_FIELDS
        and _wire_value(getattr(old, name)) != _wire_value(getattr(new, name))
    ]


def merge_mutable(accepted: KineticBatchSpec, new: KineticBatchSpec) -> KineticBatchSpec:
    """``accepted`` with the mutable fields (maxConcurrent, cancel) taken from ``new``.

    What the operator acts on when someone changed an immutable field
    anyway: the change is refused (see `immutable_change`) but a cancel or a
    new limit in the same edit still takes effect.
    """
    return accepted.model_copy(update={f: getattr(new, f) for f in MUTABLE_FIELDS})


def _wire_value(value: Any) -> Any:
    if hasattr(value, "wire"):
        return value.wire()
    if isinstance(value, list):
        return [_wire_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _wire_value(v) for k, v in value.items()}
    return value
