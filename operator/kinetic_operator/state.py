"""What the operator keeps in memory between reconciles: caches, never the truth.

The truth is in the resources (status), their Pods and storage. What is
kept here only saves reads and tells a lagging watch from a deletion; after
a restart Kopf lists everything again and each object is reconciled from
scratch. It lives in Kopf's operator-wide ``memo`` (set up at start-up), so
handlers of every resource share it without module globals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kinetic_operator.kube import Kube
from kinetic_operator.reaper import Reaper
from kinetic_operator.serial import Serializer
from kinetic_operator.settings import OperatorSettings


def _version(body: dict[str, Any] | None) -> int | None:
    raw = ((body or {}).get("metadata") or {}).get("resourceVersion")
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


@dataclass
class Fresh:
    """The freshest copy of one object seen so far: from its watch or our own writes.

    A copy may still be behind the API server; every write made from it is
    conditional on its resourceVersion, so a stale copy costs one retry,
    never a wrong action. Versions are compared as numbers only to prefer
    the newer of two copies (a heuristic: if it is ever wrong, the
    conditional write catches it).
    """

    body: dict[str, Any] | None = None

    def offer(self, body: dict[str, Any] | None) -> None:
        """Keep ``body`` unless the copy held is newer."""
        held, new = _version(self.body), _version(body)
        if held is None or new is None or new >= held:
            self.body = body

    def set(self, body: dict[str, Any] | None) -> None:
        """Replace the copy (a fresh read, or the answer to our own write)."""
        self.body = body

    def get(self) -> dict[str, Any] | None:
        return self.body


@dataclass
class OperatorState:
    """Per-object caches for both kinds, the one serializer of reconciles, the reaper of
    finished Pods, and this process's settings and API wrapper (one per operator, in
    Kopf's memo rather than in module-level singletons)."""

    jobs: dict[tuple[str, str], Any] = field(default_factory=dict)
    batches: dict[tuple[str, str], Any] = field(default_factory=dict)
    serializer: Serializer = field(default_factory=Serializer)
    reaper: Reaper = field(default_factory=Reaper)
    settings: OperatorSettings = field(default_factory=OperatorSettings)
    # Called before each write (the elected reconciler's: only the leader writes).
    fence: Callable[[], None] | None = None
    _kube: Kube | None = None

    @property
    def kube(self) -> Kube:
        """The API wrapper, made on first use (by a start-up handler), not with the state:
        `python -m kinetic_operator` makes the state before Kopf runs, and a state made
        for a direct caller (``memo`` None) may never call the API."""
        if self._kube is None:
            self._kube = Kube(fence=self.fence)
            self._kube.log_limit = self.settings.log_archive_bytes
        return self._kube


def operator_state(memo: Any) -> OperatorState:
    """The state in Kopf's memo, made here by whichever start-up handler asks first unless
    `python -m kinetic_operator` put it there; a direct caller (``memo`` None) gets a fresh
    one, read from the environment."""
    state = getattr(memo, "kinetic", None) if memo is not None else None
    if state is None:
        state = OperatorState()
        if memo is not None:
            memo.kinetic = state
    return state
