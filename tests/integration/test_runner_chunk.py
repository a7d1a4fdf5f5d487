"""Chunks: ``python -m kinetic.runtime.runner`` with KINETIC_CHUNK, as a real subprocess.

A chunk Pod runs several inputs of a batch with one function payload. Each
input must still be recorded at its own result URI exactly like a single
input, and the termination message must say which inputs failed, on real
storage: fake-gcs-server (gs://) and a directory (file://).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kinetic import storage
from kinetic.model import digest, payload
from kinetic.model.payload import Result
from kinetic.model.ranges import IndexSet
from kinetic.runtime.runner import EXIT_OK, EXIT_RUNNER_ERROR, EXIT_USER_ERROR
from kinetic_testing.payloads import TouchOnUnpickle

# --------------------------------------------------------------------------- harness


@pytest.fixture(params=["gs", "file"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    request.applymarker(pytest.mark.integration)
    bucket: str = request.getfixturevalue("gcs_bucket")
    return f"{bucket}/chunk-{uuid.uuid4().hex[:8]}"


@dataclass
class ChunkRun:
    """One chunk Pod's process: exit code, log, and its termination message."""

    code: int
    stdout: str
    stderr: str
    termination: str

    def outcome(self) -> dict[str, list[int]]:
        """The termination message as index lists; asserts it is one line of JSON."""
        assert "\n" not in self.termination, self.termination
        message = json.loads(self.termination)
        assert set(message) - {"report"} == {"succeeded", "failed"}, message
        return {k: list(IndexSet.parse(v)) for k, v in message.items() if k != "report"}


class Chunk:
    """A batch's storage area and the env the operator gives a chunk Pod."""

    def __init__(self, root: str, tmp_path: Path) -> None:
        self.group = f"grp-{uuid.uuid4().hex[:8]}"
        self.root = root
        self.tmp_path = tmp_path
        self.entries: list[dict[str, Any]] = []
        self.env: dict[str, str] = {
            "KINETIC_TERMINATION_LOG": str(tmp_path / f"termination-{uuid.uuid4().hex[:6]}"),
        }

    def function(self, fn: Any, env: dict[str, str] | None = None, sha: str | None = None) -> None:
        data = payload.build_function_payload(fn, env)
        uri = storage.join(self.root, "batches", self.group, "function.pkl")
        storage.write_bytes(uri, data)
        self.env["KINETIC_PAYLOAD_URI"] = uri
        self.env["KINETIC_PAYLOAD_SHA256"] = sha or payload.sha256(data)

    def result_uri(self, index: int) -> str:
        return storage.join(self.root, "jobs", f"{self.group}-{index}", "result.pkl")

    def add(
        self,
        index: int,
        value: Any = None,
        *,
        inline: bool = False,
        sha: str | None = None,
        output_dir: str | None = None,
    ) -> None:
        """Input ``index``: pickled to storage, or inline JSON; ``sha`` overrides its hash."""
        entry: dict[str, Any] = {"index": index, "resultURI": self.result_uri(index)}
        if inline:
            entry["inputJSON"] = value
        else:
            data = payload.build_input_payload(value)
            uri = storage.join(self.root, "batches", self.group, "inputs", f"{index}.pkl")
            storage.write_bytes(uri, data)
            entry["inputURI"] = uri
            entry["inputSHA256"] = sha or payload.sha256(data)
        if output_dir is not None:
            entry["outputDir"] = output_dir
        self.entries.append(entry)

    def run(self, *, argv: list[str] | None = None, **extra: str) -> ChunkRun:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KINETIC_")}
        env.pop("PYTHONPATH", None)
        env.update(self.env)
        env["KINETIC_CHUNK"] = json.dumps(self.entries, separators=(",", ":"))
        env.update(extra)
        log_path = Path(env["KINETIC_TERMINATION_LOG"])
        log_path.unlink(missing_ok=True)
        proc = subprocess.run(
            argv or [sys.executable, "-m", "kinetic.runtime.runner"],
            env=env,
            cwd=self.tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        termination = log_path.read_text() if log_path.exists() else ""
        return ChunkRun(proc.returncode, proc.stdout, proc.stderr, termination)

    def result(self, index: int) -> Result:
        return payload.load_result(storage.read_bytes(self.result_uri(index)))


@pytest.fixture
def chunk(root: str, tmp_path: Path) -> Chunk:
    return Chunk(root, tmp_path)


# --------------------------------------------------------------------------- user functions
# Defined here, where the runner cannot import them: they travel by value.


def square_unless_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"three is not allowed (got {x})")
    return x * x


