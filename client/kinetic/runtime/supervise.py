"""The runner's first process: it runs the work in a child and sees every byte it prints.

The container's main process (process 1) forks once, before anything of the
user's is loaded, and the child does the work (download, verify, call,
upload; see `kinetic.runtime.runner`). The child's stdout and stderr are a
pipe that this process reads and writes through to the container's log,
keeping the end of it. Why a second process:

* **The log's end survives the kubelet's rotation.** The kubelet rotates a
  container's log file once it passes a size and serves only the current
  file, so an archive read from the kubelet after a Pod printed a lot can
  lose the end of the log, or all of it. This process saw everything, so it
  archives the end itself (`KINETIC_LOG_URI`, in the format of
  `kinetic.model.logs`) when the child is done.
* **A death is told, not guessed.** A child killed by a signal (the kernel's
  out-of-memory killer, a segfault in C code, `os._exit` in the function)
  leaves this process standing, which says what happened in the termination
  message the operator reads, instead of an empty one.
* **SIGTERM reaches the user's code.** The kernel delivers no signal to
  process 1 that it has no handler for; this process forwards SIGTERM to
  the child, whose default action ends it at once (or whose own handler,
  if the user's code installed one, may save a checkpoint first).

The fork happens before the payload is unpickled, while this process has
imported only the standard library and the runner's own modules and runs no
thread, so it is safe whatever the user's code imports afterwards.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kinetic import storage
from kinetic.model import progress
from kinetic.model.logs import cut_archive
from kinetic.runtime.termination import write_termination_log

READ_SIZE = 1 << 16
DRAIN_SECONDS = 1.0  # once the child has ended: what its own children still print, briefly
POLL_SECONDS = 1.0

_OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


@dataclass
class Tail:
    """The last ``limit`` bytes of a stream, and how many bytes it had in all."""

    limit: int
    pieces: deque[bytes] = field(default_factory=deque)
    size: int = 0
    total: int = 0

    def add(self, data: bytes) -> None:
        self.pieces.append(data)
        self.size += len(data)
        self.total += len(data)
        while self.pieces and self.size - len(self.pieces[0]) >= self.limit:
            self.size -= len(self.pieces.popleft())

    def archive(self) -> bytes:
        """What to store: all of it, or its end after a line saying it was cut."""
        held = b"".join(self.pieces)
        kept = held[-self.limit :] if self.total > self.limit else held
        return cut_archive(kept, self.total, self.limit)


def supervise(
    work: Callable[[], int],
    *,
    log_uri: str | None,
    limit: int,
    termination_log: str | None,
) -> int:
    """Run ``work`` in a child process and return its exit code (128 + the signal that
    killed it), archiving the end of its output to ``log_uri`` when set.

    The child reports its inputs' progress with `report`, on its own output, after a
    token made here before the fork; this process writes each as a marker line
    (`kinetic.model.progress`) in its place, which nothing else the child prints can
    imitate.
    """
    global _TOKEN
    _TOKEN = b"\x00" + secrets.token_hex(16).encode() + b" "
    read_end, write_end = os.pipe()
    oom_before = oom_kills()
    pid = os.fork()
    if pid == 0:  # the child: does the work, prints into the pipe
        os.close(read_end)
        _run_child(work, write_end)
    os.close(write_end)
    signal.signal(signal.SIGTERM, lambda signum, frame: _forward(pid, signum))
    out = Output(Tail(limit), progress.Shield(_TOKEN, _marker))
    status = _relay(read_end, pid, out)
    os.close(read_end)
    code = _exit_code(status)
    if os.WIFSIGNALED(status) or not _termination_written(termination_log):
        why = _death(status, oom_kills() > oom_before)
        out.line(f"kinetic runner: {why}\n".encode())
        if not _termination_written(termination_log):
            write_termination_log(termination_log, f"runner: {why}")
            code = code or 2  # nothing was recorded: not a success, whatever the exit code
    _archive(out.tail, log_uri)
    return code


_TOKEN: bytes | None = None  # set before the fork: the child's progress lines start with it


def report(line: str) -> None:
    """Tell the supervising process about an input (the child's side; a no-op outside a
    supervised child): ``begin <i> <ms>``, ``end <i> ok|failed <ms> <s> [<sha>]`` or
    ``skipped <i> <why>``. Written on the child's own output, after what it printed."""
    if _TOKEN is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream has nothing to flush
            pass
    try:
        os.write(1, _TOKEN + " ".join(line.split()).encode() + b"\n")
    except OSError:
        pass  # nobody to tell


