"""The pod entrypoint for function jobs: ``python -m kinetic.runner``.

The operator starts it with environment variables naming what to run and
where the result goes:

==========================  ===============================================
``KINETIC_PAYLOAD_URI``     job payload, or a batch's ``function.pkl`` (required)
``KINETIC_PAYLOAD_SHA256``  its hex sha256, checked before unpickling (required)
``KINETIC_RESULT_URI``      where ``result.pkl`` is written (required)
``KINETIC_OUTPUT_DIR``      passed on to the user's code (optional)
``KINETIC_INPUT_URI``       batch child: a pickled input in storage, with
``KINETIC_INPUT_SHA256``    its hex sha256 (required with the URI)
``KINETIC_INPUT_JSON``      batch child: an inline JSON input instead
``KINETIC_INPUT_MODE``      auto | single | args | kwargs (default auto)
``KINETIC_TERMINATION_LOG`` one-line summary file (default
                            ``/dev/termination-log`` when it exists and is writable)
==========================  ===============================================

Exit codes: :data:`EXIT_OK` (0) success, :data:`EXIT_USER_ERROR` (1) the
function raised, :data:`EXIT_RUNNER_ERROR` (2) the runner failed in one of
its own phases. A failure in the runner's phases is written to the result
URI as a failure payload naming the phase, whenever that URI is reachable.

A result that records success is never overwritten: the runner writes with
a generation precondition and re-checks when it loses a race, so a duplicate
or late pod cannot clobber a SUCCEEDED job's value.

Progress goes to stdout, prefixed ``kinetic runner:``, for ``kubectl logs``.
The user's own stdout and stderr are not captured.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from kinetic import payload, storage
from kinetic.payload import INPUT_MODES, CallPayload, Phase, Result

__all__ = [
    "EXIT_OK",
    "EXIT_USER_ERROR",
    "EXIT_RUNNER_ERROR",
    "RunnerConfig",
    "ConfigError",
    "execute",
    "record_result",
    "run",
    "main",
]

EXIT_OK = 0
"""The function returned and its result is recorded (or a success was already recorded)."""
EXIT_USER_ERROR = 1
"""The user's function raised; the exception and traceback are in the result."""
EXIT_RUNNER_ERROR = 2
"""The runner failed in setup, download, verify, unpickle, pickle-result or upload."""

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
MAX_TERMINATION_MESSAGE = 4096
_RECORD_ATTEMPTS = 5


def log(message: str) -> None:
    """One progress line on stdout, flushed so `kubectl logs -f` shows it at once."""
    print(f"kinetic runner: {message}", flush=True)


# --------------------------------------------------------------------------- configuration


class ConfigError(Exception):
    """The runner's environment variables are missing or contradictory."""


@dataclass(frozen=True)
class RunnerConfig:
    """What the operator told this pod to do, read from its environment."""

    payload_uri: str
    payload_sha256: str
    result_uri: str
    output_dir: str | None = None
    input_uri: str | None = None
    input_sha256: str | None = None
    input_json: str | None = None
    input_mode: str = "auto"
    termination_log: str | None = None

    @property
    def has_input(self) -> bool:
        """Whether this pod is a batch child with one input."""
        return self.input_uri is not None or self.input_json is not None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RunnerConfig:
        """Read and check the env contract; ConfigError lists every problem at once."""

        def get(name: str) -> str | None:
            value = environ.get(name, "").strip()
            return value or None

        problems: list[str] = []
        required = {
            n: get(n)
            for n in ("KINETIC_PAYLOAD_URI", "KINETIC_PAYLOAD_SHA256", "KINETIC_RESULT_URI")
        }
        problems += [f"{n} is not set" for n, v in required.items() if v is None]
        for name in ("KINETIC_PAYLOAD_URI", "KINETIC_RESULT_URI", "KINETIC_INPUT_URI"):
            value = get(name)
            if value is not None:
                try:
                    storage.validate_uri(value)
                except ValueError as e:
                    problems.append(f"{name}: {e}")
        input_uri, input_json = get("KINETIC_INPUT_URI"), environ.get("KINETIC_INPUT_JSON")
        if input_uri is not None and input_json is not None:
            problems.append("set only one of KINETIC_INPUT_URI and KINETIC_INPUT_JSON")
        if input_uri is not None and get("KINETIC_INPUT_SHA256") is None:
            problems.append("KINETIC_INPUT_SHA256 is not set (required with KINETIC_INPUT_URI)")
        mode = get("KINETIC_INPUT_MODE") or "auto"
        if mode not in INPUT_MODES:
            problems.append(
                f"KINETIC_INPUT_MODE must be one of {', '.join(INPUT_MODES)}; got {mode!r}"
            )
        if problems:
            raise ConfigError("; ".join(problems))
        return cls(
            payload_uri=str(required["KINETIC_PAYLOAD_URI"]),
            payload_sha256=str(required["KINETIC_PAYLOAD_SHA256"]),
            result_uri=str(required["KINETIC_RESULT_URI"]),
            output_dir=get("KINETIC_OUTPUT_DIR"),
            input_uri=input_uri,
            input_sha256=get("KINETIC_INPUT_SHA256"),
            input_json=input_json,
            input_mode=mode,
            termination_log=_termination_log_path(environ),
        )


