"""The pod entrypoint for function jobs: ``python -m kinetic.runtime.runner``.

The operator starts it with environment variables naming what to run and
where the result goes. One input (a KineticJob, or one input of a batch):

==========================  ===============================================
``KINETIC_PAYLOAD_URI``     job payload, or a batch's ``function.pkl`` (required)
``KINETIC_PAYLOAD_SHA256``  its hex sha256, checked before unpickling (required)
``KINETIC_RESULT_URI``      where ``result.pkl`` is written (required)
``KINETIC_OUTPUT_DIR``      passed on to the user's code (optional)
``KINETIC_INPUT_URI``       batch input: a pickled input in storage, with
``KINETIC_INPUT_SHA256``    its hex sha256 (required with the URI)
``KINETIC_INPUT_JSON``      batch input: an inline JSON input instead
``KINETIC_INPUT_MODE``      auto | single | args | kwargs (default auto)
``KINETIC_INDEX``           the batch input's index (accepted, not needed)
``KINETIC_REPORT_URI``      a chunk: where its per-input result hashes go
``KINETIC_VOLUMES``         the job's ``spec.volumes`` as JSON: each is downloaded
                            into its mount path before the first call
                            (`kinetic.runtime.datafetch`, phase ``data``)
``KINETIC_DATA_DIR``        where `kinetic.Data` arguments are downloaded (default:
                            a fresh temporary folder)
``KINETIC_TERMINATION_LOG`` one-line summary file (default
                            ``/dev/termination-log`` when it exists and is writable)
``KINETIC_DEPS_CACHE``      where installed requirements and the project's
                            source are kept (`kinetic.runtime.podenv`; optional)
==========================  ===============================================

A payload that names the user's project (`kinetic.api.project`) has its
requirements installed and its source unpacked before the function is
unpickled; a failure there ends the job in phase ``install-dependencies``
(pip's last lines in the message) or ``unpack-source``.

A *chunk* (several consecutive inputs of a batch in one Pod, for functions
too short to pay for a Pod each) sets ``KINETIC_CHUNK`` instead of
``KINETIC_RESULT_URI`` and ``KINETIC_INPUT_*``: a JSON list, in index order,
of ``{"index": i, "resultURI": ..., "outputDir": ... (optional), "inputURI":
..., "inputSHA256": ...}`` or ``{"index": i, "resultURI": ..., "inputJSON":
<value>}``, each with ``"resultSHA256"`` when an earlier attempt of the
chunk recorded that input's result and the operator checked its hash. The
function payload is downloaded, verified and unpickled once; each input is
then run in order and recorded at its own resultURI exactly as
a single input would be. Its log lines are prefixed ``input <i>:``, and its
part of the Pod's log (the user's own output included) starts with the line
``kinetic runner: input <i>: begin``; the last line is ``kinetic runner:
chunk done: <termination message>``.

Exit codes, one input: :data:`EXIT_OK` (0) success, :data:`EXIT_USER_ERROR`
(1) the function raised, :data:`EXIT_RUNNER_ERROR` (2) the runner failed in
one of its own phases. A failure in the runner's phases is written to the
result URI as a failure payload naming the phase, whenever that URI is
reachable. The termination message is one line: ``ok``, the exception, or
``runner failed in phase <phase>: ...``, followed by `` sha256=<hex>`` (the
SHA-256 of the result bytes stored at the result URI) whenever a result is
recorded there; the operator puts that hash in status and the client
checks it before unpickling (`kinetic.model.digest`).

Exit codes, a chunk: 0 when every input succeeded, else 1; the termination
message is one line of JSON, ``{"succeeded": "0-3,5", "failed": "4", "report":
"<hex>"}`` (input indexes in `kinetic.model.ranges` notation), and each input's
result says why it failed. The hashes of the inputs' results are written as
``{"<index>": "<hex>"}`` to ``KINETIC_REPORT_URI`` (when set), and
``report`` is that document's own SHA-256. Exit 2 with a plain-text message
(``runner failed in phase setup: ...`` or ``runner internal error: ...``)
means the runner could not run the chunk at all; setup failures are still
recorded at every resultURI it could read.

The runner reports the SHA-256 only of bytes it wrote itself, or of a
result the operator vouches for (a chunk entry's ``resultSHA256``, from a
checked report of an earlier attempt): storage is writable by any Pod or
bucket writer, and whatever hash the runner reports is what clients check
results against. So:

* a success at the result URI that the operator vouches for is kept, and
  the input is not run again;
* any other success found there when the input starts (an earlier attempt
  that was cut short, or bytes someone planted) is not believed: the input
  runs, and its result replaces those bytes (written on the generation
  seen, so nothing that came later is overwritten unseen);
* a success that appears *while* the input runs (a duplicate or late Pod)
  is never overwritten: it is kept, and the input reports no hash, so its
  result cannot be checked rather than trusted unchecked.

Whether stored bytes record a success is read from their header
(`payload.result_outcome`): the runner never unpickles a result it did not
write in this process.

Startup is kept lean because every Pod pays it before the user's code runs:
the module imports only the standard library, cloudpickle, kinetic's
storage/payload/ranges modules and the runtime's own small ones
(runner_config, termination, unpickle, outcome); gs:// goes through `kinetic.storage.gcs_http`
(the standard library's HTTP client) wherever its credentials allow, not
through google-cloud-storage; and one input costs four storage round trips (check
for an earlier result, payload, input, conditional write of the result) on
one kept-alive connection.

Progress goes to stdout, prefixed ``kinetic runner:``, for ``kubectl logs``.
The work runs in a child process that the Pod's first process supervises
(`kinetic.runtime.supervise`): the user's own stdout and stderr pass
through it to the container's log, and it archives the end of the log to
``KINETIC_LOG_URI`` (at most ``KINETIC_LOG_LIMIT`` bytes) when the child is
done, so the end survives the kubelet's log rotation.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from kinetic import storage
from kinetic.model import digest, payload
from kinetic.model.logs import LOG_ARCHIVE_BYTES
from kinetic.model.names import (
    ENV_INDEX,
    ENV_JOB_NAME,
    ENV_LOG_LIMIT,
    ENV_LOG_URI,
    input_id,
    split_any_input_id,
)
from kinetic.model.payload import CallPayload, Phase, Result
from kinetic.model.progress import StopOrder
from kinetic.model.ranges import format_ranges
from kinetic.runtime import debugger
from kinetic.runtime import supervise as supervising
from kinetic.runtime.outcome import user_failure
from kinetic.runtime.runner_config import ConfigError, InputSpec, RunnerConfig, parse_chunk
from kinetic.runtime.supervise import supervise
from kinetic.runtime.termination import (
    MAX_TERMINATION_MESSAGE,
    termination_log_path,
    write_termination_log,
)
from kinetic.runtime.unpickle import load_call_payload, load_input_payload, payload_project

__all__ = [
    "EXIT_OK",
    "EXIT_USER_ERROR",
    "EXIT_RUNNER_ERROR",
    "InputSpec",
    "RunnerConfig",
    "ConfigError",
    "parse_chunk",
    "chunk_termination_message",
    "execute",
    "record_result",
    "run",
    "main",
]

EXIT_OK = 0
"""The function returned and its result is recorded (or a success was already recorded)."""
EXIT_USER_ERROR = 1
"""The user's function raised (a chunk: some input failed); the details are in the result."""
EXIT_RUNNER_ERROR = 2
"""The runner failed in setup, download, verify, unpickle, pickle-result or upload."""

