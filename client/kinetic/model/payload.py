"""On-storage formats shared by the client and the runner.

Everything here is pure (no storage or network I/O): it turns calls, inputs
and results into bytes and back. Layout of what goes to storage:

* a job payload (``jobs/<id>/payload.pkl``): the function, its args and
  kwargs, and the captured env vars;
* a batch's function payload (``batches/<gid>/function.pkl``): the function
  and captured env, without arguments;
* per-input payloads (``batches/<gid>/inputs/<i>.pkl``): one pickled value;
* a result (``result.pkl``): a :class:`Result`.

Job and function payloads are an *envelope*: a plain pickled dict holding
the format version, the Python version and the cloudpickled body. The
envelope always unpickles, so a runner can explain *why* a body does not
(a Python version mismatch, a module missing from the image) instead of
surfacing a bare pickle error.

This module writes payloads and reads and writes results: both sides need
those. Only the Pod reads payloads back (`kinetic.runtime.unpickle`) and
turns the user's exception into a result (`kinetic.runtime.outcome`).

Functions defined in ``__main__`` or in the user's own modules (anything not
installed under site-packages or the standard library) are pickled by value,
because the pod's image does not have the user's source tree.
"""

from __future__ import annotations

import functools
import hashlib
import io
import keyword
import linecache
import math
import os
import pickle
import platform
import site
import sys
import sysconfig
import threading
import traceback as tb_module
import types
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import cloudpickle

__all__ = [
    "PAYLOAD_FORMAT",
    "Phase",
    "InputMode",
    "INPUT_MODES",
    "PayloadError",
    "RemoteError",
    "RunnerError",
    "CallPayload",
    "Result",
    "sha256",
    "function_name",
    "capture_env",
    "build_job_payload",
    "build_function_payload",
    "build_input_payload",
    "roundtrip_pickle",
    "success",
    "runner_failure",
    "dump_result",
    "load_result",
    "result_outcome",
    "raise_remote",
    "resolve_call",
    "call_with_input",
]

PAYLOAD_FORMAT = 1
"""Bumped when the envelope changes incompatibly; the runner refuses newer ones."""

Phase = Literal[
    "setup",
    "download",
    "verify",
    "install-dependencies",
    "unpack-source",
    "unpickle",
    "data",
    "call",
    "pickle-result",
    "upload",
]
"""Where a job failed. ``call`` is the user's function raising; the rest are the runner's
(``setup``: the runner's environment variables are missing or invalid;
``install-dependencies`` and ``unpack-source``: preparing the user's project,
`kinetic.runtime.podenv`;
``data``: the job's `kinetic.Data` volumes or arguments could not be brought into the pod)."""

InputMode = Literal["auto", "single", "args", "kwargs"]
INPUT_MODES: tuple[str, ...] = get_args(InputMode)

_PHASES: tuple[str, ...] = get_args(Phase)


# --------------------------------------------------------------------------- errors


class PayloadError(Exception):
    """Bytes that are not a usable Kinetic payload or result; the message says why."""


class RemoteError(Exception):
    """Stand-in for a remote exception that could not be pickled or unpickled.

    Keeps the remote type name and message so the user still sees what
    went wrong, e.g. ``RemoteError: psycopg2.OperationalError: timeout``.
    """

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(type_name, message)
        self.type_name = type_name
        self.message = message

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}" if self.message else self.type_name


class RunnerError(RuntimeError):
    """The runner itself failed (download, verify, unpickle, pickle-result, upload).

    A RuntimeError, as the reference says of a job that failed without a result
    of the user's own: `except RuntimeError` catches it with JobFailed.
    """

    def __init__(self, phase: str, message: str) -> None:
        super().__init__(phase, message)
        self.phase = phase
        self.message = message

    def __str__(self) -> str:
        return f"runner failed in phase {self.phase}: {self.message}"


# --------------------------------------------------------------------------- helpers


def sha256(data: bytes) -> str:
    """Hex sha256 of ``data``: how the runner checks it got exactly what was uploaded."""
    return hashlib.sha256(data).hexdigest()


