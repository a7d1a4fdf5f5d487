"""The event plumbing KineticJobs and KineticBatches share: from a watch event to a reconcile.

Both kinds are level-triggered the same way. An event about the object, or
about one of its attempt Pods, only names the object; `Kind.reconcile`
then runs one reconcile of it in a worker thread (the API calls block),
serialized per object through the operator's one `Serializer`, so a burst
of events costs a reconcile or two and no two reconciles of an object
overlap. Afterwards it hands the reaper the finished Pods the reconcile
found due, and schedules the one timed look the reconcile asked for.

What differs between the kinds — how a Pod names its owner, what the
memory of an object holds, what a reconcile observes and does — is a
`Kind`'s fields; each handler module declares its kind once and its Kopf
handlers are one-line calls into it. Everything kept lives in the objects
and in Kopf's memo (`kinetic_operator.state.operator_state`), never in
module globals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import kopf

from kinetic_operator import metrics
from kinetic_operator.failures import Failing
from kinetic_operator.handlers.policy import current_policy
from kinetic_operator.kube import Kube
from kinetic_operator.logic.observed import PodView
from kinetic_operator.logic.policy import Policy
from kinetic_operator.reaper import Due
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.state import Fresh, OperatorState, operator_state

Key = tuple[str, str]  # (namespace, name)
STRANGER_REPORT_SECONDS = 60.0  # one Event a minute per object about Pods not the operator's


def made_again(uids: dict[tuple[str, str], str], view: PodView) -> str | None:
    """The UID of the Pod first seen under ``view``'s name for its owner, when ``view`` is
    another Pod (one made again under that name, with the seal copied); None when ``view``
    is that first Pod, or the first seen (``uids`` then remembers it).

    Per owner: a job deleted and created again under its name makes its Pods under the
    same names, and the old Pods' last events may come after the new object's first. Kept
    by name alone, the old Pod's UID made the new job's own Pod a stranger, and the job
    waited for it for good.
    """
    first = uids.setdefault((view.owner_uid or "", view.name), view.uid or "")
    return first if view.uid and first and first != view.uid else None


@dataclass
class ObjectMemory:
    """What the operator keeps of any one object and the shared plumbing uses.

    The freshest copy of the object (the watch's, or the answer to our own
    last write), the error last reported for it, and its finished Pods: the
    ones a reconcile found due for deletion (handed to the reaper after it)
    and the ones the reaper is at already (so the reconcile skips them).
    """

    body: Fresh = field(default_factory=Fresh)
    failing: Failing = field(default_factory=Failing)  # the error last reported, if any
    # (owner UID, Pod name) -> the Pod UID seen first (`made_again`)
    uids: dict[tuple[str, str], str] = field(default_factory=dict)
    warned_at: float | None = None  # when a Pod that is not ours was last reported
    due: list[Due] = field(default_factory=list)  # Pods to reap now
    reaping: set[str] = field(default_factory=set)


@dataclass
class Wake:
    """The earliest timed look pending for one object (event-loop time), if any.

    A busy object asks for a look after nearly every reconcile; keeping the
    earliest pending one means those asks cost one timer, not one each.
    """

    at: float | None = None


Mem = TypeVar("Mem", bound=ObjectMemory)
Seen = TypeVar("Seen")  # what a reconcile observes of the object's Pods

Reconcile = Callable[[Kube, OperatorSettings, Mem, str, str, Seen, Policy], float | None]


@dataclass(frozen=True)
class Kind(Generic[Mem, Seen]):
    """How the shared plumbing reconciles one kind of object.

    ``name`` prefixes the object's key for the serializer and the reaper.
    ``pod_of`` names the object an attempt Pod belongs to, with its summary
    (None for a Pod this kind does not follow); ``saw_pod`` keeps what a Pod
    event tells the memory (a creation seen, a tombstone). ``observe`` turns
    the index's Pods and the memory into what ``reconcile`` decides from;
    ``reconcile`` runs one reconcile in a worker thread and returns in how
    many seconds to look again. ``wake`` is where the earliest pending look
    is kept; without it, every look asked for is scheduled.
    """

    name: str
    metric: str
    memories: Callable[[OperatorState], dict[Key, Mem]]
    new_memory: Callable[[], Mem]
    pod_of: Callable[[Mapping[str, Any]], tuple[Key, PodView] | None]
    saw_pod: Callable[[Mem, PodView, bool], None]
    observe: Callable[[Iterable[PodView], Mem], Seen]
    reconcile_sync: Reconcile[Mem, Seen]
    wake: Callable[[Mem], Wake] | None = None

    def memory(self, memo: Any, key: Key) -> Mem:
        """What the operator remembers of object ``key`` (made on first use)."""
        return self.memories(operator_state(memo)).setdefault(key, self.new_memory())

    def forget(self, memo: Any, key: Key) -> None:
        """The object is gone: nothing remembered of it applies any more."""
        self.memories(operator_state(memo)).pop(key, None)

    def index_entry(self, body: Mapping[str, Any], memo: Any) -> dict[Key, PodView]:
        """The index's entry for a Pod: its summary under its object, if this kind follows it
        and the operator made it (`stranger`)."""
        found = self.pod_of(body)
        if found is None:
            return {}
        key, view = found
        if self.stranger(memo, key, body, view) is not None:
            return {}
        return {key: view}

    def stranger(self, memo: Any, key: Key, body: Mapping[str, Any], view: PodView) -> str | None:
        """Why a Pod with the object's labels is not the operator's (None: it is).

        Its seal must be the operator's (`kinetic_operator.logic.seal`), or it must be
        the previous version's, made before sealing began; and it must be the
        first Pod seen under its name: one made again under the name of a Pod
        the operator made (with the seal copied) has another UID.
        """
        sealer = operator_state(memo).kube.sealer
        verdict = sealer.verdict(body) if sealer is not None else "sealed"
        if verdict == "stranger":
            return f"Pod {view.name} has this {self.name}'s labels but not the operator's seal"
        first = made_again(self.memory(memo, key).uids, view)
        if first is not None:
            return (
                f"Pod {view.name} was made again under the name of a Pod the operator made "
                f"(UID {view.uid}, not {first})"
            )
        return None

    async def object_event(
        self, type_: str, key: Key, body: Mapping[str, Any], index: kopf.Index, memo: Any
    ) -> None:
        """The object was created or changed: reconcile it. Deleted: forget it."""
        if type_ == "DELETED":
            self.forget(memo, key)
            return
        self.memory(memo, key).body.offer(dict(body))
        await self.reconcile(key, index, memo)

    async def pod_event(
        self, type_: str, body: Mapping[str, Any], index: kopf.Index, memo: Any
    ) -> None:
        """One of the object's Pods changed or went away: reconcile the object."""
        found = self.pod_of(body)
        if found is None:
            return
        key, view = found
        deleted = type_ == "DELETED"
        if deleted and key not in self.memories(operator_state(memo)):
            return  # its object is gone (garbage collection): nothing to reconcile
        why = self.stranger(memo, key, body, view)
        if why is not None:
            if not deleted:
                await self.report_stranger(memo, key, why)
            return  # it changes nothing: not counted, not followed, never deleted as ours
        self.saw_pod(self.memory(memo, key), view, deleted)
        await self.reconcile(key, index, memo)

    async def report_stranger(self, memo: Any, key: Key, why: str) -> None:
        """A Warning Event on the object a Pod pretends to belong to, at most one a minute."""
        mem = self.memories(operator_state(memo)).get(key)
        owner = mem.body.get() if mem is not None else None
        now = asyncio.get_running_loop().time()
        if (
            mem is None
            or owner is None
            or (mem.warned_at is not None and now - mem.warned_at < STRANGER_REPORT_SECONDS)
        ):
            return
        mem.warned_at = now
        message = (
            f"{why}: it is ignored. It cannot change this {self.name}'s outcome and the "
            "operator will not delete it; whoever may create Pods in this namespace made it."
        )
        kube = operator_state(memo).kube
        await asyncio.to_thread(kube.post_event, owner, "Warning", "ForeignPod", message)

    async def reconcile(self, key: Key, index: kopf.Index, memo: Any) -> None:
        """Bring object ``key`` one step closer to done; serialized per object."""
        look = _Look(self, key, index, memo)
        await operator_state(memo).serializer.run(look.owner, look.work)


