"""Kinetic against a plain batch/v1 Job doing the same work, in one run on one cluster.

Ways to run N short tasks with at most P at once:

  job        one batch/v1 Job, completions=N, parallelism=P (the baseline)
  python-job the same Job, its task a Python process that imports cloudpickle:
             the floor for one Python process per input on this cluster
  container  a KineticBatch whose template is the same container command
  function   `f.run_async_map(range(N), max_concurrent=P)` of a function sleeping 0.2 s,
             chunk_size unset: the operator sizes the units (the default)
  per-input  the same with `chunk_size=1`: one Pod per input
  chunk-K    the same with `chunk_size=K` (K consecutive inputs per Pod), one mode for
             each K of --chunk-sizes (5, 10, 20)
  skewed     the default function batch where 5% of the inputs, chosen at random with a
             fixed seed, sleep 20x longer (4 s instead of 0.2 s)
  gang       the function with `hosts=2`: every input a gang of two Pods, P/2 gangs
             at once (so P Pods, as in `per-input`); compare it with `per-input`

Each mode runs alone, in its own namespace, between two scrapes of the API
server's request counters; its objects are then deleted and the deletion
waited for in a second window, so one mode's garbage collection never lands
in the next one's figures. Results go to bench/results/latest.json (and a
timestamped copy) with a plot beside them.

    python bench/run.py --tasks 300 --parallel 30 --chunk-sizes 5,10,20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import benchlib as bl
import kinetic
from kinetic.api.batches import BatchHandle
from kinetic.api.inputs import read_manifest, read_shard
from kinetic.api.kube import KubeClient
from kinetic.model import layout, names
from kinetic.model import resources as r
from kinetic_dev import use_local_cluster
from kubernetes import client, watch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

kube = KubeClient()  # the client's own calls to the API server, through the current context

COMMAND = ["sh", "-c", "echo task; sleep 0.2"]
# The floor of any design that starts one Python process per input: the same
# 0.2 s task as a plain Job, in a Python that imports cloudpickle (what every
# function Pod must import to unpickle the function) and nothing of Kinetic.
PYTHON_COMMAND = ["python", "-c", "import cloudpickle, time; print('task'); time.sleep(0.2)"]
CHUNK_SIZES = (5, 10, 20)


def mode_names(chunk_sizes: tuple[int, ...]) -> list[str]:
    """Every mode, in the order they run: the fixed chunk modes are those of --chunk-sizes."""
    chunks = [f"chunk-{k}" for k in chunk_sizes]
    return ["job", "python-job", "container", "function", "per-input", *chunks, "skewed", "gang"]


# A log file or CI gets a table wide enough to read; a terminal keeps its own width.
console = Console() if sys.stdout.isatty() else Console(width=120)

# A callback the modes call with (finished inputs, a short detail line).
Tick = Callable[[int, str], None]
# Modes register how to delete what they created as soon as they create it, so a
# mode that fails or times out is still cleaned up (in the cleanup window).
Defer = Callable[[Callable[[], Any]], None]
Runner = Callable[[str, "Config", Tick, Defer], "Outcome"]


@dataclass
class Outcome:
    """What a mode leaves behind once its last task has finished."""

    wall: float
    final_status: dict | None = None  # .status of the Job / KineticBatch at the end
    status_bytes_max: int | None = None  # largest .status seen while it ran (Kinetic modes)
    notes: list[str] = field(default_factory=list)
    # seconds from the start of the mode: submitted, first_running, first_done, all_done, ...
    milestones: dict[str, float] = field(default_factory=dict)
    timeline: list[list[float]] = field(default_factory=list)  # [seconds, inputs finished]
    # what the mode measured beside its wall time (Pod starts, first result, lags, work)
    measures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Config:
    tasks: int
    parallel: int
    chunk_sizes: tuple[int, ...]
    timeout: float
    namespace: str


# --------------------------------------------------------------------------- the modes


def runner_image() -> str:
    """The image the operator runs this interpreter's functions in (what it publishes)."""
    from kinetic.api.config import resolve

    image = resolve().image
    if not image:
        raise RuntimeError("the operator published no default image (ConfigMap kinetic-config)")
    return image