_RECORD_ATTEMPTS = 5
STOP_CHECK_SECONDS = 1.0


def log(message: str) -> None:
    """One progress line on stdout, flushed so `kubectl logs -f` shows it at once."""
    print(f"kinetic runner: {message}", flush=True)


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


def _download(uri: str, what: str, prefix: str = "") -> bytes:
    try:
        data = storage.read_bytes(uri)
    except storage.StorageError as e:
        _fail("download", f"cannot download the {what}: {e}", e)
    log(f"{prefix}downloaded {what} ({len(data)} bytes) from {uri}")
    return data


def _verify(data: bytes, expected: str, what: str, prefix: str = "") -> None:
    """Refuse bytes whose sha256 differs: they are never unpickled."""
    want = expected.strip().lower().removeprefix("sha256:")
    got = payload.sha256(data)
    if got != want:
        _fail("verify", f"{what} hash mismatch: expected sha256 {want}, got {got}")
    log(f"{prefix}verified {what} sha256")


def _unpickle(load: Callable[[], Any], what: str) -> Any:
    try:
        return load()
    except payload.PayloadError as e:
        _fail("unpickle", str(e), e)
    except Exception as e:  # a pickle that raises something unusual while loading
        _fail("unpickle", f"cannot unpickle the {what}: {type(e).__name__}: {e}", e)


