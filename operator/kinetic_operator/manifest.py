"""Keeping a batch's manifest current: the header and only the shards that changed.

The schema is `kinetic.model.manifest`'s (both sides import it); the layout is
`kinetic.model.layout`'s. This module decides what to write: a `ManifestBook`
per batch holds the attempt history of inputs whose shard is still
changing, marks shards dirty as plans come in, and writes the dirty shards
then the header. A shard whose inputs have all ended is written one last
time and dropped from memory, so the operator holds the history of about
``maxConcurrent`` inputs, not of the whole batch. After a restart a shard
is read back before it is first rewritten, so nothing written earlier is
lost.

Each function input's record carries the hash the runner reported for its
result (``resultSHA256``): a one-input Pod reports it in its termination
message, a chunk Pod in a report whose own hash is in its termination
message; reports are read and checked here, just before the shard that
needs them is written (`kinetic.model.digest`).

What each record says and when to write are decided in
`kinetic_operator.logic.manifest_records` (the `Debouncer`: promptly when it matters,
before the first Pod and at the end, otherwise at most every interval); this module
reads and writes storage.

What the batch status vouches for (`kinetic.model.manifest`, "The chain of
trust"): every header the book writes lists each shard's slot and SHA-256,
and the handler records the header's own SHA-256 in the status with its
next status write (`vouched`). The book writes each new version into the
slot the status does not vouch for (`anchored`), so the vouched-for
version stays readable whatever happens before the status catches up; it
reads back only what a digest it trusts covers (`load`, `_merged`), every
read bounded (`kinetic.model.limits`). A forged header or shard read back is not
used, and is reported (`tampered`) for the handler to tell.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kinetic import storage
from kinetic.model import digest, layout
from kinetic.model.digest import Reported
from kinetic.model.limits import MAX_REPORT_BYTES, MAX_SHARD_BYTES, header_max_bytes
from kinetic.model.manifest import (
    Anchor,
    InputRecord,
    ManifestHeader,
    ManifestShard,
    ShardRef,
    decode_header,
    decode_shard,
    shard_bytes,
)
from kinetic.model.ranges import IndexSet

from kinetic_operator.bounded_read import TooLarge, read_at_most
from kinetic_operator.logic.attempts import UnitPlan
from kinetic_operator.logic.batch_logic import Recorded, UnitObservation, unit_inputs
from kinetic_operator.logic.job_logic import reported_result
from kinetic_operator.logic.manifest_records import (
    recorded_from,
    recorded_outcome,
    result_of,
    settled,
    stored_result,
    usable_pods,
)

log = logging.getLogger("kinetic.operator")

__all__ = [
    "ManifestBook",
    "Written",
    "read_header",
]

_OUTCOME = {
    "pending": "PENDING",
    "running": "RUNNING",
    "succeeded": "SUCCEEDED",
    "failed": "FAILED",
    "cancelled": "CANCELLED",
}


def read_header(home: layout.Home, slot: int = 0) -> ManifestHeader | None:
    """The header as stored in ``slot``, unchecked, or None (none yet, or of another version).

    For tests and tools: the operator reads back only what its status vouches
    for (`ManifestBook.load`).
    """
    try:
        return decode_header(storage.read_bytes(home.header_uri(slot)))
    except storage.NotFound:
        return None


@dataclass(frozen=True)
class Written:
    """A header the book wrote: where, its SHA-256, the shard versions it lists, and the
    outcomes it holds (safe once the status vouches for it: their Pods may go)."""

    uri: str
    sha256: str
    slot: int
    refs: dict[int, ShardRef]
    recorded: Recorded


@dataclass
class ManifestBook:
    """The attempt history a batch's manifest shards hold, and which shards changed."""

    home: layout.Home
    shards: dict[int, dict[int, InputRecord]] = field(default_factory=dict)
    dirty: set[int] = field(default_factory=set)
    written: set[int] = field(default_factory=set)
    loaded: set[int] = field(default_factory=set)
    header_read: bool = False
    refs: dict[int, ShardRef] = field(default_factory=dict)  # each shard's newest version
    anchored: Written | None = None  # the header the batch status vouches for
    latest: Written | None = None  # the header written last (vouched for or not yet)
    revision: int = 0
    legacy: bool = False  # a manifest from before digests: read once, unchecked
    tampered: list[str] = field(default_factory=list)  # forgeries found, not yet reported
    # Inputs with a record in each shard dropped from memory, as ranges (a few per shard),
    # so asking whether a settled input is recorded does not read the shard back for good.
    dropped: dict[int, IndexSet] = field(default_factory=dict)
    hashes: dict[int, Reported] = field(default_factory=dict)  # from chunk reports read
    reports: dict[tuple[int, int], tuple[str, str]] = field(default_factory=dict)
    read_reports: dict[str, int] = field(default_factory=dict)  # chunk Pod -> its unit
    observed: Mapping[int, UnitObservation] = field(default_factory=dict)  # this reconcile's

    @property
    def batch(self) -> str:
        return self.home.name

    def note(
        self,
        plans: Mapping[int, UnitPlan],
        chunk: int,
        total: int,
        *,
        container: bool | Callable[[int], bool],
    ) -> None:
        """Take the latest plan of each unit into its inputs' records.

        ``container`` says whether the unit runs a container; a callable asks
        per unit (a ``spec.jobs`` batch mixes containers and functions).
        """
        for unit, plan in plans.items():
            indexes = unit_inputs(unit, chunk, total)
            container_unit = container(unit) if callable(container) else container
            single = None if container_unit else reported_result(plan)
            if not container_unit and len(indexes) > 1:
                self._note_reports(unit, plan)
            for index in indexes:
                shard = layout.shard_of(index)
                records = self.shards.setdefault(shard, {})
                old = records.get(index)
                new = InputRecord(
                    outcome=_OUTCOME[plan.outcome],  # type: ignore[arg-type]
                    attempts=list(plan.records),
                    result=result_of(plan) if container_unit else None,
                    message=plan.message if plan.outcome == "failed" else None,
                    **stored_result(single if len(indexes) == 1 else self.hashes.get(index)),
                )
                if old is None or old != new:
                    records[index] = new
                    self.dirty.add(shard)

    def note_missing(
        self,
        plans: Mapping[int, UnitPlan],
        chunk: int,
        total: int,
        *,
        container: bool | Callable[[int], bool],
    ) -> bool:
        """Like `note`, for inputs whose shard (in memory or stored) has no record of how
        they ended yet: none at all, or one written while they ran (the manifest is written
        debounced, so an operator that stopped between may have left it so)."""
        missing: dict[int, UnitPlan] = {}
        for unit, plan in plans.items():
            for index in unit_inputs(unit, chunk, total):
                shard = layout.shard_of(index)
                if index in self.dropped.get(shard, ()):
                    continue  # written by this process, and settled
                record = self._merged(shard).get(index)
                if record is None or record.outcome in ("PENDING", "RUNNING"):
                    missing[unit] = plan
        if missing:
            self.note(missing, chunk, total, container=container)
        return bool(missing)

    def _note_reports(self, unit: int, plan: UnitPlan) -> None:
        """Chunk attempts that reported their inputs' hashes: read them before the next write."""
        for rec in plan.records:
            ended = rec.outcome in ("success", "failure")
            report = digest.chunk_report(rec.message) if ended else None
            if report is not None and rec.pod not in self.read_reports:
                self.reports[(unit, rec.attempt)] = (rec.pod, report)

    def _read_reports(self, chunk_of: Mapping[int, int]) -> None:
        """Take each pending chunk report's hashes into its inputs' records (oldest first).

        A report that is missing, larger than a report can be, or does not
        match the hash its Pod reported is skipped with a warning: those
        inputs get no hash, and clients refuse to unpickle their results
        rather than trust them. (Reports of units still open are checked
        before the batch records their outcome, see `check_report`.)
        """
        for key in sorted(self.reports):
            pod, expected = self.reports.pop(key)
            try:
                found = check_report(self.home, pod, expected)
            except ValueError as exc:
                log.warning("Ignoring chunk report of %s: %s", pod, exc)
                found = {}
            except storage.StorageError:
                self.reports[key] = (pod, expected)  # storage down: retried with the write
                raise
            self.take_report(key[0], pod, found, chunk_of)

    def take_report(
        self, unit: int, pod: str, found: Mapping[int, Reported], chunk_of: Mapping[int, int]
    ) -> None:
        """A chunk Pod's checked report: its own unit's inputs get their result hashes."""
        self.read_reports[pod] = unit
        for index, value in found.items():
            if chunk_of.get(index, -1) != unit:
                continue  # a report may only speak for its own unit's inputs
            self.hashes[index] = value
            shard = layout.shard_of(index)
            records = self.shards.setdefault(shard, {})
            rec = records.get(index)
            if rec is not None and (rec.result_sha256, rec.result_bytes) != value:
                records[index] = rec.model_copy(update=stored_result(value))
                self.dirty.add(shard)

    def _hashes_from_pods(self, chunk: int) -> None:
        """Ended inputs about to be written without a result hash: take it from their Pods.

        An input can end while no process is following its unit (the operator
        restarted after the status recorded it, before the shard did); its
        Pods are kept until the shard is written, so their termination
        messages still say what the runner reported.
        """
        for shard in self.dirty:
            for index, rec in self.shards.get(shard, {}).items():
                if rec.result_sha256 or rec.outcome not in ("SUCCEEDED", "FAILED"):
                    continue
                self._hash_from_pods(shard, index, rec, chunk)

    def _hash_from_pods(self, shard: int, index: int, rec: InputRecord, chunk: int) -> None:
        """One input's hash from its unit's ended Pods, the newest success first.

        A single input's Pod says its hash in its termination message; a
        chunk Pod's report is noted, to be read before the write.
        """
        unit = index - index % chunk
        for pod in reversed(usable_pods(self.observed.get(unit), rec.outcome)):
            if chunk == 1 and (found := digest.reported_result(pod.termination_message)):
                self.shards[shard][index] = rec.model_copy(update=stored_result(found))
                return
            report = digest.chunk_report(pod.termination_message) if chunk > 1 else None
            if report is not None and pod.name not in self.read_reports:
                self.reports[(unit, pod.attempt)] = (pod.name, report)

    def settle(self, recorded: Recorded) -> None:
        """Outcomes recorded by the batch win over what the plans last said."""
        for shard, records in self.shards.items():
            for index, rec in records.items():
                outcome = recorded_outcome(index, recorded)
                if outcome is not None and rec.outcome != outcome:
                    # the hash noted for the old outcome may be another attempt's
                    records[index] = settled(rec, outcome).model_copy(
                        update=stored_result(self.hashes.get(index))
                    )
                    self.dirty.add(shard)

    def write(self, header: ManifestHeader, recorded: Recorded) -> None:
        """Write every dirty shard, then the header; raises if storage refuses.

        A shard all of whose inputs have ended is dropped from memory once
        written: it will not change again.
        """
        self.settle(recorded)
        if header.kind == "function":
            self._hashes_from_pods(max(1, header.chunk_size))
        if self.reports:
            size = max(1, header.chunk_size)
            units = {u for u, _ in self.reports}
            self._read_reports({i: u for u in units for i in unit_inputs(u, size, header.total)})
        self.header_read = True  # a book that was not `load`ed trusts nothing stored
        terminal = recorded.terminal
        for shard in sorted(self.dirty):
            records = self._merged(shard)
            doc = ManifestShard(
                group_id=self.batch,
                shard=shard,
                inputs={str(i): r for i, r in sorted(records.items())},
            )
            data = shard_bytes(doc)
            slot = self._free_slot(shard)
            storage.write_bytes(self.home.manifest_shard_uri(shard, slot), data)
            self.refs[shard] = ShardRef(slot=slot, sha256=digest.sha256(data))
            self.dirty.discard(shard)
            self.written.add(shard)
            if all(i in terminal for i in records):
                self._drop(shard, max(1, header.chunk_size))
        header.shards = sorted(self.written | set(header.shards))
        header.shard_refs = {str(s): self.refs[s] for s in sorted(self.refs)}
        header.revision = self.revision + 1
        data = header.encode()
        slot = 0 if self.anchored is None else 1 - self.anchored.slot
        uri = self.home.header_uri(slot)
        storage.write_bytes(uri, data)
        self.revision = header.revision
        self.latest = Written(uri, digest.sha256(data), slot, dict(self.refs), recorded)

    def _free_slot(self, shard: int) -> int:
        """The slot a new version of ``shard`` goes to: never the one the status vouches for."""
        vouched = self.anchored.refs.get(shard) if self.anchored is not None else None
        return 0 if vouched is None else 1 - vouched.slot

    def vouched(self, uri: str | None, sha256: str | None) -> bool:
        """A status write recorded this header digest: what it lists is now vouched for.

        Returns whether that moved what is vouched for (so more Pods may go).
        """
        latest = self.latest
        if latest is None or (uri, sha256) != (latest.uri, latest.sha256):
            return False
        if self.anchored is latest:
            return False
        self.anchored = latest
        return True

    def load(self, anchor: Anchor, total: int) -> ManifestHeader | None:
        """Once per process: the header the batch status vouches for, checked, or None.

        What it lists becomes what this book builds on; nothing else stored is
        believed. A forged header (its bytes are not what the status says, or
        past its bound) is not used and is noted in `tampered`. A status from
        before digests (``manifestURI`` without ``manifestSHA256``) is taken
        at its word once (trust on first use, for batches that were running
        when the operator was upgraded), with each shard's digest as read.
        """
        if self.header_read:
            return None
        self.header_read = True
        if anchor.uri is None:
            return None
        slot = self.home.header_slot(anchor.uri)
        if slot is None:
            self.tampered.append(
                f"status.manifestURI {anchor.uri} is not a manifest of this batch "
                f"(under {self.home.prefix}): nothing stored is used"
            )
            return None
        try:
            data = read_at_most(anchor.uri, header_max_bytes(total))
        except storage.NotFound:
            self.tampered.append(f"the manifest header {anchor.uri} the status vouches for is gone")
            return None
        except TooLarge as exc:
            self.tampered.append(f"the manifest header is not used: {exc}")
            return None
        actual = digest.sha256(data)
        if anchor.sha256 is not None and actual != anchor.sha256:
            self.tampered.append(
                f"the manifest header {anchor.uri} was changed in storage: it hashes to "
                f"{actual}, status.manifestSHA256 says {anchor.sha256}; it is not used"
            )
            return None
        header = decode_header(data)
        if header is None:
            return None
        self.legacy = anchor.sha256 is None
        refs = {int(k): v for k, v in header.shard_refs.items()}
        if self.legacy:
            refs = self._legacy_refs(header.shards)
        self.refs = dict(refs)
        self.written.update(header.shards)
        self.revision = header.revision
        recorded = recorded_from(header) or Recorded()
        self.anchored = self.latest = Written(anchor.uri, actual, slot, refs, recorded)
        return header

    def _legacy_refs(self, shards: list[int]) -> dict[int, ShardRef]:
        """Digests of a pre-digest manifest's shards (slot 0), so the next header lists them."""
        refs: dict[int, ShardRef] = {}
        for shard in shards:
            try:
                data = read_at_most(self.home.manifest_shard_uri(shard), MAX_SHARD_BYTES)
            except (storage.NotFound, TooLarge):
                continue
            refs[shard] = ShardRef(slot=0, sha256=digest.sha256(data))
        return refs

    def _drop(self, shard: int, chunk: int) -> None:
        """Forget a written shard whose inputs have all ended: nothing in it changes again.

        What stays is which inputs it records (ranges), so `note_missing` need
        not read it back; the result hashes of its inputs and the chunk reports
        read for units wholly inside dropped shards go with it (they are in
        the shard as written).
        """
        records = self.shards.pop(shard, {})
        self.loaded.discard(shard)
        self.dropped[shard] = self.dropped.get(shard, IndexSet()).union(records)
        for index in records:
            self.hashes.pop(index, None)
        for pod, unit in list(self.read_reports.items()):
            first, last = unit, unit + chunk - 1
            if (
                layout.shard_of(first) not in self.shards
                and layout.shard_of(last) not in self.shards
            ):
                del self.read_reports[pod]

    def _merged(self, shard: int) -> dict[int, InputRecord]:
        """This shard's records, merged over what an earlier write stored (read once).

        Only a version a digest this book trusts covers is read back: the one
        it wrote last, or the one the status vouched for at `load`. A forged
        one is noted in `tampered` and left out: the inputs it recorded keep
        what their Pods still say, and lose the rest rather than take a forgery.
        """
        records = self.shards.setdefault(shard, {})
        if shard in self.loaded:
            return records
        self.loaded.add(shard)
        stored = self._stored(shard)
        self.dropped.pop(shard, None)  # held again: the records themselves say it
        if stored is not None:
            for key, rec in stored.inputs.items():
                records.setdefault(int(key), rec)
            self.written.add(shard)
        return records

    def _stored(self, shard: int) -> ManifestShard | None:
        ref = self.refs.get(shard)
        if ref is None:
            return None
        uri = self.home.manifest_shard_uri(shard, ref.slot)
        try:
            data = read_at_most(uri, MAX_SHARD_BYTES)
        except storage.NotFound:
            self.tampered.append(f"the manifest shard {uri} is gone from storage")
            return None
        except TooLarge as exc:
            self.tampered.append(f"the manifest shard is not used: {exc}")
            return None
        actual = digest.sha256(data)
        if actual != ref.sha256:
            self.tampered.append(
                f"the manifest shard {uri} was changed in storage: it hashes to {actual}, "
                f"the manifest header says {ref.sha256}; it is not used"
            )
            return None
        return decode_shard(data)


def check_report(home: layout.Home, pod: str, expected: str) -> dict[int, Reported]:
    """A chunk Pod's report, read no further than a report can be, checked against the hash
    its Pod reported through the API server. Raises ValueError saying what is wrong with it
    (missing, too large, changed), StorageError when storage does not answer."""
    uri = home.report_uri(pod)
    try:
        data = read_at_most(uri, MAX_REPORT_BYTES)
    except storage.NotFound:
        raise ValueError(f"the chunk's report {uri} is missing") from None
    except TooLarge as exc:
        raise ValueError(f"the chunk's report is refused: {exc}") from None
    try:
        return digest.parse_report(data, expected)
    except ValueError as exc:
        raise ValueError(f"the chunk's report {uri} is refused: {exc}") from None