def function_name(fn: Callable[..., Any]) -> str:
    """A readable name for progress lines and resource labels (``train``, ``<lambda>``)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return type(fn).__name__
    return name.rpartition("<locals>.")[2]


def capture_env(names: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Pick env vars to ship with a job: exact names, or prefixes ending in ``*``.

    Names that are not set are skipped rather than sent empty, so the
    remote side keeps whatever default its image has.
    """
    env = os.environ if environ is None else environ
    picked: dict[str, str] = {}
    for pattern in names:
        if pattern.endswith("*"):
            prefix = pattern[:-1]
            picked.update({k: v for k, v in env.items() if k.startswith(prefix)})
        elif pattern in env:
            picked[pattern] = env[pattern]
    return picked


# --------------------------------------------------------------------------- pickle by value

_BY_VALUE_LOCK = threading.RLock()
_NEVER_BY_VALUE = frozenset(
    {"kinetic", "kinetic_operator", "kinetic_dev", "cloudpickle", "__main__"}
)


@functools.lru_cache(maxsize=1)
def _installed_dirs() -> tuple[str, ...]:
    """Directories whose modules the pod's image is expected to have installed.

    Cached: they are fixed for the interpreter's life, and a chunk's runner
    would otherwise recompute them (realpath and sysconfig) for every result.
    """
    dirs: set[str] = set()
    for getter in (site.getsitepackages, lambda: [site.getusersitepackages()]):
        try:
            dirs.update(getter())
        except Exception:  # some embedded interpreters lack these
            pass
    paths = sysconfig.get_paths()
    dirs.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
    return tuple(os.path.realpath(d).rstrip(os.sep) + os.sep for d in dirs if d)


@functools.cache
def _realpath(file: str) -> str:
    """A module file's real path, resolved once per process (every input pickle asks)."""
    return os.path.realpath(file)


def _is_local_module(module: types.ModuleType, installed: tuple[str, ...]) -> bool:
    """Whether ``module`` is the user's own code (not stdlib, not an installed package)."""
    name = getattr(module, "__name__", "")
    top = name.partition(".")[0]
    if not name or top in _NEVER_BY_VALUE or top in sys.stdlib_module_names:
        return False
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py"):
        return False  # builtins, C extensions and namespace packages stay by reference
    path = _realpath(file)
    if f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path:
        return False
    return not path.startswith(installed)


@contextmanager
def _local_modules_by_value() -> Iterator[None]:
    """Register the user's local modules with cloudpickle for the duration of one dump.

    Registration is global in cloudpickle, so it is undone afterwards (leaving
    modules the user registered alone) and serialized with a lock.
    """
    with _BY_VALUE_LOCK:
        installed = _installed_dirs()
        registered: list[types.ModuleType] = []
        try:
            for module in list(sys.modules.values()):
                if module is None or not _is_local_module(module, installed):
                    continue
                try:
                    cloudpickle.register_pickle_by_value(module)
                except (ValueError, TypeError):
                    continue
                registered.append(module)
            yield
        finally:
            for module in registered:
                try:
                    cloudpickle.unregister_pickle_by_value(module)
                except ValueError:
                    pass


_MAX_SOURCE_BYTES = 1_000_000