def run_job(
    ns: str,
    cfg: Config,
    tick: Tick,
    defer: Defer,
    command: list[str] = COMMAND,
    image: str = "busybox",
) -> Outcome:
    """The baseline: one Job, the Job controller does the fan-out."""
    api = client.BatchV1Api(kube.api)
    name = f"bench-job-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": cfg.tasks,
            "parallelism": cfg.parallel,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "task", "image": image, "command": command}],
                }
            },
        },
    }
    recorder = PodRecorder(ns, f"job-name={name}")
    started = time.monotonic()
    api.create_namespaced_job(ns, body)
    clock = Milestones(started)
    clock.mark("submitted")
    defer(lambda: api.delete_namespaced_job(name, ns, propagation_policy="Background"))
    deadline = started + cfg.timeout
    job: client.V1Job | None = None
    finished_as: str | None = None
    while finished_as is None and time.monotonic() < deadline:
        w = watch.Watch()
        for event in w.stream(
            api.list_namespaced_job,
            ns,
            field_selector=f"metadata.name={name}",
            timeout_seconds=max(1, int(min(60, deadline - time.monotonic()))),
        ):
            job = event["object"]
            st = job.status
            clock.progress(st.succeeded or 0, st.active or 0)
            tick(st.succeeded or 0, f"active {st.active or 0}  failed {st.failed or 0}")
            for cond in st.conditions or []:
                if cond.type in ("Complete", "Failed") and cond.status == "True":
                    finished_as = cond.type
            if finished_as:
                w.stop()
                break
    wall = time.monotonic() - started
    if finished_as is None:
        raise TimeoutError(f"Job {name} did not finish in {cfg.timeout:.0f}s")
    clock.mark("all_done")
    status = api.api_client.sanitize_for_serialization(job).get("status")
    out = Outcome(wall=wall, final_status=status, milestones=clock.marks, timeline=clock.timeline)
    out.measures["pod_start"] = job_pod_starts(ns, name)  # before the Job and its Pods go
    out.measures["slot_refill"] = slot_refills(recorder.stop(), cfg.parallel)
    if finished_as != "Complete":
        out.notes.append(f"Job ended {finished_as}")
    return out


def job_pod_starts(ns: str, job: str) -> dict[str, Any]:
    """From each of the Job's Pods' creation to its container's start, median and p95:
    what a Pod's start costs on this node in this run (the skewed mode's target adds it)."""
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"job-name={job}")
    starts = bl.pod_start_seconds(kube.api.sanitize_for_serialization(pods).get("items") or [])
    return {
        "median_seconds": bl.rounded(bl.percentile(starts, 50)),
        "p95_seconds": bl.rounded(bl.percentile(starts, 95)),
        "pods": len(starts),
    }


class PodRecorder:
    """Every Pod of a namespace as last seen on a watch, kept after the Pod is deleted (the
    operator reaps finished Pods after its TTL, while the mode still runs)."""

    def __init__(self, ns: str, selector: str) -> None:
        self.ns, self.selector = ns, selector
        self.pods: dict[str, dict] = {}
        self.watch = watch.Watch()
        self.thread = threading.Thread(target=self._follow, daemon=True, name="pod-recorder")
        self.thread.start()

    def _follow(self) -> None:
        try:
            for event in self.watch.stream(
                kube.core.list_namespaced_pod, self.ns, label_selector=self.selector
            ):
                pod = kube.api.sanitize_for_serialization(event["object"])
                self.pods[pod["metadata"]["name"]] = pod
        except Exception:  # noqa: BLE001 - a lost watch loses figures, not the run
            return

    def stop(self) -> list[dict]:
        self.watch.stop()
        return list(self.pods.values())


def slot_refills(pods: list[dict], parallel: int) -> dict[str, Any]:
    """From a Pod's end to the create of the Pod that takes its slot, median and p95, from
    the Pods' own times: the Job controller's and the operator's alike
    (`kinetic_slot_refill_seconds` is the operator's own view of it)."""
    waits = bl.slot_refill_seconds(pods, parallel)
    return {
        "median_seconds": bl.rounded(bl.percentile(waits, 50)),
        "p95_seconds": bl.rounded(bl.percentile(waits, 95)),
        "refills": len(waits),
    }


def run_container(ns: str, cfg: Config, tick: Tick, defer: Defer) -> Outcome:
    """The same command as a KineticBatch over inline items: the operator does the fan-out."""
    name = f"grp-{uuid.uuid4().hex[:8]}"
    body = bl.container_batch(ns, name, COMMAND, {"items": list(range(cfg.tasks))}, cfg.parallel)
    recorder = PodRecorder(ns, f"{names.LABEL_BATCH}={name}")
    started = time.monotonic()
    kube.create(r.BATCH_PLURAL, ns, body)
    clock = Milestones(started)
    clock.mark("submitted")
    defer(lambda: kube.delete(r.BATCH_PLURAL, ns, name))
    follower = BatchFollower(ns, name, tick, cfg.timeout, clock)
    follower.follow()  # in this thread: the mode ends when the batch does
    wall = time.monotonic() - started
    out = Outcome(
        wall=wall,
        final_status=follower.last_status,
        status_bytes_max=follower.status_bytes_max,
        milestones=clock.marks,
        timeline=clock.timeline,
    )
    out.measures["slot_refill"] = slot_refills(recorder.stop(), cfg.parallel)
    phase = (follower.last_status or {}).get("phase")
    if phase != "SUCCEEDED":
        out.notes.append(f"batch ended {phase}: {(follower.last_status or {}).get('message')}")
    return out


