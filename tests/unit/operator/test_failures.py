"""The ReconcileFailed condition: set while reconciles fail, cleared once, never flapping."""

from __future__ import annotations

from kinetic_operator.failures import describe, failure_conditions

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
RUNNING = {"type": "Running", "status": "True", "reason": "Running"}


def test_a_failure_is_added_beside_the_other_conditions() -> None:
    out = failure_conditions([RUNNING], "OSError: disk (retrying with backoff)", "OSError", T0)
    assert out is not None and out[0] == RUNNING
    assert out[1] == {
        "type": "ReconcileFailed",
        "status": "True",
        "reason": "OSError",
        "message": "OSError: disk (retrying with backoff)",
        "lastTransitionTime": T0,
    }


def test_nothing_changes_for_an_object_that_never_failed_or_the_same_failure() -> None:
    assert failure_conditions([RUNNING], None, "", T0) is None
    failed = failure_conditions([], "E: x", "E", T0)
    assert failed is not None
    assert failure_conditions(failed, "E: x", "E", T1) is None


def test_recovery_flips_it_false_and_moves_the_transition_time_once() -> None:
    failed = failure_conditions([], "E: x", "E", T0)
    assert failed is not None
    other = failure_conditions(failed, "E: y", "E", T1)
    assert other is not None and other[0]["lastTransitionTime"] == T0  # still failing
    ok = failure_conditions(other, None, "", T1)
    assert ok is not None
    assert (ok[0]["status"], ok[0]["reason"], ok[0]["lastTransitionTime"]) == (
        "False",
        "Recovered",
        T1,
    )
    assert failure_conditions(ok, None, "", T1) is None


def test_messages_are_one_clipped_line_naming_the_error() -> None:
    assert describe(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert describe(KeyError()) == "KeyError"
    assert len(describe(RuntimeError("x" * 5000))) == 1024


def test_an_api_error_is_described_by_what_the_server_said() -> None:
    """A quota refusal names the quota, not just '(403)'."""
    from kubernetes.client.exceptions import ApiException

    exc = ApiException(status=403, reason="Forbidden")
    exc.body = (
        '{"kind":"Status","status":"Failure","message":"pods \\"j-1\\" is forbidden: '
        'exceeded quota: nopods, requested: pods=1","reason":"Forbidden","code":403}'
    )
    assert describe(exc) == (
        'ApiException: pods "j-1" is forbidden: exceeded quota: nopods, requested: pods=1'
    )
    exc.body = "not json"
    assert describe(exc) == "ApiException: (403)"
