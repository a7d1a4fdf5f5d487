"""``python -m kinetic.runtime.runner`` as a real subprocess, the way a pod runs it.

Each test uploads payloads to real storage (fake-gcs-server for gs://, a
directory for file://), runs the runner with the operator's env contract,
and checks what a user would see: the exit code, the result in storage,
the progress lines in the log and the termination message.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kinetic import storage
from kinetic.model import digest, payload
from kinetic.model.payload import RemoteError, Result, RunnerError
from kinetic.runtime.runner import EXIT_OK, EXIT_RUNNER_ERROR, EXIT_USER_ERROR
from kinetic_testing.payloads import TouchOnUnpickle

# --------------------------------------------------------------------------- harness


@pytest.fixture(params=["gs", "file"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    request.applymarker(pytest.mark.integration)
    bucket: str = request.getfixturevalue("gcs_bucket")
    return f"{bucket}/runner-{uuid.uuid4().hex[:8]}"


@dataclass
class Run:
    """One runner process: what it printed, how it exited, what it recorded."""

    code: int
    stdout: str
    stderr: str
    termination: str
    result_uri: str

    def result(self) -> Result:
        return payload.load_result(storage.read_bytes(self.result_uri))

    def stored_sha256(self) -> str:
        """The hash of the bytes at the result URI, as a reader would check them."""
        return digest.sha256(storage.read_bytes(self.result_uri))

    def stored_digest(self) -> str:
        """The size and hash of the stored result, as the runner reports them."""
        data = storage.read_bytes(self.result_uri)
        return f"bytes={len(data)} sha256={digest.sha256(data)}"


class Job:
    """A job's storage area plus the env the operator would give its pod."""

    def __init__(self, root: str, tmp_path: Path) -> None:
        self.root = storage.join(root, "jobs", f"j{uuid.uuid4().hex[:8]}")
        self.tmp_path = tmp_path
        self.env: dict[str, str] = {
            "KINETIC_RESULT_URI": storage.join(self.root, "result.pkl"),
            "KINETIC_TERMINATION_LOG": str(tmp_path / f"termination-{uuid.uuid4().hex[:6]}"),
        }

    def upload_payload(self, data: bytes, sha: str | None = None) -> None:
        uri = storage.join(self.root, "payload.pkl")
        storage.write_bytes(uri, data)
        self.env["KINETIC_PAYLOAD_URI"] = uri
        self.env["KINETIC_PAYLOAD_SHA256"] = sha or payload.sha256(data)

    def call(self, fn: Any, *args: Any, env: dict[str, str] | None = None, **kwargs: Any) -> None:
        self.upload_payload(payload.build_job_payload(fn, args, kwargs, env))

    def upload_input(
        self, value: Any = None, *, data: bytes | None = None, sha: str | None = None
    ) -> None:
        data = payload.build_input_payload(value) if data is None else data
        uri = storage.join(self.root, "inputs", "0.pkl")
        storage.write_bytes(uri, data)
        self.env["KINETIC_INPUT_URI"] = uri
        self.env["KINETIC_INPUT_SHA256"] = sha or payload.sha256(data)

    def run(self, **extra: str) -> Run:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KINETIC_")}
        env.pop("PYTHONPATH", None)
        env.update(self.env)
        env.update(extra)
        proc = subprocess.run(
            [sys.executable, "-m", "kinetic.runtime.runner"],
            env=env,
            cwd=self.tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        log_path = Path(env.get("KINETIC_TERMINATION_LOG", "/nonexistent"))
        termination = log_path.read_text() if log_path.exists() else ""
        return Run(
            proc.returncode,
            proc.stdout,
            proc.stderr,
            termination,
            env.get("KINETIC_RESULT_URI", ""),
        )


@pytest.fixture
def job(root: str, tmp_path: Path) -> Job:
    return Job(root, tmp_path)


# --------------------------------------------------------------------------- user functions
# Defined in this test module, which the runner subprocess cannot import: they
# travel by value, exactly like functions from a user's script.


def train(lr: float, batch_size: int = 32, *, tag: str = "") -> dict[str, Any]:
    print("user says hello from train", flush=True)
    return {
        "score": lr * batch_size,
        "tag": tag,
        "output_dir": os.environ.get("KINETIC_OUTPUT_DIR"),
        "wandb": os.environ.get("WANDB_MODE"),
    }


def fail(lr: float) -> None:
    raise ValueError(f"bad lr {lr}")


def returns_lock() -> Any:
    return threading.Lock()


def loaded_google_modules() -> list[str]:
    import sys

    return sorted(name for name in sys.modules if name.startswith(("google", "requests")))


def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


# --------------------------------------------------------------------------- success and errors


def test_success_records_the_value_and_says_so(job: Job, tmp_path: Path) -> None:
    out_dir = storage.join(job.root, "outputs/")
    job.call(train, 0.5, batch_size=4, tag="a", env={"WANDB_MODE": "offline"})
    run = job.run(KINETIC_OUTPUT_DIR=out_dir)
    assert run.code == EXIT_OK, run.stdout + run.stderr
    assert payload.raise_remote(run.result()) == {
        "score": 2.0,
        "tag": "a",
        "output_dir": out_dir,
        "wandb": "offline",
    }
    assert run.termination == f"ok {run.stored_digest()}"
    lines = run.stdout.splitlines()
    assert any(line.startswith("kinetic runner: downloaded payload (") for line in lines)
    assert "kinetic runner: calling train(1 arg, 2 kwargs)" in lines
    assert "user says hello from train" in lines
    assert any(line.startswith("kinetic runner: uploaded result (") for line in lines)


def test_a_function_pod_never_loads_google_cloud_storage(job: Job) -> None:
    """The payload is downloaded through kinetic.storage.gcs_http: the library's import is what a
    short function's Pod would otherwise spend most of its CPU on (see bench/README.md)."""
    job.call(loaded_google_modules)
    run = job.run()
    assert run.code == EXIT_OK, run.stdout + run.stderr
    assert payload.raise_remote(run.result()) == []


def test_user_exception_is_recorded_with_its_traceback(job: Job) -> None:
    job.call(fail, 0.1)
    run = job.run()
    assert run.code == EXIT_USER_ERROR
    assert run.termination == f"ValueError: bad lr 0.1 {run.stored_digest()}"
    result = run.result()
    assert result.phase == "call"
    with pytest.raises(ValueError, match="bad lr 0.1") as info:
        payload.raise_remote(result)
    note = info.value.__notes__[0]
    assert note.startswith("Remote traceback:")
    assert "in fail" in note and 'raise ValueError(f"bad lr {lr}")' in note
    assert 'test_runner.py", line' in note  # the user's real file, not "<dynamic-code>"
    assert "kinetic/runtime/runner.py" not in note


def test_tampered_payload_is_never_unpickled(job: Job, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled-marker"
    data = payload.build_job_payload(echo, (TouchOnUnpickle(marker),))
    job.upload_payload(data, sha=payload.sha256(data + b"tampered"))
    run = job.run()
    assert run.code == EXIT_RUNNER_ERROR
    assert not marker.exists()
    result = run.result()
    assert result.phase == "verify" and "payload hash mismatch" in result.message
    assert run.termination.startswith("runner failed in phase verify: payload hash mismatch")
    with pytest.raises(RunnerError, match="payload hash mismatch"):
        payload.raise_remote(result)
    # control: with the right hash the same bytes are unpickled, so the check above can fail
    job.upload_payload(data)
    assert job.run().code == EXIT_OK
    assert marker.exists()


def test_tampered_input_is_never_unpickled(job: Job, tmp_path: Path) -> None:
    marker = tmp_path / "input-marker"
    job.upload_payload(payload.build_function_payload(echo))
    data = payload.build_input_payload(TouchOnUnpickle(marker))
    job.upload_input(data=data, sha="0" * 64)
    run = job.run(KINETIC_INPUT_MODE="single")
    assert run.code == EXIT_RUNNER_ERROR
    assert not marker.exists()
    result = run.result()
    assert result.phase == "verify" and "input payload hash mismatch" in result.message


def test_unpicklable_return_value_is_reported_as_such(job: Job) -> None:
    job.call(returns_lock)
    run = job.run()
    assert run.code == EXIT_RUNNER_ERROR
    result = run.result()
    assert result.phase == "pickle-result"
    assert result.message.startswith("the return value could not be pickled: _thread.lock")
    assert run.termination.startswith("runner failed in phase pickle-result:")


def test_missing_payload_fails_in_download(job: Job) -> None:
    job.env["KINETIC_PAYLOAD_URI"] = storage.join(job.root, "missing.pkl")
    job.env["KINETIC_PAYLOAD_SHA256"] = "0" * 64
    run = job.run()
    assert run.code == EXIT_RUNNER_ERROR
    result = run.result()
    assert result.phase == "download"
    assert f"no object at {job.env['KINETIC_PAYLOAD_URI']}" in result.message


def test_payload_needing_a_missing_module_fails_in_unpickle(job: Job) -> None:
    mod = types.ModuleType("kinetic_runner_test_absent")
    exec("def f():\n    return 1\n", mod.__dict__)
    mod.f.__module__ = mod.__name__
    sys.modules[mod.__name__] = mod
    try:
        job.call(mod.f)
    finally:
        del sys.modules[mod.__name__]
    run = job.run()
    assert run.code == EXIT_RUNNER_ERROR
    result = run.result()
    assert result.phase == "unpickle"
    assert "'kinetic_runner_test_absent' is not installed in this image" in result.message


def test_missing_env_is_a_setup_failure_naming_the_variables(job: Job) -> None:
    run = job.run()  # no payload env at all
    assert run.code == EXIT_RUNNER_ERROR
    assert "KINETIC_PAYLOAD_URI is not set" in run.stdout
    assert "KINETIC_PAYLOAD_SHA256 is not set" in run.stdout
    assert run.result().phase == "setup"
    assert run.termination.startswith("runner failed in phase setup:")


def test_termination_message_is_one_line_of_at_most_4096_bytes(job: Job) -> None:
    job.call(fail, "x\n" * 5000)
    run = job.run()
    assert run.code == EXIT_USER_ERROR
    raw = Path(job.env["KINETIC_TERMINATION_LOG"]).read_bytes()
    assert len(raw) <= 4096 and b"\n" not in raw
    assert raw.startswith(b"ValueError: bad lr x x")


# --------------------------------------------------------------------------- batch children


@pytest.mark.parametrize(
    ("value", "mode", "expected"),
    [
        ({"a": 1, "b": 2}, "auto", {"args": [], "kwargs": {"a": 1, "b": 2}}),
        ([1, 2], "auto", {"args": [1, 2], "kwargs": {}}),
        ({"class": 1}, "auto", {"args": [{"class": 1}], "kwargs": {}}),
        ([1, 2], "single", {"args": [[1, 2]], "kwargs": {}}),
        ({"not-an-id": 1}, "kwargs", {"args": [], "kwargs": {"not-an-id": 1}}),
        (5, None, {"args": [5], "kwargs": {}}),
    ],
)
@pytest.mark.parametrize("transport", ["uri", "json"])
def test_batch_child_input_modes(
    job: Job, transport: str, value: Any, mode: str | None, expected: dict[str, Any]
) -> None:
    job.upload_payload(payload.build_function_payload(echo))
    if transport == "uri":
        job.upload_input(value)
    else:
        job.env["KINETIC_INPUT_JSON"] = json.dumps(value)
    if mode is not None:
        job.env["KINETIC_INPUT_MODE"] = mode
    run = job.run()
    assert run.code == EXIT_OK, run.stdout + run.stderr
    assert payload.raise_remote(run.result()) == expected
    assert f"input_mode={mode or 'auto'}" in run.stdout


def test_batch_input_that_does_not_fit_the_mode_is_a_user_error(job: Job) -> None:
    job.upload_payload(payload.build_function_payload(echo))
    job.env["KINETIC_INPUT_JSON"] = json.dumps({"a": 1})
    run = job.run(KINETIC_INPUT_MODE="args")
    assert run.code == EXIT_USER_ERROR
    with pytest.raises(TypeError, match="input_mode='args' needs a list or tuple, got dict"):
        payload.raise_remote(run.result())


def test_bad_inline_json_and_bad_mode_are_runner_failures(job: Job) -> None:
    job.upload_payload(payload.build_function_payload(echo))
    run = job.run(KINETIC_INPUT_JSON="{not json")
    assert run.code == EXIT_RUNNER_ERROR
    assert "KINETIC_INPUT_JSON is not valid JSON" in run.result().message
    run = job.run(KINETIC_INPUT_JSON="1", KINETIC_INPUT_MODE="positional")
    assert run.code == EXIT_RUNNER_ERROR
    assert run.result().phase == "setup"
    assert "KINETIC_INPUT_MODE must be one of auto, single, args, kwargs" in run.result().message


# ------------------------------------------------------------------- never overwrite success


def test_a_second_run_does_not_take_a_success_it_did_not_write_on_trust(job: Job) -> None:
    """Storage is writable by any Pod: a success found there is not this run's to vouch for,
    so the input runs and its own result replaces it (the operator vouches for a chunk's
    earlier results, see test_runner_chunk)."""
    job.call(echo, "first")
    assert job.run().code == EXIT_OK
    job.call(echo, "second")
    run = job.run()
    assert run.code == EXIT_OK
    assert "that the operator does not vouch for" in run.stdout and "calling" in run.stdout
    assert payload.raise_remote(run.result()) == {"args": ["second"], "kwargs": {}}


def test_a_run_reports_only_the_hash_of_bytes_it_wrote(job: Job) -> None:
    job.call(echo, "first")
    first = job.run()
    job.call(echo, "second")
    second = job.run()
    assert digest.reported_sha256(second.termination) == second.stored_sha256()
    assert digest.reported_sha256(second.termination) != digest.reported_sha256(first.termination)


class _Trap:
    """Unpickling this creates a file: proof that foreign bytes were loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (self.path, "w"))


def test_foreign_bytes_at_the_result_uri_are_never_unpickled_and_get_replaced(
    job: Job, tmp_path: Path
) -> None:
    trap = tmp_path / "unpickled"
    storage.write_bytes(job.env["KINETIC_RESULT_URI"], pickle.dumps(_Trap(str(trap))))
    job.call(echo, "mine")
    run = job.run()
    assert run.code == EXIT_OK, run.stdout + run.stderr
    assert not trap.exists()  # the runner never loaded what it did not write
    assert payload.raise_remote(run.result()) == {"args": ["mine"], "kwargs": {}}
    assert digest.reported_sha256(run.termination) == run.stored_sha256()


def test_a_planted_success_is_recognised_by_its_header_and_replaced_unpickled(
    job: Job, tmp_path: Path
) -> None:
    trap = tmp_path / "unpickled"
    planted = payload.RESULT_HEADER + b"ok\n" + pickle.dumps(_Trap(str(trap)))
    storage.write_bytes(job.env["KINETIC_RESULT_URI"], planted)
    job.call(echo, "mine")
    run = job.run()
    assert run.code == EXIT_OK and "does not vouch for" in run.stdout
    assert not trap.exists()
    # The run's own result replaced the planted one, and only its hash is reported: the
    # planted bytes' hash never reaches the operator, so no client would accept them.
    assert payload.raise_remote(run.result()) == {"args": ["mine"], "kwargs": {}}
    assert digest.reported_sha256(run.termination) == run.stored_sha256()
    assert digest.reported_sha256(run.termination) != digest.sha256(planted)


def write_success_then_fail(result_uri: str) -> None:
    """Plays a duplicate pod that records success while this one is still running."""
    from kinetic import storage as s
    from kinetic.model import payload as p

    s.write_bytes(result_uri, p.dump_result(p.success("from the other pod")))
    raise RuntimeError("this pod lost the race")


def test_success_recorded_during_the_call_is_not_overwritten(job: Job) -> None:
    job.call(write_success_then_fail, job.env["KINETIC_RESULT_URI"])
    run = job.run()
    assert run.code == EXIT_OK
    assert "result already recorded" in run.stdout and "not overwriting" in run.stdout
    assert payload.raise_remote(run.result()) == "from the other pod"
    # Not its own bytes: it reports no hash for them (a reader refuses them unchecked).
    assert digest.reported_sha256(run.termination) is None


def test_a_failed_result_is_replaced_by_a_later_success(job: Job) -> None:
    job.call(fail, 1.0)
    assert job.run().code == EXIT_USER_ERROR
    job.call(echo, "retry")
    run = job.run()
    assert run.code == EXIT_OK
    assert payload.raise_remote(run.result()) == {"args": ["retry"], "kwargs": {}}


def test_exception_classes_unknown_to_the_reader_arrive_as_remote_errors(job: Job) -> None:
    def raise_custom() -> None:
        class PodOnlyError(Exception):
            def __init__(self, code: int, why: str) -> None:
                super().__init__(f"{code}: {why}")

        raise PodOnlyError(7, "disk full")

    job.call(raise_custom)
    run = job.run()
    assert run.code == EXIT_USER_ERROR
    with pytest.raises(RemoteError, match="PodOnlyError: 7: disk full"):
        payload.raise_remote(run.result())