def run_function(
    ns: str,
    cfg: Config,
    tick: Tick,
    defer: Defer,
    chunk_size: int | None = None,
    hosts: int | None = None,
    slow: frozenset[int] = frozenset(),
) -> Outcome:
    """A Python function over range(N): upload, runner and ordered result download included.

    ``chunk_size`` None leaves it unset (the operator sizes the units); the inputs in
    ``slow`` sleep `benchlib.SLOW_SECONDS` instead of `benchlib.SHORT_SECONDS`. The
    function is defined here, nested, so that cloudpickle ships it (and the set) by
    value: the runner on the node has no `bench` package to import it from.
    """
    short, long = bl.SHORT_SECONDS, bl.SLOW_SECONDS

    @kinetic.run(namespace=ns)
    def task(i: int) -> int:
        import time as _time

        _time.sleep(long if i in slow else short)
        return i

    extra: dict[str, Any] = {} if chunk_size is None else {"chunk_size": chunk_size}
    concurrent = cfg.parallel
    if hosts is not None:  # maxConcurrent counts gangs: the same number of Pods at once
        extra["hosts"] = hosts
        concurrent = max(1, cfg.parallel // hosts)
    started = time.monotonic()
    batch = task.run_async_map(range(cfg.tasks), max_concurrent=concurrent, **extra)
    clock = Milestones(started)
    clock.mark("submitted")  # function and inputs packaged and uploaded, batch created
    defer(batch.cleanup)  # the batch, its Pods and its storage
    follower = BatchFollower(ns, batch.group_id, tick, cfg.timeout, clock)
    thread = threading.Thread(target=follower.follow, daemon=True, name="batch-follower")
    thread.start()
    values = batch.results(timeout=cfg.timeout, progress=False)
    wall = time.monotonic() - started
    clock.mark("results_collected")
    thread.join(timeout=60)  # it ends with the batch's terminal phase, which vouches for the
    final = kube.get(r.BATCH_PLURAL, ns, batch.group_id)  # final manifest read below
    out = Outcome(
        wall=wall,
        final_status=(final or {}).get("status"),
        status_bytes_max=max(
            x for x in (follower.status_bytes_max, bl.status_bytes(final), 0) if x is not None
        ),
        milestones=clock.marks,
        timeline=clock.timeline,
    )
    seconds = bl.input_seconds(cfg.tasks, slow)
    out.measures.update(
        first_result_seconds=clock.marks.get("first_done"),
        lag=bl.lag_summary(manifest_end_times(batch), follower.first_seen.at)
        | {"status_truncated": follower.first_seen.truncated},
        work_seconds=round(sum(seconds), 2),
        longest_input_seconds=max(seconds, default=0.0),
    )
    if values != list(range(cfg.tasks)):
        wrong = [i for i, v in enumerate(values) if v != i][:5]
        out.notes.append(f"results out of order or wrong, e.g. at {wrong}")
    return out


def manifest_end_times(batch: BatchHandle) -> dict[int, float]:
    """Each input's end (its last attempt's endTime) from the batch's manifest, read once
    after the run: the header, then every shard it lists."""
    if not batch.uid:
        return {}
    home = layout.batch_home(batch.storage_root, batch.namespace, batch.group_id, batch.uid)
    header = read_manifest(home)
    ends: dict[int, float] = {}
    for shard in header.shards if header is not None else []:
        doc = read_shard(home, shard)
        if doc is not None:
            ends.update(bl.input_end_times(doc.inputs))
    return ends


class BatchFollower:
    """Follows a KineticBatch on a watch: progress, largest status seen, final status, and
    when it first showed each input ended (`benchlib.FirstSeen`, on this machine's clock)."""

    def __init__(self, ns: str, name: str, tick: Tick, timeout: float, clock: Milestones) -> None:
        self.ns, self.name, self.tick, self.timeout = ns, name, tick, timeout
        self.clock = clock
        self.last_status: dict | None = None
        self.status_bytes_max: int | None = None
        self.first_seen = bl.FirstSeen()

    def follow(self) -> None:
        for obj in kube.watch_one(r.BATCH_PLURAL, self.ns, self.name, timeout=self.timeout):
            if obj is None:
                return
            now = time.time()
            size = bl.status_bytes(obj) or 0
            self.status_bytes_max = max(self.status_bytes_max or 0, size)
            status = obj.get("status") or {}
            self.first_seen.saw(status, now)
            self.last_status = status
            c = status.get("counts", {})
            done = c.get("succeeded", 0) + c.get("failed", 0) + c.get("cancelled", 0)
            self.clock.progress(done, c.get("running", 0))
            self.tick(done, f"running {c.get('running', 0)}  failed {c.get('failed', 0)}")
            if r.Phase(status.get("phase") or "PENDING").terminal:
                self.clock.mark("all_done")
                return


class Milestones:
    """When a mode passed each stage, as seen by the bench: where its wall time went.

    Every mark is the client's view, on the bench's clock from just before submission
    (for functions: before packaging and upload): ``first_done`` is the first version
    the bench's own watch received that counts an input finished, which is when a client
    following the batch (``as_completed()``) could first see one.
    """

    def __init__(self, started: float) -> None:
        self.started = started
        self.marks: dict[str, float] = {}
        self.timeline: list[list[float]] = []

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, round(time.monotonic() - self.started, 2))

    def progress(self, done: int, running: int) -> None:
        if running or done:
            self.mark("first_running")
        if done:
            self.mark("first_done")
        if not self.timeline or self.timeline[-1][1] != done:
            self.timeline.append([round(time.monotonic() - self.started, 2), done])


