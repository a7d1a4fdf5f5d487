"""A KineticJob or KineticBatch on `FakeKube`, reconciled the way Kopf drives the operator.

`Job.reconcile` and `Batch.reconcile` play what Kopf does around the sync reconcile:
the Pod index (`FakeKube.views`), the Pod event handler's bookkeeping (`deliver`),
and (for batches) a restart that forgets the operator's memory.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kinetic import storage
from kinetic.model import layout
from kinetic.model.manifest import ManifestHeader, decode_shard
from kinetic.model.resources import BATCH_PLURAL, JOB_PLURAL
from kinetic_operator.handlers.batches import BatchMemory, observe_units, reconcile_batch_sync
from kinetic_operator.handlers.jobs import JobMemory, reconcile_job_sync, with_tombstones
from kinetic_operator.logic.observed import PodView
from kinetic_operator.logic.policy import Policy
from kinetic_operator.manifest import read_header
from kinetic_operator.settings import OperatorSettings

from kinetic_testing.bodies import GRP, SPEC, batch_body, job_body
from kinetic_testing.fake_kube import NOW, FakeKube


class Job:
    """A KineticJob on the fake API, and the operator's memory of it across reconciles."""

    def __init__(self, kube: FakeKube, settings: OperatorSettings, spec=SPEC, **meta: Any):
        self.kube, self.settings, self.mem = kube, settings, JobMemory()
        self.policy: Policy | None = None
        kube.put(JOB_PLURAL, job_body(spec, **meta))

    def reconcile(self, now: datetime = NOW) -> float | None:
        pods = with_tombstones(self.kube.views(), self.mem.gone)
        return reconcile_job_sync(
            self.kube, self.settings, "ns", "kj", pods, self.mem, now, policy=self.policy
        )

    def deliver(self) -> None:
        """The watch shows every Pod: what the Pod event handler does to the memory."""
        for view in self.kube.views():
            self.mem.creating.discard(view.attempt)

    @property
    def status(self) -> dict[str, Any]:
        return self.kube.status_of(JOB_PLURAL, "kj")


class Batch:
    """A KineticBatch on the fake API, and the operator's memory of it across reconciles."""

    def __init__(self, kube: FakeKube, settings: OperatorSettings, spec: dict[str, Any], **meta):
        self.kube, self.settings, self.mem = kube, settings, BatchMemory()
        self.root = settings.storage_root or ""
        self.home = layout.batch_home(self.root or "file:///none", "ns", GRP, "b-uid")
        kube.put(BATCH_PLURAL, batch_body(spec, **meta))
        self.seen: dict[str, PodView] = {}

    def deliver(self) -> None:
        """The watch: the Pod event handler's bookkeeping for every change since last time."""
        now = {v.name: v for v in self.kube.views()}
        for view in now.values():
            if self.mem.pods.creating.get(view.index) == view.attempt:  # type: ignore[arg-type]
                del self.mem.pods.creating[view.index]  # type: ignore[arg-type]
        for name, view in self.seen.items():
            if name not in now:
                tomb = PodView(**{**view.__dict__, "gone": True})
                self.mem.pods.gone.setdefault(view.index, {})[view.attempt] = tomb  # type: ignore[arg-type]
        self.seen = now

    def reconcile(self, now: datetime = NOW, *, deliver: bool = True) -> float | None:
        if deliver:
            self.deliver()
        units = observe_units(self.kube.views(), self.mem)
        return reconcile_batch_sync(self.kube, self.settings, self.mem, "ns", GRP, units, now)

    def restart(self) -> None:
        self.mem = BatchMemory()
        self.seen = {v.name: v for v in self.kube.views()}

    @property
    def status(self) -> dict[str, Any]:
        return self.kube.status_of(BATCH_PLURAL, GRP)

    def header(self) -> ManifestHeader | None:
        """The manifest header written last (of its two slots, the newer), or None."""
        found = [h for h in (read_header(self.home, slot) for slot in (0, 1)) if h is not None]
        return max(found, key=lambda h: h.revision) if found else None

    def shard(self, n: int = 0) -> dict[int, Any]:
        """Shard ``n`` as last written ({} when not written yet)."""
        header = self.header()
        ref = header.shard_ref(n) if header is not None else None
        if ref is None:
            return {}
        found = decode_shard(storage.read_bytes(self.home.manifest_shard_uri(n, ref.slot)))
        assert found is not None
        return {int(k): v for k, v in found.inputs.items()}

    def created(self) -> list[str]:
        return [name for call, name in self.kube.calls if call == "create"]

    def events(self) -> list[str]:
        return [reason for _, reason, _ in self.kube.events]