def logged_call(x: int, calls: str, fixed: str) -> int:
    """Appends ``x`` to the file ``calls``; fails for 2 until the file ``fixed`` exists."""
    with open(calls, "a") as f:
        f.write(f"{x}\n")
    if x == 2 and not os.path.exists(fixed):
        raise RuntimeError("input 2 fails until fixed")
    return x + 100


def report_env(tag: str) -> dict[str, Any]:
    return {"tag": tag, "out": os.environ.get("KINETIC_OUTPUT_DIR"), "mode": os.environ.get("MODE")}


def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


def write_success_then_fail(result_uri: str) -> None:
    """Plays a duplicate pod that records this input's success while it runs."""
    from kinetic import storage as s
    from kinetic.model import payload as p

    s.write_bytes(result_uri, p.dump_result(p.success("from the other pod")))
    raise RuntimeError("this pod lost the race")


# --------------------------------------------------------------------------- tests


def test_one_failing_input_is_recorded_and_named_the_others_succeed(chunk: Chunk) -> None:
    chunk.function(square_unless_three)
    for i in range(10, 14):
        chunk.add(i, i - 10, inline=(i % 2 == 1))  # inputs 0..3: pickled and inline mixed
    run = chunk.run()
    assert run.code == EXIT_USER_ERROR, run.stdout + run.stderr
    assert run.outcome() == {"succeeded": [10, 11, 12], "failed": [13]}
    assert [payload.raise_remote(chunk.result(i)) for i in (10, 11, 12)] == [0, 1, 4]
    failure = chunk.result(13)
    assert failure.phase == "call"
    with pytest.raises(ValueError, match=r"three is not allowed \(got 3\)"):
        payload.raise_remote(failure)
    lines = run.stdout.splitlines()
    assert sum(line.startswith("kinetic runner: downloaded payload (") for line in lines) == 1
    assert (
        "kinetic runner: input 13: calling square_unless_three(<batch input, input_mode=auto>)"
        in lines
    )
    assert any(
        line.startswith("kinetic runner: input 13: square_unless_three raised") for line in lines
    )
    assert any(line.startswith("kinetic runner: input 12: uploaded result (") for line in lines)
    begins = [line for line in lines if line.endswith(": begin")]
    assert begins == [f"kinetic runner: input {i}: begin" for i in range(10, 14)]
    assert lines[-1] == 'kinetic runner: chunk done: {"succeeded":"10-12","failed":"13"}'


def test_each_inputs_result_hash_goes_to_the_report_named_by_its_own_hash(chunk: Chunk) -> None:
    chunk.function(square_unless_three)
    for i in range(4):
        chunk.add(i, i, inline=True)
    report_uri = storage.join(chunk.root, "batches", chunk.group, "reports", "pod.json")
    run = chunk.run(KINETIC_REPORT_URI=report_uri)
    assert run.outcome() == {"succeeded": [0, 1, 2], "failed": [3]}
    expected = digest.chunk_report(run.termination)
    hashes = digest.parse_report(storage.read_bytes(report_uri), expected)
    # Failures are recorded results too: every input has the hash and size of what is stored
    # for it (the client reads no more than that size).
    stored = {i: storage.read_bytes(chunk.result_uri(i)) for i in range(4)}
    assert hashes == {i: digest.Reported(digest.sha256(d), len(d)) for i, d in stored.items()}
    # A second Pod of the same chunk (a retry) reports the same hashes for what it kept.
    again = chunk.run(KINETIC_REPORT_URI=report_uri)
    again_hashes = digest.parse_report(
        storage.read_bytes(report_uri), digest.chunk_report(again.termination)
    )
    assert {i: again_hashes[i] for i in range(3)} == {i: hashes[i] for i in range(3)}


