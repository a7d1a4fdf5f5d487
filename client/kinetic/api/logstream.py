"""`result(stream_logs=True)`: a job's logs on the terminal while the caller waits for it.

A job runs as one Pod per attempt, so following "the job's log" means
following each attempt's Pod in turn, from its first line, as it appears
(of a multi-host attempt, rank 0's Pod: the coordinator, whose result is the job's).
A thread does that while the caller's thread waits on the job; when the
job has ended, the thread finishes the Pods it has not printed yet and
stops. A job whose Pods are already gone (it ended before we looked) has
its archived log printed instead, so the user always sees the output once.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from kinetic.model import names

if TYPE_CHECKING:
    from kubernetes.client import V1Pod

    from kinetic.api.kube import KubeClient


class Followed(Protocol):
    """The job whose logs are followed: a `kinetic.api.handle.JobHandle` (above this module:
    its `tail` makes a `LogFollower`), as far as following reads it."""

    namespace: str

    @property
    def _kube(self) -> KubeClient: ...

    def logs(self) -> str | None: ...

    def _live_pods(self) -> list[V1Pod]: ...


_POLL = 0.5  # seconds between looks for the next attempt's Pod
_DRAIN = 30.0  # most seconds to finish printing once the job has ended


class LogFollower:
    """Prints every attempt Pod's log of `handle` to `out` until the job ends (a context)."""

    def __init__(self, handle: Followed, out: TextIO | None = None) -> None:
        self.handle = handle
        self.out = out or sys.stdout
        self._done = threading.Event()
        self._printed: set[str] = set()
        self._abandoned = threading.Event()
        self._resp: Any = None  # the log stream being read, closed when abandoned
        self._thread = threading.Thread(target=self._run, name="kinetic-logs", daemon=True)

    def __enter__(self) -> LogFollower:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        if exc_type is None:
            self._thread.join(_DRAIN)
            return
        # After a timeout or Ctrl-C the job still runs: stop printing now, not when it ends.
        self._abandoned.set()
        resp = self._resp
        if resp is not None:
            resp.close()

    def _run(self) -> None:
        try:
            while not self._abandoned.is_set():
                ending = self._done.is_set()
                for pod in self._unprinted():
                    if not self._started(pod) or self._abandoned.is_set():
                        break  # later attempts cannot have started before this one
                    self._follow(pod.metadata.name)
                if ending:
                    break
                self._done.wait(_POLL)
            if not self._printed and not self._abandoned.is_set():
                self._write(self.handle.logs() or "")  # its Pods were gone: the archive
        except Exception as e:  # logs are a convenience: never break result collection
            if not self._abandoned.is_set():
                self._write(f"[kinetic] stopped streaming logs: {type(e).__name__}: {e}\n")

    def _unprinted(self) -> list[V1Pod]:
        """Attempt Pods not printed yet; of a multi-host attempt, rank 0's only (whose result
        is the job's): N logs in turn would not read as one; `logs(rank=i)` has the others."""
        pods = self.handle._live_pods()
        return [p for p in pods if p.metadata.name not in self._printed and _is_rank_0(p)]

    @staticmethod
    def _started(pod: V1Pod) -> bool:
        return bool(pod.status) and pod.status.phase in ("Running", "Succeeded", "Failed")

    def _follow(self, pod: str) -> None:
        """Print one Pod's log from its first line until its container ends."""
        from kubernetes.client import ApiException

        try:
            resp = self.handle._kube.follow_log(pod, self.handle.namespace)
        except ApiException:
            return  # not readable yet (or just deleted): the next look tries again
        self._printed.add(pod)
        self._resp = resp
        try:
            for chunk in resp.stream(amt=4096, decode_content=True):
                if self._abandoned.is_set():
                    return
                self._write(chunk.decode(errors="replace"))
        finally:
            self._resp = None
            resp.release_conn()

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()


def _is_rank_0(pod: V1Pod) -> bool:
    """A single-host attempt's Pod (no rank label), or a gang's rank 0."""
    return (pod.metadata.labels or {}).get(names.LABEL_RANK, "0") == "0"


def last_lines(text: str, n: int | None) -> str:
    """The last `n` lines of `text` (all of it for None), line endings kept."""
    if n is None:
        return text
    if n <= 0:
        return ""
    return "".join(text.splitlines(keepends=True)[-n:])
