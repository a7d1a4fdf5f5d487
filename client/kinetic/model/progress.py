"""How a unit Pod says, in its own log, where each of its inputs stands. Pure.

A unit runs several inputs of a batch one after another (`kinetic.runtime.runner`).
Its inputs' outcomes must reach the batch while the unit still runs, through
a channel tied to that Pod, which no one else can write: the Pod's own log, as
the API server serves it to the operator. So the runner's first process (the
one that supervises the work, `kinetic.runtime.supervise`) writes one line per
event, each starting with `PREFIX`:

    kinetic-unit/1 <index> begin <unix ms>
    kinetic-unit/1 <index> end <ok|failed> <unix ms> <seconds> [<sha256> [<bytes>]]
    kinetic-unit/1 <index> skipped <why>

``end`` carries how long the input ran (by the Pod's clock) and the SHA-256 of
the result bytes it stored, when it stored any (the digest the client checks
before unpickling). ``skipped``: the unit stopped before that input began
(the batch stopped launching). A unit that dies mid-input says nothing more
about it: the input that began and did not end is the one the death charges.

Only the supervising process writes these lines. The user's code runs in its
child, whose output passes through the supervisor on its way to the log: a
line of theirs that starts with `PREFIX` gets a space in front of it
(`Shield`), so nothing the user's code prints (an input echoed, say) is read
as a marker. The runner in the child tells the supervisor of each event on a
line of the same output that starts with a random token the supervisor made
before the child existed (so the marker lands exactly between the input's own
lines), and the supervisor writes the marker in its place.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kinetic.model.ranges import IndexSet

PREFIX = b"kinetic-unit/1 "

Event = Literal["begin", "end", "skipped"]

_LINE = re.compile(
    rb"^kinetic-unit/1 (?P<index>\d{1,9}) (?P<event>begin|end|skipped)"
    rb"(?: (?P<rest>[ -~]{0,600}))?$"
)
_END = re.compile(
    r"^(?P<outcome>ok|failed) (?P<at>\d{1,16}) (?P<seconds>\d{1,9}(?:\.\d{1,6})?)"
    r"(?: (?P<sha>[0-9a-f]{64})(?: (?P<size>\d{1,15}))?)?$"
)
_BEGIN = re.compile(r"^(?P<at>\d{1,16})$")


@dataclass(frozen=True)
class Mark:
    """One marker line, parsed."""

    index: int
    event: Event
    at_ms: int | None = None  # the Pod's clock, for begin and end
    ok: bool | None = None  # end: whether the input succeeded
    seconds: float | None = None  # end: how long it ran
    sha256: str | None = None  # end: the digest of the result it stored
    size: int | None = None  # end: that result's size in bytes (None from older runners)
    why: str | None = None  # skipped: why


def begin(index: int, at_ms: int) -> bytes:
    return PREFIX + f"{index} begin {at_ms}\n".encode()


def end(
    index: int, ok: bool, at_ms: int, seconds: float, sha256: str | None, size: int | None = None
) -> bytes:
    digest = f" {sha256}" if sha256 else ""
    if sha256 and size is not None:
        digest += f" {size}"
    outcome = "ok" if ok else "failed"
    return PREFIX + f"{index} end {outcome} {at_ms} {seconds:.3f}{digest}\n".encode()


def skipped(index: int, why: str) -> bytes:
    text = " ".join(why.split())[:200]
    return PREFIX + f"{index} skipped {text}\n".encode("ascii", "replace")


def parse(line: bytes) -> Mark | None:
    """The marker on ``line`` (without its newline), or None when it is none."""
    found = _LINE.match(line.rstrip(b"\r"))
    if found is None:
        return None
    index, event = int(found["index"]), found["event"].decode()
    rest = (found["rest"] or b"").decode("ascii")
    if event == "begin":
        at = _BEGIN.match(rest)
        return Mark(index, "begin", at_ms=int(at["at"])) if at else None
    if event == "skipped":
        return Mark(index, "skipped", why=rest or None)
    ended = _END.match(rest)
    if ended is None:
        return None
    return Mark(
        index,
        "end",
        at_ms=int(ended["at"]),
        ok=ended["outcome"] == "ok",
        seconds=float(ended["seconds"]),
        sha256=ended["sha"],
        size=int(ended["size"]) if ended["size"] else None,
    )


def marks(log: bytes) -> list[Mark]:
    """Every marker in a stretch of log, in order (lines that are not markers skipped)."""
    found = []
    for line in log.split(b"\n"):
        if line.startswith(PREFIX):
            mark = parse(line)
            if mark is not None:
                found.append(mark)
    return found


def section(log: str, index: int) -> str:
    """Input ``index``'s part of its unit's log: from its begin mark to its end (or skip)
    mark, both included, for each time it ran there; '' when it has none."""
    begin_mark = f"{PREFIX.decode()}{index} begin "
    end_marks = (f"{PREFIX.decode()}{index} end ", f"{PREFIX.decode()}{index} skipped")
    out: list[str] = []
    inside = False
    for line in log.splitlines(keepends=True):
        if line.startswith(begin_mark):
            inside = True
        if inside or line.startswith(end_marks):  # a skip has no begin: its line alone
            out.append(line)
            if line.startswith(end_marks):
                inside = False
    return "".join(out)


class Shield:
    """Relays the child's output to the log: a line of the user's that starts like a
    marker gets a space in front of it, and a line that starts with ``token`` (the
    runner's own progress message, which only the runner knows how to start) becomes the
    marker ``convert`` makes of it, at that very place in the output. Pieces of output may
    split lines anywhere; ``at_line_start`` says whether the output stands at a line start.
    """

    def __init__(
        self, token: bytes | None = None, convert: Callable[[bytes], bytes | None] = lambda _: None
    ) -> None:
        self.token = token
        self.convert = convert
        self.held = b""  # the start of a line not yet long enough to judge
        self.at_line_start = True

    def feed(self, data: bytes) -> bytes:
        """What to write for ``data``: the same bytes, shielded, messages made marks."""
        out = bytearray()
        data = self.held + data
        self.held = b""
        pos = 0
        while pos < len(data):
            if self.at_line_start:
                taken = self._line_start(data, pos, out)
                if taken is None:
                    return bytes(out)  # held back until more comes
                pos = taken
                if self.at_line_start:
                    continue  # a whole message line was taken
            newline = data.find(b"\n", pos)
            if newline < 0:
                out += data[pos:]
                self.at_line_start = False
                return bytes(out)
            out += data[pos : newline + 1]
            pos = newline + 1
            self.at_line_start = True
        return bytes(out)

    def _line_start(self, data: bytes, pos: int, out: bytearray) -> int | None:
        """At a line start: a message taken whole, a line that looks like a marker
        shielded, or None (and the rest held) when it is too short to tell."""
        rest = data[pos:]
        token = self.token
        if token and (rest.startswith(token) or token.startswith(rest[: len(token)])):
            newline = rest.find(b"\n")
            if newline < 0 and len(rest) < MAX_MESSAGE:
                self.held = rest
                return None
            if rest.startswith(token) and newline >= 0:
                out += self.convert(rest[len(token) : newline]) or b""
                return pos + newline + 1
        head = rest[: len(PREFIX)]
        if len(head) < len(PREFIX) and PREFIX.startswith(head) and b"\n" not in head:
            self.held = rest
            return None
        if head == PREFIX:
            out += b" "
        self.at_line_start = False
        return pos

    def flush(self) -> bytes:
        """Whatever was held back: the output ended (or a line must be written now)."""
        held, self.held = self.held, b""
        if held:
            self.at_line_start = False
        return held


MAX_MESSAGE = 1024  # a progress message is one short line


def message(line: str) -> bytes | None:
    """The marker for one progress message of the runner's (``begin <i> <ms>``, ``end <i>
    ok|failed <ms> <seconds> [<sha> [<bytes>]]``, ``skipped <i> <why>``), or None if
    malformed."""
    parts = line.split(" ")
    try:
        if parts[0] == "begin" and len(parts) == 3:
            return begin(int(parts[1]), int(parts[2]))
        if parts[0] == "end" and len(parts) in (5, 6, 7):
            sha = parts[5] if len(parts) >= 6 else None
            size = int(parts[6]) if len(parts) == 7 else None
            return end(int(parts[1]), parts[2] == "ok", int(parts[3]), float(parts[4]), sha, size)
        if parts[0] == "skipped" and len(parts) >= 2:
            return skipped(int(parts[1]), " ".join(parts[2:]))
    except ValueError:
        return None
    return None


# --------------------------------------------------------------------------- stop orders


@dataclass(frozen=True)
class StopOrder:
    """What the operator asks a batch's running units, through one object in the batch's
    storage (`kinetic.model.layout.Home.stop_uri`) that each unit reads before an input:
    start nothing more (``everything``: a cancel or a fail-fast), or skip the inputs
    cancelled one by one.

    It travels through storage, which others may write, so it can only ever make a unit
    do less: a unit that skipped an input it should have run is a disruption the
    operator bounds and runs again.
    """

    everything: bool = False
    cancelled: IndexSet = IndexSet()

    def text(self) -> bytes:
        if self.everything:
            return b"stop all\n"
        return f"stop cancelled {self.cancelled}\n".encode()

    @classmethod
    def parse(cls, data: bytes) -> StopOrder:
        """The order in ``data``; anything unreadable stops everything (the cautious side:
        the operator runs what it should not have skipped again)."""
        words = data.decode("ascii", "replace").split()
        if words[:2] == ["stop", "cancelled"] and len(words) <= 3:
            try:
                return cls(cancelled=IndexSet.parse(words[2] if len(words) == 3 else ""))
            except ValueError:
                pass
        return cls(everything=True)

    def skips(self, index: int) -> str | None:
        """Why input ``index`` must not begin (None: it may)."""
        if self.everything:
            return "the batch stopped launching inputs"
        return "this input was cancelled" if index in self.cancelled else None
