"""What a unit Pod writes in its log about each input, and what the operator reads back:
markers, the shield that keeps user output from forging them, each input's section of
the log, and the stop order travelling the other way."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kinetic.model import progress
from kinetic.model.progress import Mark, Shield, StopOrder
from kinetic.model.ranges import IndexSet

TOKEN = b"f00dfeed0123456789abcdef "
SHA = "c" * 64


def relay(pieces: list[bytes]) -> bytes:
    """The log a supervisor writes for the child's output arriving in these pieces."""
    shield = Shield(TOKEN, lambda text: progress.message(text.decode()))
    return b"".join(shield.feed(p) for p in pieces) + shield.flush()


# --------------------------------------------------------------------------- markers


@pytest.mark.parametrize(
    ("line", "mark"),
    [
        (progress.begin(7, 1700), Mark(7, "begin", at_ms=1700)),
        (
            progress.end(7, True, 1900, 0.2, SHA),
            Mark(7, "end", at_ms=1900, ok=True, seconds=0.2, sha256=SHA),
        ),
        (progress.end(8, False, 1900, 1.5, None), Mark(8, "end", at_ms=1900, ok=False,
                                                          seconds=1.5)),
        (
            progress.end(7, True, 1900, 0.2, SHA, 4096),
            Mark(7, "end", at_ms=1900, ok=True, seconds=0.2, sha256=SHA, size=4096),
        ),
        (
            progress.message(f"end 7 ok 1900 0.2 {SHA} 12") or b"",
            Mark(7, "end", at_ms=1900, ok=True, seconds=0.2, sha256=SHA, size=12),
        ),
        (progress.skipped(9, "was cancelled"), Mark(9, "skipped", why="was cancelled")),
    ],
)  # fmt: skip
def test_each_marker_reads_back_as_written(line: bytes, mark: Mark) -> None:
    assert progress.parse(line.rstrip(b"\n")) == mark


@pytest.mark.parametrize(
    "line",
    [
        b"kinetic-unit/1 7 begin",  # no time
        b"kinetic-unit/1 7 end maybe 1 0.2",
        b"kinetic-unit/1 x begin 1",
        b"kinetic-unit/1 7 end ok 1 0.2 " + b"z" * 64,  # not a digest
        b"kinetic-unit/1 7 end ok 1 0.2 12",  # a size with no digest
        b"kinetic-unit/1 7 end ok 1 0.2 " + SHA.encode() + b" -3",
        b" kinetic-unit/1 7 begin 1",  # shielded: a user's line
    ],
)
def test_what_is_not_a_well_formed_marker_is_none(line: bytes) -> None:
    assert progress.parse(line) is None


# --------------------------------------------------------------------------- the shield


def test_the_runners_messages_become_markers_where_they_were_said() -> None:
    log = relay(
        [b"hello\n", TOKEN + b"begin 3 1000\n", b"working on 3\n", TOKEN + b"end 3 ok 1200 0.2\n"]
    )
    assert log.splitlines() == [
        b"hello",
        b"kinetic-unit/1 3 begin 1000",
        b"working on 3",
        b"kinetic-unit/1 3 end ok 1200 0.200",
    ]


def test_a_users_line_that_looks_like_a_marker_is_shielded() -> None:
    log = relay([b"kinetic-unit/1 4 end ok 1 0.1\n", b"kinetic-un", b"it/1 5 begin 2\n"])
    assert progress.marks(log) == []
    assert log.splitlines() == [b" kinetic-unit/1 4 end ok 1 0.1", b" kinetic-unit/1 5 begin 2"]


@given(
    st.lists(st.binary(max_size=60), max_size=12),
    st.lists(st.integers(min_value=1, max_value=40), max_size=10),
)
def test_no_user_output_however_cut_becomes_a_marker(chunks: list[bytes], cuts: list[int]) -> None:
    """Whatever the user prints, split wherever the pipe splits it, yields no marker (the
    token is the supervisor's secret: the user's output never starts with it)."""
    text = b"".join(chunks).replace(TOKEN, b"")
    text = text.replace(b"\n", b"\nkinetic-unit/1 1 begin 5\n")  # bait on every line
    pieces, at = [], 0
    for cut in cuts:
        pieces.append(text[at : at + cut])
        at += cut
    pieces.append(text[at:])
    log = relay(pieces)
    assert progress.marks(log) == []
    assert log.replace(b"\n ", b"\n").lstrip(b" ") == text.replace(b"\n ", b"\n").lstrip(b" ")


# --------------------------------------------------------------------------- sections


def test_each_input_reads_its_own_part_of_the_units_log() -> None:
    log = relay(
        [
            b"setting up\n",
            TOKEN + b"begin 0 1\n",
            b"zero says hi\n",
            TOKEN + b"end 0 ok 2 0.1\n",
            TOKEN + b"begin 1 3\n",
            b"one says hi\n",
            TOKEN + b"end 1 failed 4 0.1\n",
            TOKEN + b"skipped 2 this input was cancelled\n",
        ]
    ).decode()
    one = progress.section(log, 1)
    assert "one says hi" in one and "zero says hi" not in one and "setting up" not in one
    assert progress.section(log, 2).startswith("kinetic-unit/1 2 skipped")
    assert progress.section(log, 3) == ""


# --------------------------------------------------------------------------- stop orders


@pytest.mark.parametrize(
    ("order", "skips"),
    [
        (StopOrder(everything=True), {0: True, 5: True}),
        (StopOrder(cancelled=IndexSet([3, 4, 9])), {0: False, 3: True, 9: True, 10: False}),
        (StopOrder(), {0: False}),
    ],
)
def test_a_stop_order_reads_back_as_written(order: StopOrder, skips: dict[int, bool]) -> None:
    again = StopOrder.parse(order.text())
    assert again == order
    assert {i: again.skips(i) is not None for i in skips} == skips


@pytest.mark.parametrize("data", [b"", b"stop", b"halt now", b"stop cancelled 3-x", b"\xff\xfe"])
def test_an_order_no_one_can_read_stops_everything(data: bytes) -> None:
    """The cautious side: the operator runs again what was skipped and should not have been."""
    assert StopOrder.parse(data).everything
