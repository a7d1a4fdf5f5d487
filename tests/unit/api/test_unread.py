"""`results()` on inputs that did not fail but have no value: the reason, never "0 failed".

A batch whose results an earlier `results()` cleaned up, or whose object was
deleted (nothing vouches for its stored results any more), used to raise
``BatchError: Batch grp-…: 0 of 4 jobs failed`` with no failures; the reason
showed only with ``return_exceptions=True``.
"""

from __future__ import annotations

import pytest
from kinetic.api.batches import BatchError, BatchHandle, _Results
from kinetic.api.handle import JobCancelled, JobFailed, ResultDeleted
from kinetic.api.unread import unread_error
from kinetic.model.digest import ResultMismatch, Unverifiable

GRP = "grp-0a1b2c3d"
HOME = "gs://bucket/namespaces/ns/batches/grp-0a1b2c3d/uid-1/"
WHY = (
    f"batch {GRP} no longer exists, so the API server holds no digest to check it against, "
    "and storage alone can be rewritten by any Pod or bucket writer"
)


def deleted(i: int) -> ResultDeleted:
    return ResultDeleted(f"input {i} of batch {GRP} succeeded, but its result is no longer at …")


def unverifiable(i: int) -> Unverifiable:
    return Unverifiable(f"{HOME}results/{i}.pkl", WHY)


def batch(total: int = 4) -> BatchHandle:
    return BatchHandle(
        group_id=GRP,
        namespace="ns",
        name=None,
        tags={},
        total=total,
        storage_root="gs://bucket",
        uid="uid-1",
    )


def results(errors: dict[int, Exception], failed: frozenset[int] = frozenset()) -> _Results:
    got = _Results({}, dict(errors), sorted(errors))
    got.failed = set(failed)
    return got


# --------------------------------------------------------------------------- the decision


def test_results_cleaned_up_by_an_earlier_read_say_so_for_the_whole_batch() -> None:
    error = unread_error(GRP, 4, {i: deleted(i) for i in range(4)}, HOME)
    assert type(error) is ResultDeleted and isinstance(error, JobFailed)
    text = str(error)
    assert text.startswith(f"Batch {GRP}: inputs 0-3 (4 of 4) succeeded, but their results")
    assert "delete each result they read unless cleanup=False" in text
    assert "Pass cleanup=False to keep results" in text
    assert f"kinetic batches rerun {GRP} --all" in text


def test_a_deleted_batch_is_unverifiable_and_says_why() -> None:
    error = unread_error(GRP, 3, {i: unverifiable(i) for i in range(3)}, HOME)
    assert type(error) is Unverifiable
    assert str(error) == (
        f"refusing to return the results of inputs 0-2 (3 of 3) of batch {GRP} at {HOME}: {WHY}"
    )
    assert error.why == WHY and error.uri == HOME


def test_the_weightiest_reason_is_raised_and_the_rest_counted_in_a_note() -> None:
    unread: dict[int, Exception] = {0: deleted(0), 1: unverifiable(1), 2: unverifiable(2)}
    error = unread_error(GRP, 5, unread, HOME)
    assert type(error) is Unverifiable and "inputs 1-2 (2 of 5)" in str(error)
    assert error.__notes__ == [
        f"1 more input(s) of batch {GRP} have no value for another reason; "
        "results(return_exceptions=True) gives each input's value or exception"
    ]


def test_a_forged_result_is_raised_as_it_is() -> None:
    forged = ResultMismatch(f"{HOME}results/2.pkl", "a" * 64, "b" * 64)
    error = unread_error(GRP, 4, {1: unverifiable(1), 2: forged}, HOME)
    assert error is forged


def test_any_other_reason_is_the_first_inputs_own() -> None:
    gone = JobFailed(f"input 2 of {GRP} did not end: its batch was deleted")
    assert unread_error(GRP, 4, {2: gone, 3: JobFailed("x")}, HOME) is gone


# --------------------------------------------------------------------------- results()


def test_no_failure_raises_the_reason_not_a_batch_error() -> None:
    got = results({i: deleted(i) for i in range(4)})
    error = batch()._results_error(got, [])
    assert type(error) is ResultDeleted
    assert "0 of 4 jobs failed" not in str(error) and "inputs 0-3 (4 of 4)" in str(error)


def test_a_deleted_batchs_unverifiable_results_name_its_prefix() -> None:
    error = batch(2)._results_error(results({0: unverifiable(0), 1: unverifiable(1)}), [])
    assert type(error) is Unverifiable
    assert f"at gs://bucket/namespaces/ns/batches/{GRP}/uid-1/" in str(error)


def test_real_failures_keep_the_batch_error_and_name_the_unread_reason() -> None:
    got = results({0: ZeroDivisionError("division by zero"), 1: deleted(1)}, failed=frozenset({0}))
    error = batch()._results_error(got, [batch().child(0)])
    assert type(error) is BatchError
    assert str(error).startswith(f"Batch {GRP}: 1 of 4 jobs failed; 1 more have no value")
    assert f"(input 1: ResultDeleted: input 1 of batch {GRP} succeeded" in str(error)
    assert list(error.unread) == [1]


def test_cancelled_inputs_keep_the_batch_error() -> None:
    got = results({i: JobCancelled(f"input {i} of {GRP} was never run") for i in range(4)})
    error = batch()._results_error(got, [])
    assert (
        type(error) is BatchError and str(error) == f"Batch {GRP}: 0 of 4 jobs failed, 4 cancelled"
    )


@pytest.mark.parametrize(
    "unread, text",
    [
        ({}, f"Batch {GRP}: 1 of 2 jobs failed"),
        (
            {1: JobFailed("gone")},
            f"Batch {GRP}: 1 of 2 jobs failed; 1 more have no value to return "
            "(input 1: JobFailed: gone)",
        ),
    ],
)
def test_batch_error_message(unread: dict[int, Exception], text: str) -> None:
    error = BatchError(GRP, [object()], [None, None], unread=unread)  # type: ignore[list-item]
    assert str(error) == text