def _load_input(spec: InputSpec, input_bytes: bytes | None) -> Any:
    if input_bytes is not None:
        return _unpickle(lambda: load_input_payload(input_bytes), "input payload")
    try:
        return json.loads(spec.input_json or "")
    except ValueError as e:
        _fail("unpickle", f"KINETIC_INPUT_JSON is not valid JSON: {e}", e)


class _Function:
    """The job or function payload: fetched and verified, then unpickled, once per Pod.

    A chunk's inputs share it, so a payload that cannot be downloaded,
    verified or unpickled fails every input with the same phase and message
    without trying again. Fetching and unpickling are separate steps so that
    a single input's bytes are verified before the payload is unpickled too.
    """

    def __init__(self, uri: str, sha256: str) -> None:
        self.uri = uri
        self.sha256 = sha256
        self._data: bytes | None = None
        self._call: CallPayload | None = None
        self._failed: _PhaseFailed | None = None
        self._base_output_dir: str | None = None
        self.data: _DataStage | None = None  # volumes and Data arguments, once per Pod

    def fetch(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._data is not None or self._call is not None:
            return
        try:
            data = _download(self.uri, "payload")
            _verify(data, self.sha256, "payload")
        except _PhaseFailed as e:
            self._failed = e
            raise
        self._data = data

    def load(self) -> CallPayload:
        """The unpickled call; its captured env is applied the first time."""
        if self._failed is not None:
            raise self._failed
        if self._call is None:
            data = self._data
            try:
                _prepare_project(data or b"")
                call = _unpickle(lambda: load_call_payload(data or b""), "payload")
            except _PhaseFailed as e:
                self._failed = e
                raise
            self._data = None
            self._call = call
            os.environ.update(call.env)
            if call.env:
                log(f"applied {len(call.env)} captured env var(s): {', '.join(sorted(call.env))}")
            self._base_output_dir = os.environ.get("KINETIC_OUTPUT_DIR")
        return self._call

    def set_output_dir(self, output_dir: str | None) -> None:
        """The operator's output dir for this input wins over a captured one."""
        value = output_dir or self._base_output_dir
        if value:
            os.environ["KINETIC_OUTPUT_DIR"] = value
        else:
            os.environ.pop("KINETIC_OUTPUT_DIR", None)


class _DataStage:
    """The ``data`` phase: volumes into their mount paths (once per Pod), then each
    `kinetic.model.data.DataRef` argument downloaded and replaced by its local path.

    Nothing is imported or read unless the job has volumes or Data arguments.
    A volume that cannot be fetched fails every input of the Pod the same way.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self._volumes_done = not environ.get("KINETIC_VOLUMES", "").strip()
        self._failed: _PhaseFailed | None = None
        self._fetch_arg: Callable[[Any], str] | None = None

    def prepare(self, call: CallPayload, item: Any) -> tuple[CallPayload, Any]:
        if self._failed is not None:
            raise self._failed
        if self._volumes_done and not _may_hold_data():
            return call, item  # the common case: nothing to import, nothing to fetch
        # At use, for start-up cost: most Pods have no data and never load these.
        from kinetic.model.data import DataRef, substitute
        from kinetic.runtime import datafetch

        try:
            if not self._volumes_done:
                datafetch.fetch_volumes(datafetch.volumes_from_env(self.environ))
                self._volumes_done = True
            if self._fetch_arg is None:
                self._fetch_arg = datafetch.ArgFetcher(self.environ)
            fetch = self._fetch_arg
            args = substitute(call.args, fetch, DataRef)
            kwargs = substitute(call.kwargs, fetch, DataRef)
            item = substitute(item, fetch, DataRef)
        except datafetch.FetchError as e:
            self._failed = _PhaseFailed("data", str(e), e)
            raise self._failed from None
        except OSError as e:
            raise _PhaseFailed("data", f"cannot write the data into the pod: {e}", e) from None
        if args is not call.args or kwargs is not call.kwargs:
            call = replace(call, args=args, kwargs=kwargs)
        return call, item


def _may_hold_data() -> bool:
    """Whether an argument may be a `kinetic.model.data.DataRef`: unpickling one loads
    kinetic.model.data, so without that module there is nothing to look for."""
    return "kinetic.model.data" in sys.modules


def _prepare_project(data: bytes) -> None:
    """Install the project's requirements and unpack its source, when the payload names them.

    Before the body is unpickled: it may refer to modules that only these provide.
    """
    project = _unpickle(lambda: payload_project(data), "payload")
    if not project:
        return
    from kinetic.runtime import podenv  # only payloads with a project pay for this import

    try:
        podenv.prepare(project, log)
    except podenv.PrepareError as e:
        phase: Phase = "unpack-source" if e.phase == "unpack-source" else "install-dependencies"
        _fail(phase, e.message)
    except OSError as e:  # the cache folder or a temp file: still this phase, not a bug
        _fail("install-dependencies", f"preparing the project failed: {e}", e)


def _describe_call(call: CallPayload, spec: InputSpec, mode: str) -> str:
    """``train(2 args, 1 kwarg)``: shapes only, never values (they may be secrets)."""
    name = call.name or payload.function_name(call.fn)
    if spec.has_input:
        return f"{name}(<batch input, input_mode={mode}>)"
    parts = []
    if call.args:
        parts.append(f"{len(call.args)} arg{'s' if len(call.args) != 1 else ''}")
    if call.kwargs:
        parts.append(f"{len(call.kwargs)} kwarg{'s' if len(call.kwargs) != 1 else ''}")
    return f"{name}({', '.join(parts)})"


def _call(call: CallPayload, spec: InputSpec, mode: str, item: Any) -> Result:
    """Run the user's function; any exception it raises is the user's failure."""
    prefix = spec.log_prefix
    log(f"{prefix}calling {_describe_call(call, spec, mode)}")
    start = time.monotonic()
    try:
        if spec.has_input:
            value = payload.call_with_input(call.fn, item, mode)
        else:
            value = call.fn(*call.args, **call.kwargs)
    except BaseException as e:  # SystemExit from user code is a user failure too
        elapsed = time.monotonic() - start
        result = user_failure(e)
        log(f"{prefix}{call.name or 'function'} raised after {elapsed:.1f}s: {result.summary()}")
        return result
    log(
        f"{prefix}{call.name or 'function'} returned {type(value).__name__} "
        f"in {time.monotonic() - start:.1f}s"
    )
    return payload.success(value)


def execute(
    cfg: RunnerConfig, spec: InputSpec | None = None, function: _Function | None = None
) -> Result:
    """Download, verify, unpickle and call one input; never raises, returns the Result.

    The payload and the input are both verified before either is unpickled,
    so tampered bytes never reach pickle. ``function`` carries the payload
    from one input of a chunk to the next.
    """
    spec = spec or cfg.inputs[0]
    function = function or _Function(cfg.payload_uri, cfg.payload_sha256)
    prefix = spec.log_prefix
    try:
        function.fetch()
        input_bytes: bytes | None = None
        if spec.input_uri is not None:
            input_bytes = _download(spec.input_uri, "input payload", prefix)
            _verify(input_bytes, spec.input_sha256 or "", "input payload", prefix)
        call = function.load()
        item = _load_input(spec, input_bytes) if spec.has_input else None
        if function.data is None:
            function.data = _DataStage(os.environ)
        call, item = function.data.prepare(call, item)
        function.set_output_dir(spec.output_dir)
        return _call(call, spec, cfg.input_mode, item)
    except _PhaseFailed as e:
        log(f"{prefix}failed in phase {e.phase}: {e.message}")
        return payload.runner_failure(e.phase, e.message, e.cause)


# --------------------------------------------------------------------------- recording


def _encode(result: Result, prefix: str = "") -> tuple[Result, bytes]:
    """Pickle the result; an unpicklable return value becomes a pickle-result failure."""
    try:
        return result, payload.dump_result(result)
    except payload.PayloadError as e:
        log(f"{prefix}failed in phase pickle-result: {e}")
        failure = payload.runner_failure("pickle-result", str(e))
        return failure, payload.dump_result(failure)


def _records_success(data: bytes) -> bool:
    """Whether stored result bytes record success, read from their header, never unpickled."""
    return payload.result_outcome(data) is True


def record_result(
    result_uri: str,
    data: bytes,
    generation: int | None = None,
    *,
    vouched: str | None = None,
) -> digest.Reported | None:
    """Write ``data`` unless a success that must be kept is already there.

    ``generation`` is what the caller last saw at ``result_uri`` (0: absent),
    which saves a read; the write is conditional on it either way, so a
    result that changed since is re-read and re-checked rather than clobbered.
    Returns None when written; else the hash and size of the success kept
    instead: its hash is ``vouched`` (the one the operator vouches for) when
    that is what is there, or "" for any other success (kept, never
    overwritten, but not to be vouched for: see the module docstring).
    Raises StorageError when storage fails.
    """
    known = generation
    for _ in range(_RECORD_ATTEMPTS):
        if known is None:
            found = storage.read_if_exists(result_uri)
            if found is not None and _records_success(found[0]):
                held = digest.sha256(found[0])
                return digest.Reported(held if held == vouched else "", len(found[0]))
            known = 0 if found is None else found[1]
        try:
            storage.write_if_generation(result_uri, data, known)
            return None
        except storage.PreconditionFailed:
            log("the result changed while writing; re-checking")
            known = None
    raise storage.StorageError(
        f"gave up writing {result_uri}: it kept changing under {_RECORD_ATTEMPTS} attempts "
        "(are several pods writing the same result?)",
        result_uri,
    )


def _earlier_result(spec: InputSpec) -> tuple[digest.Reported | None, int | None]:
    """(hash and size of a success already recorded, generation seen) in one read.

    The generation (0 when absent, None when storage could not be asked)
    lets the final write skip its own read, and replace an earlier success
    nobody vouches for exactly as it was seen.
    """
    try:
        found = storage.read_if_exists(spec.result_uri)
    except storage.StorageError as e:
        log(f"{spec.log_prefix}could not check for an earlier result ({e}); running anyway")
        return None, None
    if found is None:
        return None, 0
    data = found[0]
    success = digest.Reported(digest.sha256(data), len(data)) if _records_success(data) else None
    return success, found[1]


def _exit_code(result: Result) -> int:
    if result.ok:
        return EXIT_OK
    return EXIT_USER_ERROR if result.phase == "call" else EXIT_RUNNER_ERROR


@dataclass(frozen=True)
class _Outcome:
    """How one input ended: exit code, one-line summary, and the stored result's hash and
    size (`kinetic.model.digest.Reported`)."""

    code: int
    summary: str
    stored: digest.Reported | None = None

    @property
    def message(self) -> str:
        """The termination message: the summary, and the hash and size when a result is
        stored."""
        if self.stored is None:
            return self.summary
        sha, size = self.stored
        return digest.with_sha256(self.summary, sha, MAX_TERMINATION_MESSAGE, size)


def _run_one(cfg: RunnerConfig, spec: InputSpec, function: _Function) -> _Outcome:
    """Run and record one input."""
    prefix = spec.log_prefix
    if prefix:
        log(f"{prefix}begin")  # where this input's part of a chunk's log starts
    kept, generation = _earlier_result(spec)
    if kept is not None and kept.sha256 == spec.result_sha256:
        log(
            f"{prefix}result already recorded at {spec.result_uri} by an earlier run; nothing to do"
        )
        return _Outcome(EXIT_OK, "ok (result already recorded)", kept)
    if kept is not None:
        log(
            f"{prefix}a success is stored at {spec.result_uri} (sha256 {kept.sha256}) that the "
            "operator does not vouch for: running the input again, its result replaces it"
        )
    result, data = _encode(execute(cfg, spec, function), prefix)
    try:
        kept = record_result(spec.result_uri, data, generation, vouched=spec.result_sha256)
    except storage.StorageError as e:
        message = f"cannot upload the result: {e}"
        log(f"{prefix}failed in phase upload: {message}")
        return _Outcome(EXIT_RUNNER_ERROR, f"runner failed in phase upload: {message}")
    if kept is not None and kept.sha256:
        log(f"{prefix}result already recorded at {spec.result_uri} by an earlier run; kept")
        return _Outcome(EXIT_OK, "ok (result already recorded)", kept)
    if kept is not None:
        log(
            f"{prefix}result already recorded at {spec.result_uri} by another run while this one "
            "ran; not overwriting it, and reporting no hash for it (it is not this run's)"
        )
        return _Outcome(EXIT_OK, "ok (another run recorded a result meanwhile; not checked)")
    log(f"{prefix}uploaded result ({len(data)} bytes) to {spec.result_uri}: {result.summary()}")
    stored = digest.Reported(digest.sha256(data), len(data))
    return _Outcome(_exit_code(result), result.summary(), stored)


def _run_reported(cfg: RunnerConfig, spec: InputSpec, function: _Function) -> _Outcome:
    """Run one input of a unit, its begin and end reported to the supervising process,
    which writes them into the Pod's log for the operator (`kinetic.model.progress`)."""
    assert spec.index is not None  # parse_chunk gives every chunk input its index
    _name_input(spec.index, spec.original_index)
    began = time.time()
    supervising.report(f"begin {spec.index} {int(began * 1000)}")
    outcome = _run_one(cfg, spec, function)
    ended = time.time()
    ok = "ok" if outcome.code == EXIT_OK else "failed"
    digest_part = f" {outcome.stored.sha256} {outcome.stored.size}" if outcome.stored else ""
    supervising.report(
        f"end {spec.index} {ok} {int(ended * 1000)} {ended - began:.3f}{digest_part}"
    )
    return outcome


def _name_input(index: int, original: int | None) -> None:
    """While an input of a unit runs, the Pod's job name is that input's (``<batch>-<i>``),
    so `kinetic.JobHandle.from_job_context` in the function answers for its own input, and
    ``KINETIC_INDEX`` is its index (a rerun's input: its index in the batch it reruns), as
    in a Pod of its own."""
    split = split_any_input_id(os.environ.get(ENV_JOB_NAME, ""))
    if split is not None:
        os.environ[ENV_JOB_NAME] = input_id(split[0], index)
    os.environ[ENV_INDEX] = str(index if original is None else original)


def _skip(rest: tuple[InputSpec, ...], why: str) -> None:
    """The unit stops before these inputs begin: each is reported skipped."""
    log(f"skipping {len(rest)} input(s): {why}")
    for spec in rest:
        supervising.report(f"skipped {spec.index} {why}")


@dataclass
class _StopCheck:
    """What the operator asks of the batch's units (`kinetic.model.progress.StopOrder`):
    an object at ``uri`` (a fail-fast or a cancel stops everything; inputs cancelled one by
    one are skipped). Looked at once a second at most, before an input.

    Anyone who may write the namespace's storage can write one: the worst it does is make
    this unit skip inputs, which the operator runs again (charging a disruption to the
    first skipped one, so a stop object left there cannot loop for ever)."""

    uri: str | None
    checked: float = 0.0
    order: StopOrder | None = None

    def skips(self, index: int) -> str | None:
        """Why input ``index`` must not begin now (None: it may)."""
        self._look()
        return self.order.skips(index) if self.order is not None else None

    def _look(self) -> None:
        now = time.monotonic()
        if self.uri is None or now - self.checked < STOP_CHECK_SECONDS:
            return
        if self.order is not None and self.order.everything:
            return  # nothing can undo a stop
        self.checked = now
        try:
            found = storage.read_if_exists(self.uri)
        except (storage.StorageError, ValueError):
            return  # storage not answering: go on, the operator stops the Pod if it must
        if found is not None:
            self.order = StopOrder.parse(found[0][:65536])


def chunk_termination_message(
    succeeded: list[int], failed: list[int], report_sha256: str | None = None
) -> str:
    """The chunk's one-line JSON termination message, in `kinetic.model.ranges` notation."""
    doc = {"succeeded": format_ranges(succeeded), "failed": format_ranges(failed)}
    if report_sha256 is not None:
        doc["report"] = report_sha256
    return json.dumps(doc, separators=(",", ":"))


def _write_report(uri: str | None, hashes: dict[int, digest.Reported]) -> str | None:
    """Store a chunk's per-input result hashes and sizes; returns the report's own sha256."""
    if uri is None:
        return None
    data = digest.chunk_report_bytes(hashes)
    try:
        storage.write_bytes(uri, data)
    except storage.StorageError as e:
        log(f"could not write the chunk report {uri}: {e}")
        return None
    return digest.sha256(data)


def run(cfg: RunnerConfig) -> int:
    """Do the whole job for ``cfg`` (one input or a chunk) and return the exit code."""
    if cfg.debug_port is not None:
        problem = debugger.wait_for_debugger(cfg.debug_port, log)
        if problem is not None:
            return _setup_failure(problem, os.environ)
    function = _Function(cfg.payload_uri, cfg.payload_sha256)
    if not cfg.chunked:
        outcome = _run_one(cfg, cfg.inputs[0], function)
        write_termination_log(cfg.termination_log, outcome.message)
        return outcome.code
    succeeded: list[int] = []
    failed: list[int] = []
    hashes: dict[int, digest.Reported] = {}
    stop = _StopCheck(cfg.stop_uri)
    for n, spec in enumerate(cfg.inputs):
        assert spec.index is not None  # parse_chunk gives every chunk input its index
        why = stop.skips(spec.index)
        if why is not None and stop.order is not None and stop.order.everything:
            _skip(cfg.inputs[n:], why)
            break
        if why is not None:
            _skip((spec,), why)
            continue
        outcome = _run_reported(cfg, spec, function)
        (succeeded if outcome.code == EXIT_OK else failed).append(spec.index)
        if outcome.stored is not None:
            hashes[spec.index] = outcome.stored
        if outcome.code != EXIT_OK and cfg.fail_fast:  # the batch stops: begin nothing more
            _skip(cfg.inputs[n + 1 :], f"input {spec.index} failed and the batch fails fast")
            break
    report = _write_report(cfg.report_uri, hashes)
    message = chunk_termination_message(succeeded, failed, report)
    log(f"chunk done: {message}")
    write_termination_log(cfg.termination_log, message)
    return EXIT_OK if not failed else EXIT_USER_ERROR


def _setup_failure(message: str, environ: Mapping[str, str]) -> int:
    """Report bad env: at every result URI that can be read from it, and to the termination log."""
    summary = f"runner failed in phase setup: {message}"
    log(summary)
    data: bytes | None = None
    for result_uri in _result_uris(environ):
        try:
            storage.validate_uri(result_uri)
            data = data or payload.dump_result(payload.runner_failure("setup", message))
            if record_result(result_uri, data) is None and not _chunked(environ):
                summary = digest.with_sha256(
                    summary, digest.sha256(data), MAX_TERMINATION_MESSAGE, len(data)
                )
        except (ValueError, storage.StorageError) as e:
            log(f"could not record the failure at {result_uri}: {e}")
    write_termination_log(termination_log_path(environ), summary)
    return EXIT_RUNNER_ERROR


def _chunked(environ: Mapping[str, str]) -> bool:
    return bool(environ.get("KINETIC_CHUNK", "").strip())


def _result_uris(environ: Mapping[str, str]) -> list[str]:
    """Best effort: KINETIC_RESULT_URI, and each resultURI of a KINETIC_CHUNK that parses."""
    uris: list[str] = []
    single = environ.get("KINETIC_RESULT_URI", "").strip()
    if single:
        uris.append(single)
    try:
        entries = json.loads(environ.get("KINETIC_CHUNK") or "[]")
    except ValueError:
        return uris
    if isinstance(entries, list):
        for entry in entries:
            uri = entry.get("resultURI") if isinstance(entry, dict) else None
            if isinstance(uri, str) and uri.strip() and uri not in uris:
                uris.append(uri)
    return uris


def main(argv: list[str] | None = None) -> int:
    """Entry point; ``argv`` is unused (the contract is the environment).

    The work runs in a child process that this one supervises
    (`kinetic.runtime.supervise`): it sees all of the child's output, archives
    its end, and says how the child died if it did not end on its own.
    """
    storage.use_lean_gcs()  # a Pod should not pay for importing google-cloud-storage
    return supervise(
        _work,
        log_uri=os.environ.get(ENV_LOG_URI, "").strip() or None,
        limit=_log_limit(os.environ),
        termination_log=termination_log_path(os.environ),
    )


def _log_limit(environ: Mapping[str, str]) -> int:
    try:
        return max(1024, int(environ.get(ENV_LOG_LIMIT, "")))
    except ValueError:
        return LOG_ARCHIVE_BYTES


def _work() -> int:
    """Read the environment, then run the input(s): the child's whole job."""
    try:
        cfg = RunnerConfig.from_env(os.environ)
    except ConfigError as e:
        return _setup_failure(str(e), os.environ)
    try:
        return run(cfg)
    except Exception as e:  # a bug in the runner must not look like a user error (exit 1)
        log(f"internal error: {type(e).__name__}: {e}")
        write_termination_log(cfg.termination_log, f"runner internal error: {e}")
        return EXIT_RUNNER_ERROR


if __name__ == "__main__":
    sys.exit(main())
