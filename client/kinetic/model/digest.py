"""Digests: how the runner reports result hashes, and how readers check what they read.

The runner hashes every result it records and reports the hash where the
storage holding the result cannot change it: a single input in its
termination message (``<summary> bytes=<n> sha256=<hex>``), a chunk in a small
report whose own hash is in its termination message (``"report": "<hex>"``; the
hashes of up to 256 inputs do not fit in 4096 bytes). The operator copies the
hash and the size into the KineticJob's status (``resultSHA256``,
``resultBytes``) or the input's manifest record; the client reads no more than
that size (a result swapped for a huge object costs it nothing) and refuses to
unpickle a result whose bytes differ. Reports of runners that predate sizes
have none: their results are read whole, then checked, as before.

Standard library only: the runner imports it at every Pod start.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import NamedTuple

__all__ = [
    "ResultMismatch",
    "Unverifiable",
    "Reported",
    "sha256",
    "json_sha256",
    "with_sha256",
    "reported_sha256",
    "reported_result",
    "chunk_report",
    "chunk_report_bytes",
    "verify",
]

_SUFFIX = re.compile(r"(?:^|\s)(?:bytes=(\d{1,15})\s+)?sha256=([0-9a-f]{64})\s*$")
SIZES = "bytes"  # a chunk report's key for its inputs' result sizes
_HEX = re.compile(r"^[0-9a-f]{64}$")
MAX_MESSAGE = 4096


class ResultMismatch(Exception):
    """Stored bytes are not what the API server vouches for: never unpickled, never used.

    ``what`` names the object: a ``result`` (whose hash the runner reported), or
    a ``manifest header``, ``manifest shard`` or ``accepted spec`` (whose hash
    the object's status holds). The message names the URI and both hashes.
    """

    def __init__(
        self, uri: str, expected: str | None, actual: str, *, what: str = "result"
    ) -> None:
        self.uri, self.expected, self.actual, self.what = uri, expected, actual, what
        if what == "result":
            if expected is None:
                detail = "no sha256 was recorded for it, so it cannot be checked"
            else:
                detail = f"expected sha256 {expected} (as the runner reported), got {actual}"
            super().__init__(
                f"refusing to unpickle the result at {uri}: {detail}. It was changed or "
                "replaced in storage after the job ended; re-run the job to get a trustworthy "
                "result."
            )
            return
        if expected is None:
            detail = f"nothing records its sha256 (it hashes to {actual}), so it cannot be checked"
        else:
            detail = f"expected sha256 {expected} (as the batch's status records it), got {actual}"
        super().__init__(
            f"refusing to use the {what} at {uri}: {detail}. It was changed or replaced in "
            "storage by something other than the Kinetic operator; the results it vouches for "
            "cannot be trusted: re-run the batch to get trustworthy ones."
        )


class Unverifiable(ResultMismatch):
    """Nothing in the API server vouches for a stored result (e.g. its object is gone).

    ``what`` is what would have been used: ``result`` (unpickled) or a
    container's ``recorded result`` (a string, returned as is).
    """

    def __init__(self, uri: str, why: str, *, what: str = "result") -> None:
        self.uri, self.expected, self.actual, self.what, self.why = uri, None, "", what, why
        verb = "unpickle the result" if what == "result" else f"return the {what}"
        Exception.__init__(self, f"refusing to {verb} at {uri}: {why}")


class Reported(NamedTuple):
    """A stored result as its runner reported it: its hash, and its size in bytes (None from
    a runner that predates sizes)."""

    sha256: str
    size: int | None = None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_sha256(doc: object) -> str:
    """The hex SHA-256 of ``doc`` as canonical JSON (sorted keys, compact, UTF-8)."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return sha256(text.encode())


def with_sha256(
    summary: str, digest: str, limit: int = MAX_MESSAGE, size: int | None = None
) -> str:
    """``summary`` with `` [bytes=<size> ]sha256=<hex>`` appended, the summary cut so that
    both fit ``limit`` bytes. The size goes first: a reader that knows no sizes still finds
    the hash at the end."""
    tail = (f" bytes={size}" if size is not None else "") + f" sha256={digest}"
    room = limit - len(tail)
    line = " ".join(summary.split())
    head = line.encode("utf-8")[:room].decode("utf-8", "ignore")
    return head + tail


def reported_sha256(message: str | None) -> str | None:
    """The hash a single input's termination message reports, or None."""
    found = reported_result(message)
    return found.sha256 if found is not None else None


def reported_result(message: str | None) -> Reported | None:
    """The hash and size a single input's termination message reports, or None."""
    match = _SUFFIX.search(message) if message else None
    if match is None:
        return None
    return Reported(match.group(2), int(match.group(1)) if match.group(1) else None)


def chunk_report(message: str | None) -> str | None:
    """The hash of the report a chunk's termination message names, or None."""
    try:
        doc = json.loads(message or "")
    except ValueError:
        return None
    value = doc.get("report") if isinstance(doc, dict) else None
    return value if isinstance(value, str) and _HEX.match(value) else None


def chunk_report_bytes(hashes: dict[int, Reported]) -> bytes:
    """A chunk report: ``{"<index>": "<hex>", …, "bytes": {"<index>": <size>, …}}``."""
    doc: dict[str, object] = {str(i): r.sha256 for i, r in hashes.items()}
    sizes = {str(i): r.size for i, r in hashes.items() if r.size is not None}
    if sizes:
        doc[SIZES] = sizes
    return json.dumps(doc, separators=(",", ":")).encode()


def parse_report(data: bytes, expected: str) -> dict[int, Reported]:
    """A chunk report (`chunk_report_bytes`), checked against the hash the Pod reported."""
    actual = sha256(data)
    if actual != expected:
        raise ValueError(f"report hash mismatch: the Pod reported {expected}, storage has {actual}")
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError("a chunk report must be a JSON object")
    sizes = doc.get(SIZES)
    sizes = sizes if isinstance(sizes, dict) else {}
    out: dict[int, Reported] = {}
    for key, value in doc.items():
        if key.isdigit() and isinstance(value, str) and _HEX.match(value):
            size = sizes.get(key)
            ok = isinstance(size, int) and not isinstance(size, bool) and size >= 0
            out[int(key)] = Reported(value, size if ok else None)
    return out


def verify(data: bytes, expected: str | None, uri: str) -> None:
    """Raise ResultMismatch unless ``data`` hashes to ``expected``."""
    actual = sha256(data)
    if expected is None or actual != expected.lower():
        raise ResultMismatch(uri, expected, actual)
