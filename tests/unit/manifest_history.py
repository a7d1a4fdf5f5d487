"""A deterministic batch history played through a `ManifestBook` into real storage.

Units run in waves of ``parallel``: each wave's Pods are noted running, then
ended, and the book writes every ``write_every`` waves (the debounce) and at
the end, as the handler does. Some units fail once and succeed on their retry,
some fail for good; function units report their result hashes (a one-input
Pod in its termination message, a chunk Pod in a report in storage). The same
arguments always write the same bytes, so tests can pin them and measure what
the book keeps in memory along the way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from kinetic import storage
from kinetic.model import digest, layout
from kinetic.model.names import input_pod_name
from kinetic.model.ranges import IndexSet
from kinetic.model.resources import KineticBatchSpec, KineticBatchStatus
from kinetic_operator.logic.attempts import Limits, UnitPlan, plan_unit
from kinetic_operator.logic.batch_logic import Recorded, unit_inputs
from kinetic_operator.logic.manifest_records import build_header
from kinetic_operator.logic.observed import PodView
from kinetic_operator.manifest import ManifestBook

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
BATCH = "grp-1a2b3c4d"
UID = "0d1c2b3a-0000-4000-8000-000000000001"
STAMP = "2024-05-01T12:00:01Z"
SHA = "a" * 64


def home(root: str) -> layout.Home:
    return layout.batch_home(root, "ns", BATCH, UID)


def spec_for(n: int, *, container: bool, chunk: int = 1, parallel: int = 100) -> KineticBatchSpec:
    template: dict = (
        {"container": {"command": ["echo"]}}
        if container
        else {"function": {"payloadURI": "gs://b/f.pkl", "sha256": "a" * 64, "name": "f"}}
    )
    inputs: dict = (
        {"items": list(range(n))} if container else {"count": n, "uriPrefix": "gs://b/inputs"}
    )
    return KineticBatchSpec.model_validate(
        {
            "template": template,
            "inputs": inputs,
            "chunkSize": chunk,
            "retries": 1,
            "maxConcurrent": parallel,
        }
    )


def _pod(unit: int, attempt: int, phase: str, message: str | None = None) -> PodView:
    ended = phase in ("Succeeded", "Failed")
    return PodView(
        name=input_pod_name(BATCH, unit, attempt),
        attempt=attempt,
        index=unit,
        phase=phase,
        created=STAMP,
        start_time=STAMP,
        exit_code=(0 if phase == "Succeeded" else 1) if ended else None,
        terminated_reason=("Completed" if phase == "Succeeded" else "Error") if ended else None,
        termination_message=message,
        finished_at=STAMP if ended else None,
    )


def _plan(unit: int, pods: list[PodView]) -> UnitPlan:
    return plan_unit(
        {p.attempt: p for p in pods},
        reserved=max(p.attempt for p in pods),
        creating=False,
        limits=Limits(1, 3),
        cancel=False,
        pod_name=lambda k: input_pod_name(BATCH, unit, k),
        now=T0,
    )


def _message(
    root: str, unit: int, attempt: int, ok: bool, inputs: IndexSet, container: bool
) -> str:
    """What the Pod's termination message says, writing a chunk's report first."""
    if container:
        return f"out-{unit}-{attempt}" if ok else f"exit 1 on input {unit}"
    hashes = {i: f"{i:064x}" for i in inputs}
    if len(inputs) == 1:
        return digest.with_sha256(f"returned {unit}", hashes[unit]) if ok else "ValueError: no"
    pod = input_pod_name(BATCH, unit, attempt)
    data = json.dumps({str(i): h for i, h in hashes.items()} if ok else {}).encode()
    storage.write_bytes(home(root).report_uri(pod), data)
    done = str(inputs) if ok else ""
    rest = "" if ok else str(inputs)
    return json.dumps({"succeeded": done, "failed": rest, "report": digest.sha256(data)})


def play(
    root: str,
    n: int,
    *,
    container: bool,
    chunk: int = 1,
    parallel: int = 100,
    write_every: int = 5,
    probe: Callable[[ManifestBook, int], None] | None = None,
) -> ManifestBook:
    """Run the whole history; ``probe(book, wave)`` is called after each wave's write."""
    spec = spec_for(n, container=container, chunk=chunk, parallel=parallel)
    book = ManifestBook(home(root))
    units = list(range(0, n, chunk))
    recorded = Recorded()
    previous: dict[int, UnitPlan] = {}
    for wave, start in enumerate(range(0, len(units), parallel)):
        group = units[start : start + parallel]
        book.note(
            {u: _plan(u, [_pod(u, 1, "Running")]) for u in group}, chunk, n, container=container
        )
        ended: dict[int, UnitPlan] = {}
        succeeded: list[IndexSet] = []
        failed: list[IndexSet] = []
        for u in group:
            inputs = unit_inputs(u, chunk, n)
            flaky, doomed = u % 7 == 3, u % 13 == 5
            first_ok = not (flaky or doomed)
            pods = [_pod(u, 1, "Succeeded" if first_ok else "Failed",
                         _message(root, u, 1, first_ok, inputs, container))]  # fmt: skip
            if not first_ok:
                pods.append(
                    _pod(
                        u,
                        2,
                        "Failed" if doomed else "Succeeded",
                        _message(root, u, 2, not doomed, inputs, container),
                    )
                )
            ended[u] = _plan(u, pods)
            (failed if doomed else succeeded).append(inputs)
        book.note(ended, chunk, n, container=container)
        recorded = Recorded(
            recorded.succeeded.union(*succeeded), recorded.failed.union(*failed), IndexSet()
        )
        last = start + parallel >= len(units)
        if last or wave % write_every == write_every - 1:
            status = KineticBatchStatus(
                phase="SUCCEEDED" if last else "RUNNING", launched=len(recorded.terminal)
            )
            header = build_header(
                home(root), spec, status, recorded, created=STAMP, now=T0, shards=[]
            )
            book.write(header, recorded)
        # The next reconcile looks once at units that ended (their Pods wait out their TTL)
        # and notes any input its shard has no record of (`_note_settled`).
        book.note_missing(previous, chunk, n, container=container)
        previous = ended
        if probe is not None:
            probe(book, wave)
    return book


