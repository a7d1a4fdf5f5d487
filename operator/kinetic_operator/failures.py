"""When a reconcile fails unexpectedly, say so where users look: a condition and an Event.

The reconcile is retried with backoff by the `Serializer`; without this the
only trace would be the operator's log, which a user of `kubectl describe`
never sees. While reconciles keep failing, the object carries the
condition ``ReconcileFailed=True`` (reason: the error's type, message:
what it said) and one Warning Event per distinct error; the first
reconcile that succeeds again sets it False. Write conflicts are not
failures: they are decided again at once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from kinetic.model.names import fmt_time

from kinetic_operator.kube import Conflict, Kube, until_settled
from kinetic_operator.state import Fresh

__all__ = [
    "COND_RECONCILE_FAILED",
    "Failing",
    "failure_conditions",
    "reconcile_rounds",
    "reported",
]

log = logging.getLogger("kinetic.operator")

COND_RECONCILE_FAILED = "ReconcileFailed"
R_RECOVERED = "Recovered"
MAX_MESSAGE = 1024

T = TypeVar("T")


@dataclass
class Failing:
    """The error last reported for one object (None: its last reconcile succeeded)."""

    message: str | None = None


class Remembered(Protocol):
    """What the operator keeps of one object: its freshest copy and its last failure."""

    body: Fresh
    failing: Failing


def reconcile_rounds(
    kube: Kube,
    mem: Remembered,
    plural: str,
    what: str,
    fetch: Callable[[], dict[str, Any] | None],
    once: Callable[[dict[str, Any] | None, bool], T],
) -> T:
    """Decide from the copy held, and again from a fresh read after each write conflict.

    ``once(body, fresh)`` reads observations, decides and writes; ``fresh``
    says the copy was just read from the API server. An unexpected error is
    put on the object (`reported`) and raised for the caller's backoff.
    """

    def one_round(round_: int) -> T:
        body = mem.body.get() if round_ == 0 else None
        fresh = body is None
        if body is None:
            body = fetch()
            mem.body.set(body)
        return once(body, fresh)

    return reported(
        kube,
        mem.failing,
        mem.body.get,
        mem.body.set,
        plural,
        lambda: until_settled(one_round, what),
    )


def describe(exc: BaseException) -> str:
    """One line for people: the error's type and what it said, clipped.

    An API error's own first line is only "(403)"; what the server said
    (e.g. which quota a Pod exceeded) is in its body, so that is used.
    """
    said = _api_message(exc) or str(exc)
    text = f"{type(exc).__name__}: {said}".splitlines()[0] if said else type(exc).__name__
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _api_message(exc: BaseException) -> str | None:
    """The ``message`` of the Status an API server answered with, if ``exc`` carries one."""
    body = getattr(exc, "body", None)
    if not isinstance(body, str | bytes) or not body:
        return None
    try:
        status = json.loads(body)
    except ValueError:
        return None
    message = status.get("message") if isinstance(status, dict) else None
    return message if isinstance(message, str) and message else None


def failure_conditions(
    conditions: list[dict[str, Any]], message: str | None, reason: str, stamp: str
) -> list[dict[str, Any]] | None:
    """``conditions`` with ReconcileFailed set (True with ``message``, or False when
    ``message`` is None); None when nothing would change."""
    old = next((c for c in conditions if c.get("type") == COND_RECONCILE_FAILED), None)
    value = "True" if message is not None else "False"
    said = message or "The last reconcile succeeded."
    if old is None and value == "False":
        return None  # never failed: nothing to clear
    if old is not None and old.get("status") == value and old.get("message") == said:
        return None
    new = _reconcile_failed(old, value, reason if message is not None else R_RECOVERED, said, stamp)
    kept = [c for c in conditions if c.get("type") != COND_RECONCILE_FAILED]
    return [*kept, new]


def _reconcile_failed(
    old: dict[str, Any] | None, value: str, reason: str, message: str, stamp: str
) -> dict[str, Any]:
    """The ReconcileFailed condition; ``lastTransitionTime`` moves only when its status flips."""
    moved = old is None or old.get("status") != value
    return {
        "type": COND_RECONCILE_FAILED,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp if moved else old.get("lastTransitionTime", stamp),  # type: ignore[union-attr]
    }


def reported(
    kube: Kube,
    failing: Failing,
    body: Callable[[], dict[str, Any] | None],
    remember: Callable[[dict[str, Any]], None],
    plural: str,
    reconcile: Callable[[], T],
) -> T:
    """Run ``reconcile``; an unexpected error is put on the object, then raised for a retry.

    ``body`` gives the freshest copy of the object (after the reconcile ran);
    ``remember`` keeps the copy our condition write returns, so the next
    reconcile starts from it.
    """
    try:
        result = reconcile()
    except Conflict:
        raise
    except Exception as exc:
        message = f"{describe(exc)} (retrying with backoff)"
        if message != failing.message:
            _say(kube, body(), remember, plural, message, type(exc).__name__)
            failing.message = message
        raise
    if failing.message is not None:
        _say(kube, body(), remember, plural, None, "")
        failing.message = None
    return result


def _say(
    kube: Kube,
    obj: dict[str, Any] | None,
    remember: Callable[[dict[str, Any]], None],
    plural: str,
    message: str | None,
    reason: str,
) -> None:
    """Write the condition (and, for a failure, the Event); never raises: this is a report."""
    if obj is None:
        return
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    conditions = failure_conditions(
        list(status.get("conditions") or []), message, reason, fmt_time(datetime.now(UTC))
    )
    try:
        if conditions is not None:
            written = kube.patch_status(
                meta.get("namespace", ""),
                meta.get("name", ""),
                {"conditions": conditions},
                {},
                meta.get("resourceVersion"),  # conditions read from this version
                plural=plural,
            )
            if written is not None:
                remember(written)
        if message is not None:
            kube.post_event(obj, "Warning", COND_RECONCILE_FAILED, message)
    except Exception as exc:  # noqa: BLE001 - the API may be what is failing
        log.warning("Could not report a failed reconcile of %s: %s", meta.get("name"), exc)