def test_all_inputs_succeeding_exits_zero(chunk: Chunk) -> None:
    chunk.function(echo)
    chunk.add(0, {"a": 1})
    chunk.add(1, [1, 2], inline=True)
    run = chunk.run(KINETIC_INPUT_MODE="auto")
    assert run.code == EXIT_OK, run.stdout + run.stderr
    assert run.termination == '{"succeeded":"0-1","failed":""}'
    assert payload.raise_remote(chunk.result(0)) == {"args": [], "kwargs": {"a": 1}}
    assert payload.raise_remote(chunk.result(1)) == {"args": [1, 2], "kwargs": {}}


def test_rerun_skips_recorded_successes_and_reruns_the_failure(
    chunk: Chunk, tmp_path: Path
) -> None:
    calls, fixed = tmp_path / "calls.txt", tmp_path / "fixed"
    chunk.function(logged_call)
    for i in range(4):
        chunk.add(i, {"x": i, "calls": str(calls), "fixed": str(fixed)})
    first = chunk.run()
    assert first.code == EXIT_USER_ERROR
    assert first.outcome() == {"succeeded": [0, 1, 3], "failed": [2]}
    generations = {i: storage.stat(chunk.result_uri(i)) for i in range(4)}

    # The operator vouches for the results the first run's report recorded.
    for i in (0, 1, 3):
        chunk.entries[i]["resultSHA256"] = digest.sha256(storage.read_bytes(chunk.result_uri(i)))
    calls.write_text("")
    fixed.touch()
    second = chunk.run()
    assert second.code == EXIT_OK, second.stdout + second.stderr
    assert second.outcome() == {"succeeded": [0, 1, 2, 3], "failed": []}
    assert calls.read_text().split() == ["2"]  # only the failed input ran again
    for i in (0, 1, 3):
        assert storage.stat(chunk.result_uri(i)) == generations[i]  # never rewritten
        assert f"input {i}: result already recorded at" in second.stdout
    assert storage.stat(chunk.result_uri(2)) != generations[2]
    assert payload.raise_remote(chunk.result(2)) == 102

    chunk.entries[2]["resultSHA256"] = digest.sha256(storage.read_bytes(chunk.result_uri(2)))
    third = chunk.run()
    assert third.code == EXIT_OK
    assert third.outcome() == {"succeeded": [0, 1, 2, 3], "failed": []}
    assert "downloaded payload" not in third.stdout  # nothing to run: the payload is not fetched
    assert calls.read_text().split() == ["2"]


def test_a_recorded_success_nobody_vouches_for_is_run_again(chunk: Chunk, tmp_path: Path) -> None:
    calls, fixed = tmp_path / "calls.txt", tmp_path / "fixed"
    fixed.touch()
    chunk.function(logged_call)
    for i in range(2):
        chunk.add(i, {"x": i, "calls": str(calls), "fixed": str(fixed)})
    assert chunk.run().code == EXIT_OK
    calls.write_text("")
    chunk.entries[0]["resultSHA256"] = "0" * 64  # not what is stored: not kept
    again = chunk.run()
    assert again.code == EXIT_OK
    assert sorted(calls.read_text().split()) == ["0", "1"]
    assert "does not vouch for" in again.stdout


def test_tampered_input_fails_only_that_input_and_is_never_unpickled(
    chunk: Chunk, tmp_path: Path
) -> None:
    marker = tmp_path / "unpickled"
    chunk.function(echo)
    chunk.add(0, 1)
    chunk.add(1, TouchOnUnpickle(marker), sha="0" * 64)
    chunk.add(2, 3)
    run = chunk.run(KINETIC_INPUT_MODE="single")
    assert run.code == EXIT_USER_ERROR
    assert run.outcome() == {"succeeded": [0, 2], "failed": [1]}
    assert not marker.exists()
    failure = chunk.result(1)
    assert failure.phase == "verify" and "input payload hash mismatch" in failure.message
    assert payload.raise_remote(chunk.result(0)) == {"args": [1], "kwargs": {}}
    assert payload.raise_remote(chunk.result(2)) == {"args": [3], "kwargs": {}}


