"""Inputs that never ran: refused one by one, recorded, and read back as the same exception."""

from __future__ import annotations

import threading

import pytest
from kinetic.api.batches import BatchError, SubmissionError
from kinetic.api.submission import (
    mark_unsubmitted,
    submission_exception,
    submission_failure,
    wrong_typed_inputs,
)
from kinetic.model import payload


@pytest.mark.parametrize(
    "mode, items, refused",
    [
        ("kwargs", [{"a": 1}, [1], {"b": 2}], [1]),
        ("args", [(1, 2), 3, [4]], [1]),
        ("auto", [{"a": 1}, [1], 3, "x"], []),
        ("single", [[1], {"a": 1}], []),
    ],
)
def test_only_the_wrong_typed_items_are_refused(mode, items, refused):
    found = wrong_typed_inputs(items, mode)
    assert sorted(found) == refused
    assert all(isinstance(e, TypeError) for e in found.values())


def test_a_builtin_exception_comes_back_with_its_type_and_message():
    original = TypeError("input_mode='kwargs' needs a dict, got list")
    wire = submission_failure(3, original)
    assert wire.message == "TypeError: input_mode='kwargs' needs a dict, got list"
    assert wire.error_type == "TypeError"
    again = submission_exception(3, wire.message, wire.error_type)
    assert type(again) is TypeError and str(again) == str(original)
    assert again.__notes__ == ["input 3 was not submitted, so it never ran"]


def test_an_unpicklable_input_keeps_the_pickling_error():
    with pytest.raises(payload.PayloadError) as info:
        payload.build_input_payload(threading.Lock())
    cause = info.value.__cause__
    wire = submission_failure(0, cause)
    again = submission_exception(0, wire.message, wire.error_type)
    assert type(again) is type(cause) and str(again) == str(cause)


class _Custom(Exception):
    pass


def test_a_type_this_process_may_not_import_is_a_submission_error_naming_it():
    wire = submission_failure(1, _Custom("bad"))
    assert wire.error_type == f"{__name__}._Custom"
    again = submission_exception(1, wire.message, wire.error_type)
    assert isinstance(again, SubmissionError) and isinstance(again, RuntimeError)
    assert str(again) == f"input 1 was not submitted: {__name__}._Custom: bad"


def test_records_without_a_type_read_as_before():
    again = submission_exception(2, "could not pickle input: boom", None)
    assert isinstance(again, SubmissionError) and "boom" in str(again)


def test_a_name_in_a_spec_never_imports_anything():
    # Not a built-in: never imported, whatever it names.
    again = submission_exception(0, "os.system: x", "os.system")
    assert isinstance(again, SubmissionError)
    again = submission_exception(0, "print: x", "print")  # a built-in, but no exception
    assert isinstance(again, SubmissionError)


def test_the_note_is_added_once():
    e = ValueError("x")
    mark_unsubmitted(mark_unsubmitted(e, 4), 4)
    assert e.__notes__ == ["input 4 was not submitted, so it never ran"]


@pytest.mark.parametrize(
    "failed, submission, cancelled, text",
    [
        (1, 0, [], "Batch grp-1: 1 of 5 jobs failed"),
        (1, 1, [3], "Batch grp-1: 2 of 5 jobs failed, 1 cancelled"),
        (0, 0, [2, 3, 4], "Batch grp-1: 0 of 5 jobs failed, 3 cancelled"),
    ],
)
def test_batch_error_counts_cancelled_inputs(failed, submission, cancelled, text):
    err = BatchError(
        "grp-1",
        [object()] * failed,  # type: ignore[list-item]
        [None] * 5,
        submission_failures={0: ValueError("x")} if submission else None,
        cancelled=cancelled,
    )
    assert str(err) == text and err.cancelled == sorted(cancelled)


def test_runner_failures_are_runtime_errors():
    assert issubclass(payload.RunnerError, RuntimeError)
    with pytest.raises(RuntimeError, match="runner failed in phase download: gone"):
        payload.raise_remote(payload.runner_failure("download", "gone"))