def _code_reduce_keeping_filename(code: types.CodeType) -> Any:
    """cloudpickle's code reducer, minus its renaming of every file to "<dynamic-code>".

    Keeping the real filename (plus the shipped source, see ``_install_sources``)
    is what makes a remote traceback show the user's own lines.
    """
    ctor, args = cloudpickle.cloudpickle._code_reduce(code)
    return ctor, tuple(code.co_filename if a == "<dynamic-code>" else a for a in args)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, recording the source files of the code it pickles by value."""

    if hasattr(cloudpickle.cloudpickle, "_code_reduce"):  # private API: degrade gracefully
        dispatch_table = ChainMap(
            {types.CodeType: _code_reduce_keeping_filename}, cloudpickle.Pickler.dispatch_table
        )

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.filenames: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.CodeType):
            self.filenames.add(obj.co_filename)
        return super().reducer_override(obj)


def _dumps_with_sources(obj: Any, what: str) -> tuple[bytes, dict[str, str]]:
    """cloudpickle ``obj`` with local modules by value; return the bytes and the
    source text of every file whose code went by value. Raises PayloadError."""
    with _local_modules_by_value(), io.BytesIO() as buf:
        pickler = _Pickler(buf)
        try:
            pickler.dump(obj)
        except Exception as e:
            raise PayloadError(f"could not pickle {what}: {type(e).__name__}: {e}") from e
        data = buf.getvalue()
    sources: dict[str, str] = {}
    for filename in sorted(pickler.filenames):
        text = "".join(linecache.getlines(filename))  # also knows notebook cells
        if text and len(text) <= _MAX_SOURCE_BYTES:
            sources[filename] = text
    return data, sources


def _dumps(obj: Any, what: str) -> bytes:
    return _dumps_with_sources(obj, what)[0]


# --------------------------------------------------------------------------- call payloads


@dataclass
class CallPayload:
    """What the runner calls: ``fn(*args, **kwargs)`` with ``env`` applied first."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    name: str = ""
    python_version: str = ""


def build_job_payload(
    fn: Callable[..., Any],
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    project: Mapping[str, Any] | None = None,
) -> bytes:
    """Bytes for ``jobs/<id>/payload.pkl``: one call of ``fn``. Raises PayloadError.

    ``project`` is `kinetic.api.project.ship`'s entry: what the runner prepares
    (requirements, source) before it unpickles the body.
    """
    return _envelope("job", fn, tuple(args), dict(kwargs or {}), env, project)


def build_function_payload(
    fn: Callable[..., Any],
    env: Mapping[str, str] | None = None,
    project: Mapping[str, Any] | None = None,
) -> bytes:
    """Bytes for ``batches/<gid>/function.pkl``: ``fn`` and env, inputs come separately."""
    return _envelope("function", fn, (), {}, env, project)


_JSON_EXACT = (int, str, bool, type(None), float)
INLINE_INPUTS_BUDGET = 256 * 1024  # bytes of JSON: the batch object stays far below etcd's limit


def inline_inputs(values: list[Any], budget: int = INLINE_INPUTS_BUDGET) -> list[Any] | None:
    """``values`` as inline JSON items, when JSON carries every one exactly; else None.

    Plain scalars only (int, finite float, str, bool, None, exactly those
    types: not a subclass such as an IntEnum or a numpy scalar, which JSON
    would turn into something else), and ``budget`` bytes of JSON in all. A
    batch of such inputs needs no upload per input before it starts and no
    download per input in its Pods: the value travels in the Pod's
    environment. Anything else is pickled as before.
    """
    size = 0
    for value in values:
        if type(value) not in _JSON_EXACT:
            return None
        if type(value) is float and not math.isfinite(value):
            return None
        if type(value) is str:
            try:
                size += len(value.encode("utf-8")) + 3
            except UnicodeEncodeError:  # a lone surrogate: JSON text cannot carry it
                return None
        else:
            size += 24
        if size > budget:
            return None
    return list(values)


def build_input_payload(value: Any) -> bytes:
    """Bytes for ``batches/<gid>/inputs/<i>.pkl``: one input value. Raises PayloadError."""
    return _dumps(value, f"input value of type {type(value).__name__}")


def _envelope(
    kind: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    env: Mapping[str, str] | None,
    project: Mapping[str, Any] | None = None,
) -> bytes:
    if not callable(fn):
        raise TypeError(f"expected a callable, got {type(fn).__name__}")
    env_dict = {str(k): str(v) for k, v in (env or {}).items()}
    name = function_name(fn)
    body, sources = _dumps_with_sources(
        {"fn": fn, "args": args, "kwargs": kwargs}, f"function {name!r} and its arguments"
    )
    envelope = {
        "kinetic_payload": PAYLOAD_FORMAT,
        "kind": kind,
        "name": name,
        "env": env_dict,
        "python": platform.python_version(),
        "cloudpickle": cloudpickle.__version__,
        "body": body,
        "sources": sources,
    }
    if project:
        envelope["project"] = dict(project)  # absent when empty: older runners never see it
    return pickle.dumps(envelope, protocol=pickle.HIGHEST_PROTOCOL)


