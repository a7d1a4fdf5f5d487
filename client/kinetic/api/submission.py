"""Inputs of a batch that never ran: refusing them one by one, and their exceptions.

An input that cannot be submitted (wrong-typed for its `input_mode`, or not
picklable) fails its own slot, never the whole `run_async_map()` call: the
others still run. The batch records it in ``spec.submissionFailures`` with
the exception's type and message, so every process that reads the batch
later sees the same exception type and message the submitting one did. The
submitting process keeps the exception objects themselves.
"""

from __future__ import annotations

import builtins
from typing import Any

from kinetic.model import payload
from kinetic.model import resources as r
from kinetic.model.limits import MAX_MESSAGE_LENGTH

_UNSUBMITTED_NOTE = "input {index} was not submitted, so it never ran"


class SubmissionError(RuntimeError):
    """An input that could not be packaged, so it never ran (an exception of another type
    than a built-in one, which a reader may not be able to import)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"input {index} was not submitted: {message}")
        self.index = index


def wrong_typed_inputs(items: list[Any], input_mode: r.InputMode) -> dict[int, Exception]:
    """The items `input_mode` cannot call the function with, by index (their TypeError)."""
    refused: dict[int, Exception] = {}
    for i, item in enumerate(items):
        try:
            payload.resolve_call(item, input_mode)
        except TypeError as e:
            refused[i] = e
    return refused


def submission_failure(index: int, error: BaseException) -> r.SubmissionFailure:
    """How an input's submission failure is written into the batch spec.

    ``message`` reads on its own (``TypeError: cannot pickle ...``), for
    events and `kubectl describe`; ``errorType`` lets a reader rebuild the
    exception with its type.
    """
    type_name = _type_name(type(error))
    message = f"{type_name}: {error}"
    if len(message) > MAX_MESSAGE_LENGTH:
        message = message[: MAX_MESSAGE_LENGTH - 3] + "..."
    return r.SubmissionFailure(index=index, message=message, error_type=type_name)


def submission_exception(index: int, message: str, error_type: str | None) -> Exception:
    """The exception of an input that failed at submission, as read back from the batch.

    A built-in exception type comes back as itself with the original message
    (a `TypeError` stays a `TypeError`); any other type, which this process
    may not be able to import, is a `SubmissionError` whose message names it.
    Nothing is imported from a name found in a spec.
    """
    cls = getattr(builtins, error_type, None) if error_type else None
    prefix = f"{error_type}: "
    if isinstance(cls, type) and issubclass(cls, Exception) and message.startswith(prefix):
        try:
            error: Exception = cls(message[len(prefix) :])
        except Exception:  # a built-in whose constructor wants more than a message
            error = SubmissionError(index, message)
    else:
        error = SubmissionError(index, message)
    return mark_unsubmitted(error, index)


def mark_unsubmitted(error: Exception, index: int) -> Exception:
    """Note on the exception that input `index` never ran (once; the type is left alone)."""
    note = _UNSUBMITTED_NOTE.format(index=index)
    if isinstance(error, SubmissionError):
        return error  # its message says so already
    if note not in getattr(error, "__notes__", ()):
        error.add_note(note)
    return error


def _type_name(cls: type) -> str:
    """`TypeError` for built-ins, `module.Qualname` for the rest."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"
