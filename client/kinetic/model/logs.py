"""How an archived Pod log looks, for every side that writes or reads one.

A Pod's log is archived to storage (`layout.Home.log_uri`) so that handles
can read it after the Pod is gone: by the runner itself for function Pods
(it sees all of its output, whatever the kubelet's log rotation kept), and
by the operator from the kubelet for the rest. Both keep at most a bound of
bytes, the end of the log, and say so on the first line when they cut it.
"""

from __future__ import annotations

LOG_ARCHIVE_BYTES = 2 << 20
"""The default bound of an archived log (the chart's logArchiveBytes can change it)."""

# How a log cut to its end says so, on its first line.
CUT_NOTE = (
    "[kinetic: this log was cut: the Pod wrote more than {limit:,} bytes, the most its "
    "archive keeps; what follows is the end of it]\n"
)


def cut_archive(tail: bytes, total: int, limit: int) -> bytes:
    """The archive of a log of ``total`` bytes whose last bytes are ``tail``: all of it
    when it fits ``limit``, else the cut note and the end of ``tail``, from a line start."""
    if total <= limit and len(tail) == total:
        return tail
    note = CUT_NOTE.format(limit=limit).encode()
    kept = tail[-max(limit - len(note), 0) :] if limit > len(note) else b""
    newline = kept.find(b"\n")
    if 0 <= newline < len(kept) - 1:
        kept = kept[newline + 1 :]  # from the start of a line, not the middle of one
    return note + kept
