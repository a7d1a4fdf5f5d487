"""A failure's traceback, read from its result without running anything in it."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from kinetic.dashboard.tracebacks import MAX_FAILURE_BYTES, read_failure
from kinetic.model import payload
from kinetic.runtime.outcome import user_failure


class LossOfLearningRate(Exception):
    pass


def failed_result() -> bytes:
    def train() -> None:
        raise LossOfLearningRate("lr went <script>nan</script>")

    try:
        train()
    except LossOfLearningRate as e:
        return payload.dump_result(user_failure(e))
    raise AssertionError("unreachable")


def test_a_remote_failure_gives_its_type_message_and_traceback():
    failure = read_failure(failed_result())
    assert failure is not None
    assert failure.exception_type.endswith("LossOfLearningRate")
    assert failure.message.endswith("lr went <script>nan</script>")
    assert "in train" in failure.traceback and failure.traceback.startswith("Traceback")
    assert failure.phase == "call"


def test_a_runner_failure_has_its_phase():
    data = payload.dump_result(payload.runner_failure("download", "no such object"))
    failure = read_failure(data)
    assert failure is not None
    assert (failure.phase, failure.message) == ("download", "no such object")


def test_a_success_is_not_read():
    assert read_failure(payload.dump_result(payload.success({"loss": 0.1}))) is None


class _Runs:
    """A pickle that runs a command when loaded the ordinary way."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_hostile_pickle_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    state = {"ok": False, "traceback": _Runs(marker), "message": "m", "phase": "call"}
    data = payload.RESULT_HEADER + b"failed\n" + pickle.dumps(_Shaped(state))
    failure = read_failure(data)
    assert not marker.exists()
    assert failure is not None and failure.traceback == ""  # not text: left out
    assert failure.message == "m"


class _Shaped:
    def __init__(self, state: dict) -> None:
        self.state = state

    def __reduce__(self):
        return (_Shaped, ({},), self.state)


def test_what_is_not_a_kinetic_failure_is_none():
    assert read_failure(b"not a result") is None
    assert read_failure(payload.RESULT_HEADER + b"failed\n" + b"\x80\x05garbage") is None
    assert read_failure(payload.RESULT_HEADER + b"failed\n" + pickle.dumps([1, 2])) is None
    big = payload.RESULT_HEADER + b"failed\n" + pickle.dumps("x" * MAX_FAILURE_BYTES)
    assert read_failure(big) is None
