"""Why `BatchHandle.results()` returns no value for inputs that did not fail.

An input can succeed and still have no value to give: its stored result was
deleted after an earlier read (`results()` and `result()` clean up by
default), or the batch was deleted, so nothing in the API server vouches for
what storage holds (`kinetic.model.digest.Unverifiable`), or the batch was
deleted before the input ended. None of these is a failure of the input, so
a `BatchError` saying "0 of 4 jobs failed" would hide the reason. When no
input failed, `results()` raises the reason itself, for the whole batch
(`unread_error`); when some did, the `BatchError` names it too (`unread_note`).

Pure: the caller collected each input's exception.
"""

from __future__ import annotations

from collections.abc import Mapping

from kinetic.api.handle import ResultDeleted
from kinetic.model.digest import ResultMismatch, Unverifiable
from kinetic.model.ranges import IndexSet

__all__ = ["unread_error", "unread_note"]


def _rank(error: Exception) -> int:
    """How much a reason matters to the reader, most first: a forgery, nothing to vouch for
    the bytes, bytes gone, anything else."""
    if isinstance(error, Unverifiable):
        return 1
    if isinstance(error, ResultMismatch):
        return 0
    if isinstance(error, ResultDeleted):
        return 2
    return 3


def _inputs(indexes: IndexSet, total: int) -> str:
    noun = "input" if len(indexes) == 1 else "inputs"
    return f"{noun} {indexes} ({len(indexes)} of {total})"


def unread_error(
    group_id: str, total: int, unread: Mapping[int, Exception], where: str
) -> Exception:
    """The exception `results()` raises when no input failed but ``unread`` (index ->
    exception, not empty) have no value: the weightiest reason, said for the whole batch.

    ``where`` is the batch's storage prefix, named by an `Unverifiable`. Inputs
    left unread for another reason are counted in a note.
    """
    worst = min(_rank(e) for e in unread.values())
    first_index = min(i for i, e in unread.items() if _rank(e) == worst)
    first = unread[first_index]
    kind = type(first)
    indexes = IndexSet(i for i, e in unread.items() if type(e) is kind)
    which = _inputs(indexes, total)
    error: Exception
    if isinstance(first, Unverifiable):
        error = Unverifiable(where, first.why, what=f"results of {which} of batch {group_id}")
    elif isinstance(first, ResultDeleted):
        error = ResultDeleted(
            f"Batch {group_id}: {which} succeeded, but their results are no longer in "
            "storage: results() and result() delete each result they read unless "
            "cleanup=False, so an earlier read (or a cleanup) removed them. Statuses, attempts "
            f"and logs are still readable (kinetic batches status {group_id}). Pass "
            "cleanup=False to keep results for another read; to compute them again, rerun "
            f"the batch (kinetic batches rerun {group_id} --all)"
        )
    else:
        error = first
    rest = len(unread) - len(indexes)
    if rest:
        error.add_note(
            f"{rest} more input(s) of batch {group_id} have no value for another reason; "
            "results(return_exceptions=True) gives each input's value or exception"
        )
    return error


def unread_note(unread: Mapping[int, Exception]) -> str:
    """What a `BatchError` adds about inputs that did not fail but have no value ('' for none)."""
    if not unread:
        return ""
    worst = min(unread, key=lambda i: (_rank(unread[i]), i))
    first = unread[worst]
    return (
        f"; {len(unread)} more have no value to return (input {worst}: "
        f"{type(first).__name__}: {first})"
    )