# --------------------------------------------------------------------------- one mode, measured


def measure(
    mode: str,
    runner: Runner,
    cfg: Config,
    sampler: bl.RssSampler,
    progress: Progress,
    settle: float,
    cleanup_timeout: float,
) -> dict[str, Any]:
    """Run one mode between two counter scrapes, then clean up in a second window."""
    ns = f"{cfg.namespace}-{mode}"
    bl.ensure_namespace(ns)
    if bl.leftovers(ns):  # an interrupted earlier run: clear it outside any window
        bl.delete_everything(ns)
        bl.wait_empty(ns, cleanup_timeout)
        time.sleep(settle)
    bar = progress.add_task(f"{mode:9}", total=cfg.tasks, detail="")

    def tick(done: int, detail: str) -> None:
        progress.update(bar, completed=done, detail=detail)

    result: dict[str, Any] = {"namespace": ns, "ok": False}
    t0 = time.monotonic()
    window = bl.Window([ns])
    outcome: Outcome | None = None
    cleanups: list[Callable[[], Any]] = []
    try:
        outcome = runner(ns, cfg, tick, cleanups.append)
    except Exception as e:
        result["error"] = describe(e)
        result["traceback"] = traceback.format_exc(limit=8)
        progress.console.print(f"[red]{mode}: {result['error']}")
    pods_left = bl.pod_count(ns)
    time.sleep(settle)  # trailing writes of the last transitions belong to this mode
    run_writes, window_seconds = window.close()
    t_run = time.monotonic()

    if outcome is not None:
        result.update(
            ok=not outcome.notes,
            wall_seconds=round(outcome.wall, 2),
            tasks_per_second=round(cfg.tasks / outcome.wall, 2),
            status_bytes=bl.status_bytes({"status": outcome.final_status}),
            status_bytes_max=outcome.status_bytes_max,
            final_phase=(outcome.final_status or {}).get("phase"),
            milestones=outcome.milestones,
            timeline=outcome.timeline,
            **outcome.measures,
        )
        if outcome.notes:
            result["error"] = "; ".join(outcome.notes)
    result["pods_left_at_end"] = pods_left
    result["run"] = run_writes.to_json(cfg.tasks, window_seconds)
    result["rss"] = sampler.window(t0, t_run)

    progress.update(bar, detail="cleaning up")
    window = bl.Window([ns])
    try:
        for fn in cleanups:
            fn()
        bl.delete_everything(ns)  # also whatever a failed mode left
        waited = bl.wait_empty(
            ns,
            cleanup_timeout,
            on_tick=lambda left: progress.update(bar, detail=f"cleaning up {left}"),
        )
        result["cleanup_seconds"] = round(waited, 2)
    except Exception as e:
        result["cleanup_error"] = describe(e)
        progress.console.print(f"[red]{mode} cleanup: {result['cleanup_error']}")
    time.sleep(settle)
    cleanup_writes, cleanup_window = window.close()
    result["cleanup"] = cleanup_writes.to_json(cfg.tasks, cleanup_window)
    # run + cleanup: the whole life of the mode's objects, whenever the Pods were deleted
    result["lifecycle_writes_per_input"] = round(
        (run_writes.total + cleanup_writes.total) / cfg.tasks, 2
    )
    result["rss_with_cleanup"] = sampler.window(t0)
    detail = (
        f"{result['wall_seconds']:.1f}s  {result['run']['writes_per_input']:.1f} writes/input"
        if "wall_seconds" in result
        else "[red]failed"
    )
    progress.update(bar, detail=detail)
    return result


