"""A Pod that prints hundreds of megabytes costs the reaper its archive limit, not the log.

The log API is played by `FakeLogApi`, which serves a virtual log (made as it
is read, never held) and honours ``limitBytes`` and ``tailLines`` as the API
server does: a fault injected at the operator's only door to Pod logs.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator

from kinetic_operator.bounded_read import CHUNK, CUT_NOTE, log_archive
from kinetic_operator.kube import Kube
from kubernetes.client.exceptions import ApiException

MB = 1 << 20
LIMIT = 2 * MB


class VirtualLog:
    """``lines`` lines of ``width`` bytes (the last byte a newline), made on demand."""

    def __init__(self, lines: int, width: int) -> None:
        self.lines, self.width = lines, width
        self.served: list[int] = []  # bytes handed out per request

    @property
    def size(self) -> int:
        return self.lines * self.width

    def line(self, n: int) -> bytes:
        text = f"line {n} ".encode()
        if self.width <= len(text):
            return (b"x" * (self.width - 1) + b"\n")[: self.width]
        return text + b"." * (self.width - len(text) - 1) + b"\n"

    def open(self, limit_bytes: int | None, tail_lines: int | None) -> Iterator[bytes]:
        first = 0 if tail_lines is None else max(0, self.lines - tail_lines)
        budget = limit_bytes if limit_bytes is not None else float("inf")
        sent = 0
        self.served.append(0)
        try:
            for n in range(first, self.lines):
                data = self.line(n)
                for at in range(0, len(data), CHUNK):
                    piece = data[at : at + CHUNK]
                    if sent + len(piece) > budget:
                        piece = piece[: int(budget - sent)]
                    if piece:
                        sent += len(piece)
                        yield piece
                    if sent >= budget:
                        return
        finally:
            self.served[-1] = sent


class OneLine(VirtualLog):
    """A single line of ``size`` bytes, streamed in pieces."""

    def __init__(self, size: int) -> None:
        super().__init__(1, size)

    def open(self, limit_bytes: int | None, tail_lines: int | None) -> Iterator[bytes]:
        budget = self.width if limit_bytes is None else min(limit_bytes, self.width)
        sent = 0
        self.served.append(0)
        block = b"y" * CHUNK
        try:
            while sent < budget:
                piece = block[: budget - sent]
                sent += len(piece)
                yield piece
        finally:
            self.served[-1] = sent


def peak(call: Callable[[], bytes]) -> tuple[bytes, int]:
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = call()
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_a_log_that_fits_is_archived_whole_in_one_read() -> None:
    log = VirtualLog(lines=1000, width=100)
    assert log_archive(log.open, LIMIT) == b"".join(log.line(n) for n in range(1000))
    assert log.served == [100_000]


def test_a_300mb_log_keeps_its_end_says_it_was_cut_and_costs_little_memory() -> None:
    log = VirtualLog(lines=3 * MB, width=100)  # 300 MiB
    archive, grew = peak(lambda: log_archive(log.open, LIMIT))
    note = CUT_NOTE.format(limit=LIMIT).encode()
    assert archive.startswith(note) and len(archive) <= LIMIT
    assert b"2,097,152 bytes" in note
    body = archive[len(note) :]
    assert body.endswith(log.line(log.lines - 1))  # the very end is there
    assert body.startswith(b"line ")  # from the start of a line
    assert grew < 4 * LIMIT  # far below the 100 MB the operator may grow by
    # The first read stopped at the limit; the second was the last lines only.
    assert log.served[0] <= LIMIT + CHUNK and log.served[1] <= 10_000 * 100


def test_a_single_300mb_line_keeps_its_last_bytes_in_bounded_memory() -> None:
    log = OneLine(300 * MB)
    archive, grew = peak(lambda: log_archive(log.open, LIMIT))
    note = CUT_NOTE.format(limit=LIMIT).encode()
    assert archive == note + b"y" * (LIMIT - len(note))
    assert grew < 4 * LIMIT


class FakeLogApi:
    """The CoreV1Api's log call, answering with a `VirtualLog` as a raw stream."""

    def __init__(self, log: VirtualLog | None) -> None:
        self.log = log
        self.asked: list[dict[str, object]] = []
        self.closed = 0

    def read_namespaced_pod_log(self, name: str, namespace: str, **kw: object) -> object:
        self.asked.append(kw)
        if self.log is None:
            raise ApiException(status=400, reason="container not started")
        pieces = self.log.open(kw.get("limit_bytes"), kw.get("tail_lines"))  # type: ignore[arg-type]
        api = self

        class Raw:
            def stream(self, amt: int) -> Iterator[bytes]:
                return pieces

            def close(self) -> None:
                api.closed += 1

        return Raw()


def kube_with(log: VirtualLog | None, limit: int = LIMIT) -> tuple[Kube, FakeLogApi]:
    kube = Kube.__new__(Kube)
    api = FakeLogApi(log)
    kube.core = api  # type: ignore[assignment]
    kube.log_limit = limit
    return kube, api


def test_the_operator_asks_for_limit_bytes_then_the_last_lines() -> None:
    kube, api = kube_with(VirtualLog(lines=MB, width=64))
    archive = kube.pod_log("ns", "grp-1-1")
    assert archive is not None and len(archive) <= LIMIT
    assert [(a["limit_bytes"], a["tail_lines"]) for a in api.asked] == [
        (LIMIT + 1, None),
        (None, 10_000),
    ]
    assert api.closed == 2  # neither answer was left open for reuse


def test_a_container_with_no_log_yet_has_nothing_to_archive() -> None:
    kube, _ = kube_with(None)
    assert kube.pod_log("ns", "p") is None