def _termination_log_path(environ: Mapping[str, str]) -> str | None:
    """The explicit path, else the kubelet's file if it exists and is writable.

    The default is never created: on the local process node the pod runs on
    the host, where /dev/termination-log is not ours to make.
    """
    explicit = environ.get("KINETIC_TERMINATION_LOG", "").strip()
    if explicit:
        return explicit
    if os.path.isfile(DEFAULT_TERMINATION_LOG) and os.access(DEFAULT_TERMINATION_LOG, os.W_OK):
        return DEFAULT_TERMINATION_LOG
    return None


# --------------------------------------------------------------------------- phases


class _PhaseFailed(Exception):
    """A runner phase failed; carries what goes into the failure payload."""

    def __init__(self, phase: Phase, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.phase = phase
        self.message = message
        self.cause = cause


def _fail(phase: Phase, message: str, cause: BaseException | None = None) -> NoReturn:
    raise _PhaseFailed(phase, message, cause)


def _download(uri: str, what: str) -> bytes:
    try:
        data = storage.read_bytes(uri)
    except storage.StorageError as e:
        _fail("download", f"cannot download the {what}: {e}", e)
    log(f"downloaded {what} ({len(data)} bytes) from {uri}")
    return data


def _verify(data: bytes, expected: str, what: str) -> None:
    """Refuse bytes whose sha256 differs: they are never unpickled."""
    want = expected.strip().lower().removeprefix("sha256:")
    got = payload.sha256(data)
    if got != want:
        _fail("verify", f"{what} hash mismatch: expected sha256 {want}, got {got}")
    log(f"verified {what} sha256")


def _unpickle(load: Callable[[], Any], what: str) -> Any:
    try:
        return load()
    except payload.PayloadError as e:
        _fail("unpickle", str(e), e)
    except Exception as e:  # a pickle that raises something unusual while loading
        _fail("unpickle", f"cannot unpickle the {what}: {type(e).__name__}: {e}", e)


def _load_input(cfg: RunnerConfig, input_bytes: bytes | None) -> Any:
    if input_bytes is not None:
        return _unpickle(lambda: payload.load_input_payload(input_bytes), "input payload")
    try:
        return json.loads(cfg.input_json or "")
    except ValueError as e:
        _fail("unpickle", f"KINETIC_INPUT_JSON is not valid JSON: {e}", e)


def _apply_env(env: Mapping[str, str], output_dir: str | None) -> None:
    """Captured env first, then the operator's output dir, which always wins."""
    os.environ.update(env)
    if output_dir:
        os.environ["KINETIC_OUTPUT_DIR"] = output_dir
    if env:
        log(f"applied {len(env)} captured env var(s): {', '.join(sorted(env))}")


def _describe_call(call: CallPayload, cfg: RunnerConfig) -> str:
    """``train(2 args, 1 kwarg)``: shapes only, never values (they may be secrets)."""
    name = call.name or payload.function_name(call.fn)
    if cfg.has_input:
        return f"{name}(<batch input, input_mode={cfg.input_mode}>)"
    parts = []
    if call.args:
        parts.append(f"{len(call.args)} arg{'s' if len(call.args) != 1 else ''}")
    if call.kwargs:
        parts.append(f"{len(call.kwargs)} kwarg{'s' if len(call.kwargs) != 1 else ''}")
    return f"{name}({', '.join(parts)})"


def _call(call: CallPayload, cfg: RunnerConfig, item: Any) -> Result:
    """Run the user's function; any exception it raises is the user's failure."""
    log(f"calling {_describe_call(call, cfg)}")
    start = time.monotonic()
    try:
        if cfg.has_input:
            value = payload.call_with_input(call.fn, item, cfg.input_mode)
        else:
            value = call.fn(*call.args, **call.kwargs)
    except BaseException as e:  # SystemExit from user code is a user failure too
        elapsed = time.monotonic() - start
        result = payload.user_failure(e)
        log(f"{call.name or 'function'} raised after {elapsed:.1f}s: {result.summary()}")
        return result
    log(
        f"{call.name or 'function'} returned {type(value).__name__} "
        f"in {time.monotonic() - start:.1f}s"
    )
    return payload.success(value)


def execute(cfg: RunnerConfig) -> Result:
    """Download, verify, unpickle and call; never raises, returns the Result to record.

    Both the payload and the input are verified before either is unpickled,
    so tampered bytes never reach pickle.
    """
    try:
        data = _download(cfg.payload_uri, "payload")
        _verify(data, cfg.payload_sha256, "payload")
        input_bytes: bytes | None = None
        if cfg.input_uri is not None:
            input_bytes = _download(cfg.input_uri, "input payload")
            _verify(input_bytes, cfg.input_sha256 or "", "input payload")
        call = _unpickle(lambda: payload.load_call_payload(data), "payload")
        item = _load_input(cfg, input_bytes) if cfg.has_input else None
        _apply_env(call.env, cfg.output_dir)
        return _call(call, cfg, item)
    except _PhaseFailed as e:
        log(f"failed in phase {e.phase}: {e.message}")
        return payload.runner_failure(e.phase, e.message, e.cause)


# --------------------------------------------------------------------------- recording


def _encode(result: Result) -> tuple[Result, bytes]:
    """Pickle the result; an unpicklable return value becomes a pickle-result failure."""
    try:
        return result, payload.dump_result(result)
    except payload.PayloadError as e:
        log(f"failed in phase pickle-result: {e}")
        failure = payload.runner_failure("pickle-result", str(e))
        return failure, payload.dump_result(failure)


def _existing_succeeded(uri: str) -> bool:
    """Whether ``uri`` holds a result that records success."""
    try:
        existing = payload.load_result(storage.read_bytes(uri))
    except storage.NotFound:
        return False
    except payload.PayloadError:
        return False  # unreadable leftovers are overwritten, not trusted
    return existing.ok


def record_result(result_uri: str, data: bytes) -> bool:
    """Write ``data`` unless a successful result is already there.

    Returns True when written, False when a recorded success was kept.
    Raises StorageError when storage fails. The generation precondition
    means a writer that raced with another re-checks rather than clobbers.
    """
    for _ in range(_RECORD_ATTEMPTS):
        generation = storage.stat(result_uri)
        if generation is not None and _existing_succeeded(result_uri):
            return False
        try:
            storage.write_if_generation(result_uri, data, generation or 0)
            return True
        except storage.PreconditionFailed:
            log("the result changed while writing; re-checking")
    raise storage.StorageError(
        f"gave up writing {result_uri}: it kept changing under {_RECORD_ATTEMPTS} attempts "
        "(are several pods writing the same result?)",
        result_uri,
    )


def _exit_code(result: Result) -> int:
    if result.ok:
        return EXIT_OK
    return EXIT_USER_ERROR if result.phase == "call" else EXIT_RUNNER_ERROR


def _write_termination_log(path: str | None, summary: str) -> None:
    """A one-line summary, at most 4096 bytes, for the pod's termination message."""
    if not path:
        return
    line = " ".join(summary.split())
    encoded = line.encode("utf-8")[:MAX_TERMINATION_MESSAGE]
    try:
        with open(path, "wb") as f:
            f.write(encoded.decode("utf-8", "ignore").encode("utf-8"))
    except OSError as e:
        log(f"could not write the termination log {path}: {e}")


def _already_succeeded(cfg: RunnerConfig) -> bool:
    """Skip the work if a previous pod already recorded success (a duplicate pod)."""
    try:
        return storage.stat(cfg.result_uri) is not None and _existing_succeeded(cfg.result_uri)
    except storage.StorageError as e:
        log(f"could not check for an earlier result ({e}); running anyway")
        return False


def run(cfg: RunnerConfig) -> int:
    """Do the whole job for ``cfg`` and return the exit code."""
    if _already_succeeded(cfg):
        log(f"result already recorded at {cfg.result_uri} by an earlier run; nothing to do")
        _write_termination_log(cfg.termination_log, "ok (result already recorded)")
        return EXIT_OK
    result, data = _encode(execute(cfg))
    try:
        written = record_result(cfg.result_uri, data)
    except storage.StorageError as e:
        message = f"cannot upload the result: {e}"
        log(f"failed in phase upload: {message}")
        _write_termination_log(cfg.termination_log, f"runner failed in phase upload: {message}")
        return EXIT_RUNNER_ERROR
    if not written:
        log(f"result already recorded at {cfg.result_uri} by another run; not overwriting it")
        _write_termination_log(cfg.termination_log, "ok (result already recorded)")
        return EXIT_OK
    log(f"uploaded result ({len(data)} bytes) to {cfg.result_uri}: {result.summary()}")
    _write_termination_log(cfg.termination_log, result.summary())
    return _exit_code(result)


def _setup_failure(message: str, environ: Mapping[str, str]) -> int:
    """Report bad env: to the result URI if one was given, and to the termination log."""
    summary = f"runner failed in phase setup: {message}"
    log(summary)
    result_uri = environ.get("KINETIC_RESULT_URI", "").strip()
    if result_uri:
        try:
            storage.validate_uri(result_uri)
            record_result(result_uri, payload.dump_result(payload.runner_failure("setup", message)))
        except (ValueError, storage.StorageError) as e:
            log(f"could not record the failure at {result_uri}: {e}")
    _write_termination_log(_termination_log_path(environ), summary)
    return EXIT_RUNNER_ERROR


def main(argv: list[str] | None = None) -> int:
    """Entry point; ``argv`` is unused (the contract is the environment)."""
    try:
        cfg = RunnerConfig.from_env(os.environ)
    except ConfigError as e:
        return _setup_failure(str(e), os.environ)
    try:
        return run(cfg)
    except Exception as e:  # a bug in the runner must not look like a user error (exit 1)
        log(f"internal error: {type(e).__name__}: {e}")
        _write_termination_log(cfg.termination_log, f"runner internal error: {e}")
        return EXIT_RUNNER_ERROR


if __name__ == "__main__":
    sys.exit(main())
