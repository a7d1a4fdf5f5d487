"""A batch's manifest as its status vouches for it: what clients take results on the word of.

The chain (`kinetic.model.manifest`, "The chain of trust"): the batch status
names a header and its SHA-256; the header lists each shard's slot and
SHA-256; a shard holds its inputs' result SHA-256s. `VouchedManifest` reads
each step, bounded, and checks it against the one before.

A mismatch is either a status read before the operator moved on (it never
writes into a slot the status vouches for, so a newer status vouches for
newer bytes) or a forgery. So on a mismatch the status is read again: if it
still vouches for the same header, the bytes were changed by something
other than the operator and `kinetic.model.digest.ResultMismatch` is raised,
naming the URI and both digests; if it moved on, the newer one is read.

Once the batch object is gone (or for a batch whose status predates
digests), nothing vouches for the manifest: `vouched` is False, the newest
header and shards are still read for what they say (outcomes, attempts,
messages), and callers take no result on their word
(`kinetic.model.digest.Unverifiable`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kinetic import storage
from kinetic.model import digest, layout
from kinetic.model.limits import DEFAULT_MAX_INPUTS, MAX_SHARD_BYTES, header_max_bytes
from kinetic.model.manifest import (
    Anchor,
    ManifestHeader,
    ManifestShard,
    check,
    decode_header,
    decode_shard,
)

__all__ = ["VouchedManifest", "newest_header", "newest_shard"]

RECHECKS = 5  # status reads after a mismatch before it counts as a forgery whatever happens
RECHECK_PAUSE = 0.5


class VouchedManifest:
    """One batch's manifest, read through ``status()`` (its object's status, None once gone).

    ``status`` may be primed with one already in hand (`seen`, e.g. from a
    watch) to save a read; it is read again only to settle a mismatch.
    """

    def __init__(
        self,
        home: layout.Home,
        fetch_status: Callable[[], dict[str, Any] | None],
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.home = home
        self._fetch = fetch_status
        self._sleep = sleep
        self._status: dict[str, Any] | None = None
        self._fetched = False
        self._header: tuple[str, ManifestHeader] | None = None  # (its sha256, it)
        self._shards: dict[tuple[int, str], ManifestShard] = {}

    # ----------------------------------------------------------------- the status

    def seen(self, status: dict[str, Any] | None) -> None:
        """A status just read elsewhere (None: the batch is gone)."""
        self._status, self._fetched = status, True

    def status(self, *, fresh: bool = False) -> dict[str, Any] | None:
        if fresh or not self._fetched:
            self._status, self._fetched = self._fetch(), True
        return self._status

    @property
    def vouched(self) -> bool:
        """Whether the API server vouches for the manifest (its batch exists and says so)."""
        return Anchor.of(self.status()).vouches

    def why_not(self) -> str:
        """Why nothing vouches for the manifest (for `kinetic.model.digest.Unverifiable`)."""
        if self.status() is None:
            return (
                f"batch {self.home.name} no longer exists, so the API server holds no digest "
                "to check it against, and storage alone can be rewritten by any Pod or bucket "
                "writer. Read results before deleting a batch (results() does; its status, "
                "attempts and messages stay readable from the manifest)"
            )
        return (
            f"the status of batch {self.home.name} does not vouch for its manifest yet (it was "
            "accepted by an operator that recorded no digests): try again once the operator "
            "has written the batch's status"
        )

    # ----------------------------------------------------------------- header and shards

    def header(self) -> ManifestHeader | None:
        """The header the status vouches for (None before the first manifest write); once
        nothing vouches, the newest one stored, unchecked."""
        for recheck in range(RECHECKS + 1):
            status = self.status()
            anchor = Anchor.of(status)
            if not anchor.vouches:
                return self._newest_header(anchor, status)
            assert anchor.uri is not None and anchor.sha256 is not None
            if self._header is not None and self._header[0] == anchor.sha256:
                return self._header[1]
            data = self._header_bytes(anchor.uri, anchor.sha256, status)
            if data is not None and digest.sha256(data) == anchor.sha256:
                return self._keep_header(anchor.sha256, data)
            if not self._moved_on(anchor, recheck):
                _forged(anchor.uri, anchor.sha256, data, "manifest header")
        raise AssertionError("unreachable")  # pragma: no cover

    def _newest_header(
        self, anchor: Anchor, status: dict[str, Any] | None
    ) -> ManifestHeader | None:
        """Once nothing vouches: the newest header stored, unchecked (None before the first
        manifest write, when the status names no header and still exists)."""
        total = (status or {}).get("total")
        return newest_header(self.home, total) if anchor.uri or status is None else None

    def _header_bytes(self, uri: str, sha256: str, status: dict[str, Any] | None) -> bytes | None:
        """The bytes stored at the vouched-for header's URI (None: not there), read no further
        than a header of the batch's size can be; a URI outside this batch's manifest is refused."""
        if self.home.header_slot(uri) is None:
            raise digest.ResultMismatch(
                uri, sha256, "(not this batch's manifest)", what="manifest header"
            )
        total = int((status or {}).get("total") or 0)
        return _read(uri, header_max_bytes(total))

    def _keep_header(self, sha256: str, data: bytes) -> ManifestHeader | None:
        """The header these checked bytes hold, kept for the next read under the same hash."""
        header = decode_header(data)
        if header is not None:
            self._header = (sha256, header)
        return header

    def shard(self, shard: int) -> ManifestShard | None:
        """Shard ``shard`` as the vouched-for header lists it (None: not written yet)."""
        for recheck in range(RECHECKS + 1):
            anchor = Anchor.of(self.status())
            header = self.header()
            if not anchor.vouches:
                return newest_shard(self.home, header, shard)
            ref = header.shard_ref(shard) if header is not None else None
            if ref is None:
                return None
            key = (shard, ref.sha256)
            if key in self._shards:
                return self._shards[key]
            uri = self.home.manifest_shard_uri(shard, ref.slot)
            data = _read(uri, MAX_SHARD_BYTES)
            if data is not None and digest.sha256(data) == ref.sha256:
                found = decode_shard(data)
                if found is not None:
                    self._shards = {key: found}  # one shard at a time: results() walks them
                return found
            if not self._moved_on(anchor, recheck):
                _forged(uri, ref.sha256, data, "manifest shard")
        raise AssertionError("unreachable")  # pragma: no cover

    def _moved_on(self, anchor: Anchor, recheck: int) -> bool:
        """After a mismatch: whether the status vouches for something newer now."""
        if recheck >= RECHECKS:
            return False
        if recheck:
            self._sleep(RECHECK_PAUSE)
        return Anchor.of(self.status(fresh=True)) != anchor


def _forged(uri: str, expected: str, data: bytes | None, what: str) -> None:
    """Raise the mismatch: the status still vouches for ``expected``, storage has ``data``."""
    if data is None:
        raise digest.ResultMismatch(
            uri, expected, "nothing (gone, or past its size bound)", what=what
        )
    check(data, expected, uri, what)


def _read(uri: str, limit: int) -> bytes | None:
    """The object's bytes, or None when it is gone or larger than it may be (both mean it is
    not what the status vouches for)."""
    try:
        return storage.read_at_most(uri, limit)
    except (storage.NotFound, storage.TooLarge):
        return None


# --------------------------------------------------------------------------- unchecked


def newest_header(home: layout.Home, total: int | None = None) -> ManifestHeader | None:
    """The newer of the header's two slots, unchecked: for what it says, never for a result.

    ``total`` bounds the read (unknown: the default largest batch's bound).
    """
    found: list[ManifestHeader] = []
    for slot in layout.MANIFEST_SLOTS:
        data = _read(home.header_uri(slot), header_max_bytes(total or DEFAULT_MAX_INPUTS))
        try:
            header = decode_header(data) if data is not None else None
        except ValueError:
            header = None
        if header is not None:
            found.append(header)
    return max(found, key=lambda h: h.revision) if found else None


def newest_shard(
    home: layout.Home, header: ManifestHeader | None, shard: int
) -> ManifestShard | None:
    """A shard where ``header`` says it is (slot 0 for a manifest from before slots), unchecked."""
    ref = header.shard_ref(shard) if header is not None else None
    data = _read(home.manifest_shard_uri(shard, ref.slot if ref else 0), MAX_SHARD_BYTES)
    try:
        return decode_shard(data) if data is not None else None
    except ValueError:
        return None