# --------------------------------------------------------------------------- results


@dataclass
class Result:
    """What a job produced: a value, or the exception and where things failed.

    ``phase`` is None on success, ``"call"`` when the user's function raised,
    and another phase when the runner itself failed. ``exception`` always
    unpickles: a remote exception whose class the client cannot load turns
    into a :class:`RemoteError` carrying its type name and message.
    """

    ok: bool
    value: Any = None
    exception: BaseException | None = None
    exception_type: str = ""
    traceback: str = ""
    phase: Phase | None = None
    message: str = ""

    @property
    def is_runner_failure(self) -> bool:
        """True when the runner failed, as opposed to the user's function raising."""
        return not self.ok and self.phase != "call"

    def summary(self) -> str:
        """One line for the termination log and status: "ok", "ValueError: bad lr", ..."""
        if self.ok:
            return "ok"
        if self.phase == "call":
            return self.message or self.exception_type
        return f"runner failed in phase {self.phase}: {self.message}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        exc = state.pop("exception")
        state["exception_pickle"] = None if exc is None else roundtrip_pickle(exc)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        blob = state.pop("exception_pickle", None)
        exc: BaseException | None = None
        if blob is not None:
            try:
                exc = pickle.loads(blob)
            except Exception:
                exc = None
        if exc is None and not state.get("ok", True) and state.get("phase") == "call":
            exc = RemoteError(state.get("exception_type", "Exception"), _exc_message(state))
        state["exception"] = exc
        self.__dict__.update(state)


def _exc_message(state: Mapping[str, Any]) -> str:
    """The exception's own message from "Type: message"."""
    msg = str(state.get("message", ""))
    prefix = f"{state.get('exception_type', '')}: "
    return msg[len(prefix) :] if msg.startswith(prefix) else msg


def roundtrip_pickle(exc: BaseException) -> bytes | None:
    """Pickle ``exc`` if it survives a round trip here; None means "use the stand-in".

    Exceptions with custom ``__init__`` signatures often pickle fine and then
    fail to unpickle, so the check has to load them back. `Result` pickles its
    exception this way, and the runner's `kinetic.runtime.outcome.user_failure`
    asks it whether to keep the exception or its stand-in.
    """
    try:
        with _local_modules_by_value():
            blob = cloudpickle.dumps(exc)
        pickle.loads(blob)
        return blob
    except Exception:
        return None


def success(value: Any) -> Result:
    """The result of a call that returned ``value``."""
    return Result(ok=True, value=value)


def runner_failure(phase: Phase, message: str, exc: BaseException | None = None) -> Result:
    """The result of the runner failing in ``phase``; ``exc`` adds its traceback."""
    if phase not in _PHASES or phase == "call":
        allowed = ", ".join(p for p in _PHASES if p != "call")
        raise ValueError(f"runner phase must be one of {allowed}; got {phase!r}")
    return Result(
        ok=False,
        exception_type="RunnerError",
        traceback="" if exc is None else "".join(tb_module.format_exception(exc)),
        phase=phase,
        message=message,
    )


RESULT_HEADER = b"KINETIC-RESULT 1 "
"""Every result.pkl starts with this, then ``ok`` or ``failed``, a newline, then the pickle.

The outcome is readable without unpickling, so a runner can tell a recorded
success from a failure (or from anything else) without trusting the bytes.
"""


def dump_result(result: Result) -> bytes:
    """Pickle a result; PayloadError names the type when the return value can't be pickled."""
    header = RESULT_HEADER + (b"ok\n" if result.ok else b"failed\n")
    try:
        with _local_modules_by_value():
            return header + cloudpickle.dumps(result)
    except Exception as e:
        if result.ok:
            raise PayloadError(
                f"the return value could not be pickled: {_qualified_type_of(result.value)} "
                f"({type(e).__name__}: {e})"
            ) from e
        raise PayloadError(f"could not pickle the failure result: {type(e).__name__}: {e}") from e