def test_tampered_function_payload_fails_every_input_without_retrying_it(chunk: Chunk) -> None:
    chunk.function(echo, sha="1" * 64)
    for i in (5, 6, 7):
        chunk.add(i, i, inline=True)
    run = chunk.run()
    assert run.code == EXIT_USER_ERROR
    assert run.outcome() == {"succeeded": [], "failed": [5, 6, 7]}
    assert run.stdout.count("downloaded payload (") == 1
    for i in (5, 6, 7):
        result = chunk.result(i)
        assert result.phase == "verify" and result.message.startswith("payload hash mismatch")


def test_each_input_sees_its_own_output_dir_and_the_captured_env(chunk: Chunk) -> None:
    chunk.function(report_env, env={"MODE": "captured", "KINETIC_OUTPUT_DIR": "from-client"})
    out = storage.join(chunk.root, "outputs", chunk.group)
    chunk.add(0, ["a"], inline=True, output_dir=f"{out}/0")
    chunk.add(1, ["b"], inline=True)
    chunk.add(2, ["c"], inline=True, output_dir=f"{out}/2")
    run = chunk.run()
    assert run.code == EXIT_OK, run.stdout + run.stderr
    assert [payload.raise_remote(chunk.result(i)) for i in range(3)] == [
        {"tag": "a", "out": f"{out}/0", "mode": "captured"},
        {"tag": "b", "out": "from-client", "mode": "captured"},  # not input 0's directory
        {"tag": "c", "out": f"{out}/2", "mode": "captured"},
    ]


def test_success_recorded_by_another_pod_during_a_chunk_is_kept(chunk: Chunk) -> None:
    chunk.function(write_success_then_fail)
    chunk.add(0, [chunk.result_uri(0)], inline=True)
    run = chunk.run(KINETIC_INPUT_MODE="args")
    assert run.code == EXIT_OK, run.stdout + run.stderr
    assert run.outcome() == {"succeeded": [0], "failed": []}
    assert "input 0: result already recorded" in run.stdout and "not overwriting" in run.stdout
    assert payload.raise_remote(chunk.result(0)) == "from the other pod"


def test_malformed_chunk_is_a_setup_failure_recorded_for_each_input(chunk: Chunk) -> None:
    chunk.function(echo)
    chunk.add(0, 1, inline=True)
    chunk.add(1, 2, inline=True)
    chunk.entries[1]["outputdir"] = "typo"
    run = chunk.run()
    assert run.code == EXIT_RUNNER_ERROR
    assert run.termination.startswith(
        "runner failed in phase setup: KINETIC_CHUNK[1] (index 1) has unknown key(s) 'outputdir'"
    )
    for i in (0, 1):
        result = chunk.result(i)
        assert result.phase == "setup" and "'outputdir'" in result.message


def test_a_chunk_loads_no_kubernetes_client_and_no_storage_library_on_file(chunk: Chunk) -> None:
    """The lean start, checked on the path a Pod really takes.

    file:// needs no storage library at all, not even the HTTP client.
    gs:// goes through kinetic.storage.gcs_http (http.client), never through
    google-cloud-storage (and so requests, urllib3); neither loads the
    kubernetes client or the CLI's libraries.
    """
    chunk.function(echo)
    chunk.add(0, 1)
    chunk.add(1, 2, inline=True)
    probe = (
        "import sys\n"
        "from kinetic.runtime import runner\n"
        "code = runner.main()\n"
        "print('MODULES', ' '.join(sorted(sys.modules)))\n"
        "sys.exit(code)\n"
    )
    run = chunk.run(argv=[sys.executable, "-c", probe])
    assert run.code == EXIT_OK, run.stdout + run.stderr
    modules = next(line for line in run.stdout.splitlines() if line.startswith("MODULES "))
    top = {m.split(".")[0] for m in modules.split()[1:]}
    never = {"kubernetes", "pydantic", "rich", "typer", "yaml"}
    assert not top & never, sorted(top & never)
    library = {"google", "requests", "urllib3"}
    assert not top & library, sorted(top & library)
    if chunk.root.startswith("file://"):
        http = {"http", "email"}
        assert not top & http, sorted(top & http)
