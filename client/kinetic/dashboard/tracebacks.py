"""A failed call's type, message and remote traceback, read without running anything.

A failure's ``result.pkl`` (`kinetic.model.payload.Result`) holds the remote
traceback as text, inside a pickle. Unpickling it as the client does would run
whatever the pickle names: code from whoever ran the job. The dashboard shows a
failure on its own, so it reads the pickle through an unpickler that resolves
no global at all: every class the stream names becomes an inert record of its
arguments and state, and only the plain values (text, numbers, bytes) come out.
The exception object itself (a nested pickle) stays bytes, never loaded.

The bytes are checked against the digest the API server vouches for before
they get here (`kinetic.dashboard.reads`), as the client checks them.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any

from kinetic.model import payload

MAX_FAILURE_BYTES = 4 << 20  # a failure is its text and an exception: more is not one of ours
_FIELDS = ("exception_type", "message", "traceback", "phase")


@dataclass(frozen=True)
class Failure:
    """What a failed call left, as text: the exception's type, its message, the traceback,
    and the runner's phase ("call": the user's function raised)."""

    exception_type: str
    message: str
    traceback: str
    phase: str


class _Inert:
    """Whatever class the pickle names: its arguments and state, kept, never acted on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:  # dict subclasses: kept aside
        pass

    def append(self, value: Any) -> None:  # list subclasses
        pass

    def extend(self, values: Any) -> None:
        pass


def _inert_class(module: str, name: str) -> type:
    return type(f"Inert_{name}", (_Inert,), {"module": module})


class _NamesNothing(pickle.Unpickler):
    """An unpickler for which every global is an inert record (and no persistent ids)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "copyreg" and name == "__newobj__":
            return _newobj
        if module == "copyreg" and name == "_reconstructor":
            return _reconstruct
        return _inert_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not part of a Kinetic result")


def _newobj(cls: type, *args: Any) -> Any:
    return cls(*args) if isinstance(cls, type) and issubclass(cls, _Inert) else _Inert()


def _reconstruct(cls: Any, base: Any, state: Any) -> Any:
    return _Inert()


def read_failure(data: bytes) -> Failure | None:
    """The failure a ``result.pkl`` records, or None when it records a success or is not a
    Kinetic result (too large, no header, or not shaped like one)."""
    if len(data) > MAX_FAILURE_BYTES or payload.result_outcome(data) is not False:
        return None
    body = data[data.index(b"\n") + 1 :]
    try:
        loaded = _NamesNothing(io.BytesIO(body)).load()
    except Exception:  # anything malformed is simply not a failure we can show
        return None
    state = loaded.state if isinstance(loaded, _Inert) else None
    if isinstance(state, tuple) and state and isinstance(state[0], dict):
        state = state[0]  # (dict state, slots state)
    if not isinstance(state, dict):
        return None
    text = {key: state.get(key) for key in _FIELDS}
    return Failure(*(value if isinstance(value, str) else "" for value in text.values()))