@dataclass
class _Look(Generic[Mem, Seen]):
    """One trigger's reconcile of one object, as the serializer runs it.

    The index is read on the event loop (where Kopf updates it) and handed
    to the worker thread as an immutable snapshot.
    """

    kind: Kind[Mem, Seen]
    key: Key
    index: kopf.Index
    memo: Any

    @property
    def owner(self) -> tuple[str, str, str]:
        """The object's key for the serializer and the reaper."""
        return (self.kind.name, *self.key)

    async def work(self) -> None:
        """Reconcile once; then reap what is due and schedule the look asked for."""
        state = operator_state(self.memo)
        mem = self.kind.memory(self.memo, self.key)
        mem.reaping = set(state.reaper.in_flight(self.owner))
        observed = self.kind.observe(self.index.get(self.key, ()), mem)
        with metrics.reconcile_timer(self.kind.metric):
            recheck = await asyncio.to_thread(
                self.kind.reconcile_sync,
                state.kube,
                state.settings,
                mem,
                *self.key,
                observed,
                current_policy(self.memo),
            )
        if mem.body.get() is None:  # the object is gone: forget it
            self.kind.forget(self.memo, self.key)
            return
        state.reaper.submit(state.kube, self.owner, self.key[0], mem.due)
        if recheck is not None:
            self.look_again(mem, recheck)

    def look_again(self, mem: Mem, delay: float) -> None:
        """Schedule a look in ``delay`` seconds, unless an earlier one is pending."""
        serializer = operator_state(self.memo).serializer
        if self.kind.wake is None:
            serializer.later(self.owner, self.work, delay)
            return
        now = asyncio.get_running_loop().time()
        wake, at = self.kind.wake(mem), now + delay
        if wake.at is None or at < wake.at - 0.01 or wake.at < now:
            wake.at = at
            serializer.later(self.owner, self.woken, delay)

    async def woken(self) -> None:
        """The look scheduled: it is no longer pending once it runs."""
        assert self.kind.wake is not None
        self.kind.wake(self.kind.memory(self.memo, self.key)).at = None
        await self.work()