def _marker(message: bytes) -> bytes | None:
    return progress.message(message.decode("ascii", "replace"))


def _run_child(work: Callable[[], int], write_end: int) -> None:
    """The child's whole life: stdout and stderr into the pipe, the work, then exit."""
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    code = 2
    try:
        code = work()
    except SystemExit as stop:  # sys.exit in the user's code (a SIGTERM handler, say)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:  # noqa: BLE001 - whatever escapes, the parent must hear of it
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed stream has nothing to flush
                pass
        os._exit(code)


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


@dataclass
class Output:
    """The container's log as this process writes it: the child's output, shielded (its
    progress messages made markers), and this process's own lines, each from a line start."""

    tail: Tail
    shield: progress.Shield = field(default_factory=progress.Shield)

    def child(self, data: bytes) -> None:
        _say(self.tail, self.shield.feed(data))

    def line(self, text: bytes) -> None:
        """One line of this process's own, after the child's output so far."""
        held = self.shield.flush()  # a line of the child's not ended yet: end it first
        lead = b"" if self.shield.at_line_start else b"\n"
        _say(self.tail, held + lead + text)
        self.shield.at_line_start = True


def _relay(read_end: int, pid: int, out: Output) -> int:
    """Copy the child's output to this process's stdout until it ends; its wait status.

    The pipe may outlive the child (a process it started holds it open), so
    the child's end is watched too: once it has ended, what is still
    printed is read for a moment more, not waited for.
    """
    status: int | None = None
    deadline: float | None = None
    while True:
        timeout = POLL_SECONDS if deadline is None else max(0.0, deadline - _now())
        ready, _, _ = select.select([read_end], [], [], timeout)
        if ready:
            data = os.read(read_end, READ_SIZE)
            if not data:
                break
            out.child(data)
        if status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status, deadline = raw, _now() + DRAIN_SECONDS
        elif not ready and _now() >= (deadline or 0.0):
            break
    _say(out.tail, out.shield.flush())
    if status is None:
        _, status = os.waitpid(pid, 0)
    return status


def _say(tail: Tail, data: bytes | str) -> None:
    """Write to the container's log, and keep it in the tail."""
    raw = data.encode() if isinstance(data, str) else data
    if not raw:
        return
    tail.add(raw)
    view = memoryview(raw)
    while view:
        try:
            written = os.write(1, view)
        except BlockingIOError:
            continue
        view = view[written:]


def _now() -> float:
    return time.monotonic()


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 2


def _death(status: int, oom: bool) -> str:
    """What ended the child, in a sentence for the job's message."""
    if oom:
        return (
            "the function's process was killed by the kernel's out-of-memory killer "
            "(OOMKilled): it needed more memory than the Pod may use; raise resources.memory"
        )
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"the function's process was killed by {name} (signal {number})"
    code = _exit_code(status)
    return (
        f"the function's process exited with code {code} before the runner recorded an "
        "outcome (os._exit or a crash in the function?)"
    )


def _termination_written(path: str | None) -> bool:
    """Whether the child left a termination message (a normal end always does)."""
    if path is None:
        return True  # nowhere to look, nowhere to write: say nothing more there
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def oom_kills() -> int:
    """How many processes the kernel's OOM killer ended in this container's memory cgroup
    (v2 `memory.events`, v1 `memory.oom_control`); 0 where neither can be read."""
    for path in _OOM_COUNTERS:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return 0


def _archive(tail: Tail, uri: str | None) -> None:
    """Store the end of the log (best effort: the operator archives what the kubelet has
    when this is missing)."""
    if uri is None:
        return
    try:
        storage.write_bytes(uri, tail.archive())
    except (storage.StorageError, ValueError) as exc:
        _say(tail, f"kinetic runner: could not archive the log to {uri}: {exc}\n")