def written(root: str) -> dict[str, bytes]:
    """Every manifest file written (header and shards), by path under the batch's home."""
    h = home(root)
    files = {"manifest": storage.read_bytes(h.manifest_uri)}
    header = json.loads(files["manifest"])
    for shard in header["shards"]:
        files[f"shard-{shard}"] = storage.read_bytes(h.manifest_shard_uri(shard))
    return files


# Small builders the manifest tests and the client's vouched-manifest tests share.


def make_spec(n: int = 6, **extra) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {
            "template": {
                "function": {"payloadURI": "gs://b/f.pkl", "sha256": SHA, "name": "train"}
            },
            "inputs": {"count": n, "uriPrefix": "gs://b/inputs"},
            "name": "sweep",
            "tags": {"team": "ml"},
            **extra,
        }
    )


def pod(unit: int, attempt: int = 1, phase: str = "Running", **kw) -> PodView:
    return PodView(
        name=input_pod_name(BATCH, unit, attempt), attempt=attempt, index=unit, phase=phase, **kw
    )


def plan(unit: int, *pods: PodView, retries: int = 0, cancel: bool = False) -> UnitPlan:
    return plan_unit(
        {p.attempt: p for p in pods},
        reserved=1,
        creating=False,
        limits=Limits(retries, 3),
        cancel=cancel,
        pod_name=lambda k: input_pod_name(BATCH, unit, k),
        now=T0,
    )


def running(unit: int) -> UnitPlan:
    return plan(unit, pod(unit))


def succeeded(unit: int, message: str | None = None) -> UnitPlan:
    return plan(unit, pod(unit, phase="Succeeded", exit_code=0, termination_message=message))
