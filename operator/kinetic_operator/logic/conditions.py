"""Ready, Reconciling and Stalled: the conditions GitOps tools read, the same on both kinds.

Flux and anything else built on kstatus judge a custom resource by these
three, together with ``status.observedGeneration``: Reconciling=True means
"still working" (pending or running), Stalled=True means "will not get
there without a change" (failed, invalid or cancelled), Ready=True means
done and successful. Exactly one of them is True at any time. Running,
Complete and Failed stay alongside for ``kubectl wait`` users; each kind
builds those itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from kinetic.model.resources import Condition, Phase

__all__ = [
    "COND_READY",
    "COND_RECONCILING",
    "COND_STALLED",
    "READINESS",
    "R_IN_PROGRESS",
    "readiness",
]

COND_READY, COND_RECONCILING, COND_STALLED = "Ready", "Reconciling", "Stalled"
R_IN_PROGRESS = "InProgress"

_TRUE_IN: dict[str, tuple[Phase, ...]] = {
    COND_READY: (Phase.SUCCEEDED,),
    COND_RECONCILING: (Phase.PENDING, Phase.RUNNING),
    COND_STALLED: (Phase.FAILED, Phase.CANCELLED),
}

READINESS = frozenset(_TRUE_IN)
"""The condition types `readiness` owns."""


def readiness(
    old: Sequence[Condition], phase: Phase, reason: str, message: str | None, stamp: str
) -> list[Condition]:
    """The three conditions for ``phase``; ``lastTransitionTime`` moves only on a flip.

    ``reason`` is the one-word cause of the current state (e.g. ``Running``,
    ``InputsFailed``, ``InvalidSpec``); a condition that is False while the
    object is still in progress says ``InProgress`` instead. The one True
    condition carries ``message``.
    """
    before = {c.type: c for c in old}
    out: list[Condition] = []
    for ctype, phases in _TRUE_IN.items():
        value: Literal["True", "False"] = "True" if phase in phases else "False"
        prev = before.get(ctype)
        moved = prev is None or prev.status != value
        in_progress = value == "False" and not phase.terminal
        out.append(
            Condition(
                type=ctype,
                status=value,
                reason=R_IN_PROGRESS if in_progress else reason,
                message=message if value == "True" else None,
                last_transition_time=stamp if moved or prev is None else prev.last_transition_time,
            )
        )
    return out