def _qualified_type_of(value: Any) -> str:
    cls = type(value)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def result_outcome(data: bytes) -> bool | None:
    """True for a recorded success, False for a failure, None for anything else; never unpickles."""
    if not data.startswith(RESULT_HEADER):
        return None
    word = data[len(RESULT_HEADER) : data.find(b"\n", len(RESULT_HEADER))]
    return {b"ok": True, b"failed": False}.get(word)


def load_result(data: bytes) -> Result:
    """Unpickle ``result.pkl``; PayloadError explains values the client can't load.

    Callers verify the bytes against the sha256 the runner reported first.
    """
    if result_outcome(data) is None:
        raise PayloadError("not a Kinetic result (no result header)")
    try:
        result = pickle.loads(data[data.index(b"\n") + 1 :])
    except Exception as e:
        hint = ""
        if isinstance(e, ModuleNotFoundError):
            hint = f" — the return value needs module {e.name!r}; install it where you read results"
        raise PayloadError(f"cannot unpickle the result: {type(e).__name__}: {e}{hint}") from e
    if not isinstance(result, Result):
        raise PayloadError(f"not a Kinetic result (got {type(result).__name__})")
    return result


def raise_remote(result: Result) -> Any:
    """Return the value of a successful result, else raise the remote failure.

    The remote traceback is attached as a note starting "Remote traceback:",
    so it prints under the local traceback. Runner failures raise RunnerError.
    """
    if result.ok:
        return result.value
    exc: BaseException
    if result.phase == "call":
        exc = result.exception or RemoteError(result.exception_type or "Exception", result.message)
    else:
        exc = RunnerError(str(result.phase), result.message)
    raise attach_remote_traceback(exc, result.traceback)


def attach_remote_traceback(
    exception: BaseException, remote_traceback: str | None
) -> BaseException:
    """``exception`` with the remote traceback added as a note ("Remote traceback:", once),
    so it prints under the local one; as it was when there is no traceback.

    The reference's helper (``kinetic.jobs.attach_remote_traceback``), used by
    `raise_remote` for every remote failure.
    """
    if not remote_traceback:
        return exception
    note = "Remote traceback:\n" + remote_traceback.rstrip("\n")
    if note not in getattr(exception, "__notes__", ()):
        exception.add_note(note)
    return exception


# --------------------------------------------------------------------------- input modes


def _is_kwargs_dict(item: Any) -> bool:
    """Auto mode's test: a dict whose keys could all be keyword arguments."""
    return isinstance(item, dict) and all(
        isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k) for k in item
    )


def resolve_call(item: Any, mode: str = "auto") -> tuple[tuple[Any, ...], dict[str, Any]]:
    """How one batch input becomes ``(args, kwargs)`` under ``input_mode``.

    auto: a dict whose keys are all identifiers (and not keywords) is
    unpacked as kwargs, a list or tuple as positional args, anything else
    is passed whole; single: always passed whole; args: list/tuple required;
    kwargs: dict with str keys required. Note that ``{}`` in auto mode
    unpacks to no arguments.
    """
    if mode == "single":
        return (item,), {}
    if mode == "auto":
        if _is_kwargs_dict(item):
            return (), dict(item)
        if isinstance(item, (list, tuple)):
            return tuple(item), {}
        return (item,), {}
    if mode == "args":
        if not isinstance(item, (list, tuple)):
            raise TypeError(f"input_mode='args' needs a list or tuple, got {type(item).__name__}")
        return tuple(item), {}
    if mode == "kwargs":
        if not isinstance(item, dict):
            raise TypeError(f"input_mode='kwargs' needs a dict, got {type(item).__name__}")
        bad = [k for k in item if not isinstance(k, str)]
        if bad:
            raise TypeError(
                f"input_mode='kwargs' needs a dict with str keys, got key {bad[0]!r} "
                f"({type(bad[0]).__name__})"
            )
        return (), dict(item)
    raise ValueError(f"input_mode must be one of {', '.join(INPUT_MODES)}; got {mode!r}")


def call_with_input(fn: Callable[..., Any], item: Any, mode: str = "auto") -> Any:
    """Call ``fn`` with one batch input according to ``mode`` (see :func:`resolve_call`)."""
    args, kwargs = resolve_call(item, mode)
    return fn(*args, **kwargs)
