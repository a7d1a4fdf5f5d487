"""What storage holds for a handle: the result its runner reported, read no further than its size,
and the UID last created under a name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kinetic import storage
from kinetic.model import digest, layout
from kinetic.model.limits import MAX_POINTER_BYTES


def reported_in(record: Mapping[str, Any]) -> digest.Reported | None:
    """The result hash and size a status or manifest record holds (``resultSHA256``,
    ``resultBytes``), or None when it holds no hash."""
    sha = record.get("resultSHA256")
    if not isinstance(sha, str) or not sha:
        return None
    size = record.get("resultBytes")
    ok = isinstance(size, int) and not isinstance(size, bool) and size >= 0
    return digest.Reported(sha, size if ok else None)


def read_stored(uri: str, stored: digest.Reported) -> bytes:
    """A result's bytes, read no further than the size its runner reported: a result swapped
    for a larger object is refused before it costs memory. A runner that predates sizes
    reported none: its result is read whole, then checked, as before."""
    if stored.size is None:
        return storage.read_bytes(uri)
    try:
        return storage.read_at_most(uri, stored.size)
    except storage.TooLarge:
        raise digest.ResultMismatch(
            uri, stored.sha256, f"an object larger than the {stored.size} bytes reported"
        ) from None


def last_uid(root: str, namespace: str, kind: layout.Kind, name: str) -> str | None:
    """The UID of the last object of this name that recorded itself (read once it is gone).

    Only to find its records: it vouches for nothing (anyone who can write
    storage can write it), so what is found through it is read, never trusted.
    """
    uri = layout.current_uri(root, namespace, kind, name)
    try:
        record = layout.CurrentRecord.from_bytes(storage.read_at_most(uri, MAX_POINTER_BYTES))
    except (storage.NotFound, ValueError):
        return None
    return record.uid if record is not None else None