def describe(e: BaseException) -> str:
    """One line for an exception; for an API error, the API server's own message."""
    if isinstance(e, client.ApiException):
        try:
            message = json.loads(e.body or "{}").get("message") or e.reason
        except ValueError:
            message = e.reason
        return f"{type(e).__name__} {e.status}: {message}"
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


# --------------------------------------------------------------------------- report


def add_ratios(modes: dict[str, dict[str, Any]]) -> None:
    base = modes.get("job", {}).get("wall_seconds")
    for m in modes.values():
        if base and m.get("wall_seconds"):
            m["wall_ratio_to_job"] = round(m["wall_seconds"] / base, 3)
            m["throughput_vs_job"] = round(base / m["wall_seconds"], 3)
    # A gang is twice the Pods of a `per-input` input, run half as many at once: 2x the
    # per-input batch's wall time is the Pods' own cost, the rest is the gang's (rank 0
    # first where there is no DNS, a member's Pod per rank, teardown).
    gang, one = modes.get("gang", {}), modes.get("per-input", {})
    if gang.get("wall_seconds") and one.get("wall_seconds"):
        gang["wall_ratio_to_per_input"] = round(gang["wall_seconds"] / one["wall_seconds"], 3)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing (a mode that did not run, or failed)."""
    return round(a / b, 3) if a is not None and b else None


def best_chunk(modes: dict[str, dict[str, Any]]) -> tuple[str, float] | None:
    """The fixed chunk mode (chunk-K) with the shortest wall time in this run, if any ran."""
    walls = [
        (m["wall_seconds"], name)
        for name, m in modes.items()
        if name.startswith("chunk-") and m.get("wall_seconds")
    ]
    return (min(walls)[1], min(walls)[0]) if walls else None


def skewed_ideal(modes: dict[str, dict[str, Any]], parallel: int) -> float | None:
    """What the skewed batch could take at best: its work spread over P slots, or its
    longest input when that is longer, plus one Pod start (the job mode's median)."""
    skewed = modes.get("skewed", {})
    start = modes.get("job", {}).get("pod_start", {}).get("median_seconds")
    work, longest = skewed.get("work_seconds"), skewed.get("longest_input_seconds")
    if start is None or work is None or longest is None:
        return None
    return round(max(work / parallel, longest) + start, 2)


TARGET_KEYS = ("mode", "target", "value", "limit", "met")  # the rest of a row is its detail


def check_targets(modes: dict[str, dict[str, Any]], parallel: int) -> list[dict[str, Any]]:
    """Issue 30's targets on this run, each a row whatever ran: value None (n/a) when a
    mode it needs did not run or failed, never a stand-in. Printed and recorded, never
    asserted: one run on a shared machine is a figure, not a verdict."""
    modes = {name: m for name, m in modes.items() if m.get("ok")}

    def wall(mode: str) -> float | None:
        return modes.get(mode, {}).get("wall_seconds")

    def get(mode: str, *path: str) -> Any:
        value: Any = modes.get(mode, {})
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def row(
        mode: str,
        what: str,
        value: float | None,
        limit: float,
        at_least: bool = False,
        **detail: Any,
    ) -> dict[str, Any]:
        met = None if value is None else (value >= limit if at_least else value <= limit)
        return {"mode": mode, "target": what, "value": value, "limit": limit, "met": met, **detail}

    best = best_chunk(modes)
    ideal = skewed_ideal(modes, parallel)
    job_wpi = get("job", "run", "writes_per_input")
    container_wpi = get("container", "run", "writes_per_input")
    extra_writes = None if job_wpi is None or container_wpi is None else container_wpi - job_wpi
    rows = [
        row("function", "wall vs job <=", ratio(wall("function"), wall("job")), 0.25),
        row(
            "function",
            "wall vs best chunk-K <=",
            ratio(wall("function"), best[1] if best else None),
            1.2,
            best_chunk=best[0] if best else None,
        ),
        row("skewed", "wall vs ideal <=", ratio(wall("skewed"), ideal), 1.3, ideal_seconds=ideal),
    ]
    for mode in ("function", "skewed"):  # the default batch's progress, as a client sees it
        rows.append(row(mode, "first result s <=", get(mode, "first_result_seconds"), 15.0))
        rows.append(row(mode, "p95 lag s <=", get(mode, "lag", "p95_seconds"), 10.0))
    rows += [
        row(
            "per-input", "wall vs python-job <=", ratio(wall("per-input"), wall("python-job")), 1.6
        ),
        row("container", "throughput vs job >=", get("container", "throughput_vs_job"), 0.95, True),
        row("container", "writes/input - job's <=", bl.rounded(extra_writes), 1.0),
        row("container", "409 share <=", get("container", "run", "conflict_share"), 0.03),
    ]
    job_refill = get("job", "slot_refill", "p95_seconds")
    refill = get("container", "slot_refill", "p95_seconds")
    rows.append(
        row(
            "container",
            "p95 slot refill - job's <=",
            None if refill is None or job_refill is None else round(refill - job_refill, 2),
            0.0,
            job_p95=job_refill,
        )
    )
    return rows


def print_table(result: dict[str, Any]) -> None:
    t = Table(title=f"{result['tasks']} tasks, at most {result['parallel']} at once")
    for col in ("mode", "wall s", "tasks/s", "x job", "w/input", "409%", "+cleanup"):
        t.add_column(col, justify="right", no_wrap=True)
    for col in ("RSS MB", "status B", "1st s", "lag p95"):
        t.add_column(col, justify="right", no_wrap=True)
    for name, m in result["modes"].items():
        if "wall_seconds" not in m:
            t.add_row(name, "[red]failed")
            continue
        first = m.get("first_result_seconds")
        lag = (m.get("lag") or {}).get("p95_seconds")
        t.add_row(
            name,
            f"{m['wall_seconds']:.1f}",
            f"{m['tasks_per_second']:.1f}",
            f"{m.get('wall_ratio_to_job', float('nan')):.2f}",
            f"{m['run']['writes_per_input']:.1f}",
            f"{100 * m['run']['conflict_share']:.1f}",
            f"{m['lifecycle_writes_per_input']:.1f}",
            f"{m['rss'].get('rss_peak_mb')}",
            f"{m.get('status_bytes')}",
            "-" if first is None else f"{first:.1f}",
            "-" if lag is None else f"{lag:.1f}",
        )
    console.print(t)
    for name, m in result["modes"].items():
        if m.get("error"):
            console.print(f"[red]  {name}: {m['error'][:300]}")
        for window in ("run", "cleanup"):
            foreign = m.get(window, {}).get("foreign_activity") or {}
            if foreign.get("pods_added") or foreign.get("pods_deleted"):
                console.print(
                    f"[yellow]  {name} {window} window shared with other work: "
                    f"{foreign['pods_added']} Pods created, {foreign['pods_deleted']} deleted "
                    f"in {', '.join(foreign['namespaces'][:5])}: its writes are inflated"
                )
    gang = result["modes"].get("gang", {})
    if gang.get("wall_ratio_to_per_input"):
        console.print(
            f"  gang      wall vs per-input (2 hosts per input, same Pods at once): "
            f"{gang['wall_ratio_to_per_input']:.2f}x (2x is the Pods alone)"
        )
    start = result["modes"].get("job", {}).get("pod_start") or {}
    if start.get("median_seconds") is not None:
        console.print(
            f"  job       Pod creation to container start: median {start['median_seconds']:.1f}s,"
            f" p95 {start['p95_seconds']:.1f}s over {start['pods']} Pods"
        )
    for mode in ("job", "container"):
        refill = result["modes"].get(mode, {}).get("slot_refill") or {}
        if refill.get("median_seconds") is not None:
            console.print(
                f"  {mode:9} a Pod's end to its successor's create: median "
                f"{refill['median_seconds']:.1f}s, p95 {refill['p95_seconds']:.1f}s over "
                f"{refill['refills']} refills"
            )
    for tg in result["targets"]:
        mark = {True: "[green]met", False: "[red]missed", None: "[yellow]n/a"}[tg["met"]]
        value = "n/a" if tg["value"] is None else f"{tg['value']:.3g}"
        detail = "".join(
            f"  ({k} {v})" for k, v in tg.items() if k not in TARGET_KEYS and v is not None
        )
        console.print(
            f"  {tg['mode']:9} {tg['target']:26} {tg['limit']:.3g}: {value:>7}  {mark}{detail}"
        )


def plot(result: dict[str, Any], path: Path) -> None:
    """Wall time (ratio to the Job annotated) and writes/input stacked by resource."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(result["modes"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 0.7 * len(modes) + 2.8))
    colors = {
        "job": "#888888",
        "python-job": "#b5b5b5",
        "container": "#2a9d8f",
        "function": "#264653",
        "per-input": "#6d597a",
        "chunk-5": "#f4d58d",
        "chunk-10": "#e9c46a",
        "chunk-20": "#c9a227",
        "skewed": "#4d908e",
        "gang": "#e76f51",
    }
    walls = [result["modes"][m].get("wall_seconds") or 0 for m in modes]
    # each bar in three parts: submitting (functions: packaging and upload), running,
    # and collecting results after the batch ended (functions)
    submit, running, collect = [], [], []
    for m, wall in zip(modes, walls, strict=True):
        marks = result["modes"][m].get("milestones") or {}
        a = min(marks.get("submitted", 0.0), wall)
        b = min(marks.get("all_done", wall), wall)
        submit.append(a)
        running.append(max(b - a, 0.0))
        collect.append(max(wall - b, 0.0))
    color = [colors.get(m, "#e9c46a" if m.startswith("chunk-") else "#457b9d") for m in modes]
    ax1.barh(modes, submit, color=color, alpha=0.35, hatch="//", label="submitting")
    ax1.barh(modes, running, left=submit, color=color, label="running")
    ax1.barh(
        modes,
        collect,
        left=[a + b for a, b in zip(submit, running, strict=True)],
        color=color,
        alpha=0.35,
        hatch="..",
        label="collecting results",
    )
    ax1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    for y, m in enumerate(modes):
        d = result["modes"][m]
        if "wall_seconds" not in d:
            label = "  failed"
        else:
            ratio = d.get("wall_ratio_to_job")
            label = f"  {d['wall_seconds']:.1f}s" + (f"  ({ratio:.2f}x job)" if ratio else "")
        ax1.text(walls[y], y, label, va="center")
    ax1.set_xlim(0, max(walls + [1]) * 1.7)
    ax1.invert_yaxis()
    ax1.set_xlabel("seconds, submit to last task done (lower is better)")

    # writes/input stacked by the resources that matter most across modes
    n = result["tasks"]
    totals: dict[str, int] = {}
    for m in modes:
        for res, row in result["modes"][m]["run"]["by_resource"].items():
            totals[res] = totals.get(res, 0) + row["writes"]
    top = sorted(totals, key=lambda k: -totals[k])[:6]
    left = [0.0] * len(modes)
    palette = plt.get_cmap("tab10")
    for k, res in enumerate([*top, "other"]):
        widths = []
        for m in modes:
            if "wall_seconds" not in result["modes"][m]:  # a failed mode's writes mean little
                widths.append(0.0)
                continue
            rows = result["modes"][m]["run"]["by_resource"]
            if res == "other":
                v = sum(row["writes"] for name, row in rows.items() if name not in top)
            else:
                v = rows.get(res, {}).get("writes", 0)
            widths.append(v / n)
        ax2.barh(modes, widths, left=left, color=palette(k), label=res)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, m in enumerate(modes):
        run = result["modes"][m]["run"]
        label = f"  {run['writes_per_input']:.1f}  ({100 * run['conflict_share']:.1f}% 409)"
        if "wall_seconds" not in result["modes"][m]:
            label = "  failed"
        elif (run.get("foreign_activity") or {}).get("pods_added"):
            label += "\n  (window shared with other work)"
        ax2.text(left[y], y, label, va="center")
    ax2.set_xlim(0, max(left + [1]) * 1.5)
    ax2.invert_yaxis()
    ax2.set_xlabel("API writes per input while running (apiserver_request_total)")
    ax2.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4)
    fig.suptitle(f"{n} tasks, at most {result['parallel']} at once - {result['server_version']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def chunk_sizes(text: str) -> tuple[int, ...]:
    """--chunk-sizes: whole numbers from 2 to the client's bound, comma-separated (1 is the
    `per-input` mode); refused here, before any mode runs, rather than by the client in one."""
    sizes: list[int] = []
    for item in text.split(","):
        if not item.strip().isdigit() or not 2 <= int(item) <= r.MAX_CHUNK_SIZE:
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r} in {text!r}: give whole numbers from 2 to {r.MAX_CHUNK_SIZE},"
                " comma-separated, e.g. 5,10,20 (chunk size 1 is the per-input mode)"
            )
        sizes.append(int(item))
    return tuple(dict.fromkeys(sizes))


def runners(cfg: Config, slow: frozenset[int]) -> dict[str, Runner]:
    """How each mode runs (the modes of `mode_names`)."""

    def chunked(k: int) -> Runner:
        return lambda ns, c, tick, defer: run_function(ns, c, tick, defer, chunk_size=k)

    return {
        "job": run_job,
        # In the runner image function Pods run in: its Python, its cloudpickle.
        "python-job": lambda ns, c, tick, defer: run_job(
            ns, c, tick, defer, PYTHON_COMMAND, runner_image()
        ),
        "container": run_container,
        "function": run_function,  # chunk_size unset: the operator sizes the units
        "per-input": chunked(1),
        **{f"chunk-{k}": chunked(k) for k in cfg.chunk_sizes},
        "skewed": lambda ns, c, tick, defer: run_function(ns, c, tick, defer, slow=slow),
        "gang": lambda ns, c, tick, defer: run_function(ns, c, tick, defer, hosts=2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", "-n", type=int, default=300)
    parser.add_argument("--parallel", "-p", type=int, default=30)
    parser.add_argument(
        "--chunk-sizes",
        type=chunk_sizes,
        default=CHUNK_SIZES,
        help="the fixed chunk modes, one chunk-K mode per K (default 5,10,20)",
    )
    parser.add_argument("--namespace", default="kinetic-bench", help="prefix; one per mode")
    parser.add_argument(
        "--only",
        action="append",
        metavar="MODE",
        help=f"run only this mode (repeatable): {', '.join(mode_names(CHUNK_SIZES))}",
    )
    parser.add_argument("--timeout", type=float, default=900, help="per mode, seconds")
    parser.add_argument("--cleanup-timeout", type=float, default=300)
    parser.add_argument("--settle", type=float, default=2.0, help="seconds after each window")
    parser.add_argument("--idle", type=float, default=5.0, help="background window, seconds")
    parser.add_argument(
        "--allow-busy",
        action="store_true",
        help="measure even while Kinetic work of other namespaces runs (its figures are inflated)",
    )
    args = parser.parse_args(argv)
    known = mode_names(args.chunk_sizes)
    for mode in args.only or []:
        if mode not in known:
            parser.error(f"--only {mode}: no such mode; the modes are {', '.join(known)}")
    cfg = Config(args.tasks, args.parallel, args.chunk_sizes, args.timeout, args.namespace)
    slow = bl.slow_inputs(args.tasks)
    chosen = [m for m in known if not args.only or m in args.only]
    use_local_cluster()
    busy = bl.busy_elsewhere({f"{args.namespace}-{mode}" for mode in known})
    if busy and not args.allow_busy:
        console.print(
            f"[red]{len(busy)} Kinetic job(s) or batch(es) of other namespaces have not ended: "
            f"{', '.join(busy[:5])}{' ...' if len(busy) > 5 else ''}. Every mode would share "
            "the cluster with them and measure their Pods too. Delete them (kubectl delete "
            "kb/kj -n NAMESPACE NAME) or pass --allow-busy to measure anyway."
        )
        return 2
    for mode in chosen:  # before any window: namespace creation is not a mode's cost
        bl.ensure_namespace(f"{args.namespace}-{mode}")

    pid = bl.operator_pid()
    result: dict[str, Any] = {
        "when": bl.now_iso(),
        "tasks": args.tasks,
        "parallel": args.parallel,
        "chunk_sizes": list(args.chunk_sizes),
        "command": COMMAND,
        "python_command": PYTHON_COMMAND,
        "skew": {
            "share": bl.SKEW_SHARE,
            "seed": bl.SKEW_SEED,
            "seconds": bl.SHORT_SECONDS,
            "slow_seconds": bl.SLOW_SECONDS,
            "slow_inputs": sorted(slow),
        },
        "server_version": bl.server_version(),
        "cpus": os.cpu_count(),
        "operator_pid": pid,
        "operator_pod_ttl_seconds": bl.process_env(pid, "KINETIC_POD_TTL_SECONDS") if pid else None,
    }
    if pid is None:
        console.print("[yellow]no operator container on the local node: RSS not measured")
    sampler = bl.RssSampler()
    sampler.start()
    console.print(f"background: {args.idle:.0f}s of idle cluster ...")
    idle = bl.Window()
    time.sleep(args.idle)
    idle_writes, idle_seconds = idle.close()
    result["background"] = idle_writes.to_json(seconds=idle_seconds)

    modes: dict[str, dict[str, Any]] = {}
    how = runners(cfg, slow)
    with bl.progress_bar(console) as progress:
        for mode in chosen:
            modes[mode] = measure(
                mode, how[mode], cfg, sampler, progress, args.settle, args.cleanup_timeout
            )
    sampler.stop()
    add_ratios(modes)
    result["modes"] = modes
    result["targets"] = check_targets(modes, args.parallel)
    latest, png = bl.write_results("", result, plot)
    print_table(result)
    console.print(f"results: {latest}  plot: {png}")
    return 0 if all(m.get("ok") for m in modes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
