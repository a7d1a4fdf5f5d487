"""How the pod turns the user's exception into a `Result` the client can re-raise.

Only the runner does this, in the except block around the user's call; the
client reads the result with `kinetic.model.payload.load_result` and
`raise_remote`. So the decisions made here — the exception's qualified type
name, a stand-in `RemoteError` when it would not survive pickling, and a
traceback that starts in the user's own code rather than in Kinetic's
plumbing — live in the runtime, while `Result` itself (the format both sides
read) and its plain constructors `success` and `runner_failure` stay in the
model.
"""

from __future__ import annotations

import os
import traceback as tb_module
import types

from kinetic.model.payload import RemoteError, Result, roundtrip_pickle

__all__ = ["user_failure"]

_KINETIC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # kinetic/


def user_failure(exc: BaseException) -> Result:
    """The result of a call whose function raised ``exc`` (call from the except block)."""
    type_name = _qualified_type(exc)
    text = str(exc)
    message = f"{type_name}: {text}" if text else type_name
    exception: BaseException = exc
    if roundtrip_pickle(exc) is None:
        exception = RemoteError(type_name, text)
    return Result(
        ok=False,
        exception=exception,
        exception_type=type_name,
        traceback=_format_traceback(exc),
        phase="call",
        message=message,
    )


def _qualified_type(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    return (
        cls.__qualname__ if module in ("builtins", "__main__") else f"{module}.{cls.__qualname__}"
    )


def _format_traceback(exc: BaseException) -> str:
    """The exception's traceback, starting at the user's code rather than Kinetic's."""
    start = exc.__traceback__
    tb = start
    while tb is not None and tb.tb_next is not None:
        if _is_kinetic_frame(tb) and not _is_kinetic_frame(tb.tb_next):
            start = tb.tb_next  # the first user frame after kinetic's call into it
            break
        tb = tb.tb_next
    return "".join(tb_module.format_exception(type(exc), exc, start))


def _is_kinetic_frame(tb: types.TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_KINETIC_DIR)
