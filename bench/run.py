"""Kinetic against a plain batch/v1 Job doing the same work, in one run on one cluster.

Five ways to run N short tasks with at most P at once:

  job        one batch/v1 Job, completions=N, parallelism=P (the baseline)
  python-job the same Job, its task a Python process that imports cloudpickle:
             the floor for one Python process per input on this cluster
  container  a KineticBatch whose template is the same container command
  function   `f.run_async_map(range(N), max_concurrent=P)` of a function sleeping 0.2 s
  chunked    the same with `chunk_size=K` (K consecutive inputs per Pod)
  gang       the same function with `hosts=2`: every input a gang of two Pods, P/2
             gangs at once (so P Pods, as in `function`); compare it with `function`

Each mode runs alone, in its own namespace, between two scrapes of the API
server's request counters; its objects are then deleted and the deletion
waited for in a second window, so one mode's garbage collection never lands
in the next one's figures. Results go to bench/results/latest.json (and a
timestamped copy) with a plot beside them.

    python bench/run.py --tasks 300 --parallel 30 --chunk-size 10
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
from kinetic.api.kube import KubeClient
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
MODES = ("job", "python-job", "container", "function", "chunked", "gang")

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


@dataclass
class Config:
    tasks: int
    parallel: int
    chunk_size: int
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
    if finished_as != "Complete":
        out.notes.append(f"Job ended {finished_as}")
    return out


def run_container(ns: str, cfg: Config, tick: Tick, defer: Defer) -> Outcome:
    """The same command as a KineticBatch over inline items: the operator does the fan-out."""
    name = f"grp-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "template": {"container": {"image": "busybox", "command": COMMAND}},
            "inputs": {"items": list(range(cfg.tasks))},
            "maxConcurrent": cfg.parallel,
        },
    }
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
) -> Outcome:
    """A Python function over range(N): upload, runner and ordered result download included.

    The function is defined here, nested, so that cloudpickle ships it by
    value: the runner on the node has no `bench` package to import it from.
    """

    @kinetic.run(namespace=ns)
    def task(i: int) -> int:
        import time as _time

        _time.sleep(0.2)
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
    final = kube.get(r.BATCH_PLURAL, ns, batch.group_id)
    out = Outcome(
        wall=wall,
        final_status=(final or {}).get("status"),
        status_bytes_max=max(
            x for x in (follower.status_bytes_max, bl.status_bytes(final), 0) if x is not None
        ),
        milestones=clock.marks,
        timeline=clock.timeline,
    )
    if values != list(range(cfg.tasks)):
        wrong = [i for i, v in enumerate(values) if v != i][:5]
        out.notes.append(f"results out of order or wrong, e.g. at {wrong}")
    return out


class BatchFollower:
    """Follows a KineticBatch on a watch: progress, largest status seen, final status."""

    def __init__(self, ns: str, name: str, tick: Tick, timeout: float, clock: Milestones) -> None:
        self.ns, self.name, self.tick, self.timeout = ns, name, tick, timeout
        self.clock = clock
        self.last_status: dict | None = None
        self.status_bytes_max: int | None = None

    def follow(self) -> None:
        for obj in kube.watch_one(r.BATCH_PLURAL, self.ns, self.name, timeout=self.timeout):
            if obj is None:
                return
            size = bl.status_bytes(obj) or 0
            self.status_bytes_max = max(self.status_bytes_max or 0, size)
            status = obj.get("status") or {}
            self.last_status = status
            c = status.get("counts", {})
            done = c.get("succeeded", 0) + c.get("failed", 0) + c.get("cancelled", 0)
            self.clock.progress(done, c.get("running", 0))
            self.tick(done, f"running {c.get('running', 0)}  failed {c.get('failed', 0)}")
            if r.Phase(status.get("phase") or "PENDING").terminal:
                self.clock.mark("all_done")
                return


class Milestones:
    """When a mode passed each stage, as seen by the bench: where its wall time went."""

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
    # A gang is twice the Pods of a `function` input, run half as many at once: 2x the
    # function batch's wall time is the Pods' own cost, the rest is the gang's (rank 0
    # first where there is no DNS, a member's Pod per rank, teardown).
    gang, fn = modes.get("gang", {}), modes.get("function", {})
    if gang.get("wall_seconds") and fn.get("wall_seconds"):
        gang["wall_ratio_to_function"] = round(gang["wall_seconds"] / fn["wall_seconds"], 3)


def check_targets(modes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The targets, evaluated on this run (None when a mode did not finish): the container
    batch against the Job, chunked against the Job, and the function batch against the
    python-job floor (one Python process per input, no Kinetic)."""
    job = modes.get("job", {})
    job_wpi = job.get("run", {}).get("writes_per_input")

    def row(mode: str, what: str, value: float | None, limit: float, at_least: bool) -> dict:
        met = None if value is None else (value >= limit if at_least else value <= limit)
        return {"mode": mode, "target": what, "value": value, "limit": limit, "met": met}

    out = []
    c = modes.get("container")
    if c is not None:
        out.append(row("container", "throughput vs job >=", c.get("throughput_vs_job"), 0.9, True))
        if job_wpi is not None:
            wpi = c["run"].get("writes_per_input") if c.get("wall_seconds") else None
            out.append(row("container", "writes/input <= job + 2", wpi, job_wpi + 2, False))
        share = c["run"].get("conflict_share") if c.get("wall_seconds") else None
        out.append(row("container", "409 share <=", share, 0.03, False))
    if "chunked" in modes:
        ratio = modes["chunked"].get("wall_ratio_to_job")
        out.append(row("chunked", "wall vs job <=", ratio, 1.5, False))
    floor = modes.get("python-job", {}).get("wall_seconds")
    fn = modes.get("function", {}).get("wall_seconds")
    if "function" in modes:
        ratio = fn / floor if fn and floor else None
        out.append(row("function", "wall vs python-job <=", ratio, 2.0, False))
    return out


def print_table(result: dict[str, Any]) -> None:
    t = Table(title=f"{result['tasks']} tasks, at most {result['parallel']} at once")
    for col in ("mode", "wall s", "tasks/s", "x job", "w/input", "409%", "+cleanup"):
        t.add_column(col, justify="right", no_wrap=True)
    for col in ("RSS MB", "status B"):
        t.add_column(col, justify="right", no_wrap=True)
    for name, m in result["modes"].items():
        if "wall_seconds" not in m:
            t.add_row(name, "[red]failed")
            continue
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
    if gang.get("wall_ratio_to_function"):
        console.print(
            f"  gang      wall vs function (2 hosts per input, same Pods at once): "
            f"{gang['wall_ratio_to_function']:.2f}x (2x is the Pods alone)"
        )
    for tg in result["targets"]:
        mark = {True: "[green]met", False: "[red]missed", None: "[yellow]n/a"}[tg["met"]]
        value = "-" if tg["value"] is None else f"{tg['value']:.3g}"
        console.print(f"  {tg['mode']:9} {tg['target']:26} {tg['limit']:.3g}: {value:>7}  {mark}")


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
        "chunked": "#e9c46a",
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
    color = [colors.get(m, "#457b9d") for m in modes]
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
    fig.suptitle(
        f"{n} tasks, at most {result['parallel']} at once"
        f" (chunked: {result['chunk_size']} per Pod) - {result['server_version']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", "-n", type=int, default=300)
    parser.add_argument("--parallel", "-p", type=int, default=30)
    parser.add_argument("--chunk-size", type=int, default=10)
    parser.add_argument("--namespace", default="kinetic-bench", help="prefix; one per mode")
    parser.add_argument("--only", choices=MODES, action="append", help="repeatable")
    parser.add_argument("--timeout", type=float, default=900, help="per mode, seconds")
    parser.add_argument("--cleanup-timeout", type=float, default=300)
    parser.add_argument("--settle", type=float, default=2.0, help="seconds after each window")
    parser.add_argument("--idle", type=float, default=5.0, help="background window, seconds")
    args = parser.parse_args(argv)
    use_local_cluster()
    cfg = Config(args.tasks, args.parallel, args.chunk_size, args.timeout, args.namespace)
    runners: dict[str, Runner] = {
        "job": run_job,
        # In the runner image function Pods run in: its Python, its cloudpickle.
        "python-job": lambda ns, c, tick, defer: run_job(
            ns, c, tick, defer, PYTHON_COMMAND, runner_image()
        ),
        "container": run_container,
        "function": run_function,
        "chunked": lambda ns, c, tick, defer: run_function(ns, c, tick, defer, c.chunk_size),
        "gang": lambda ns, c, tick, defer: run_function(ns, c, tick, defer, hosts=2),
    }
    chosen = [m for m in MODES if not args.only or m in args.only]
    for mode in chosen:  # before any window: namespace creation is not a mode's cost
        bl.ensure_namespace(f"{args.namespace}-{mode}")

    pid = bl.operator_pid()
    result: dict[str, Any] = {
        "when": bl.now_iso(),
        "tasks": args.tasks,
        "parallel": args.parallel,
        "chunk_size": args.chunk_size,
        "command": COMMAND,
        "python_command": PYTHON_COMMAND,
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
    with bl.progress_bar(console) as progress:
        for mode in chosen:
            modes[mode] = measure(
                mode, runners[mode], cfg, sampler, progress, args.settle, args.cleanup_timeout
            )
    sampler.stop()
    add_ratios(modes)
    result["modes"] = modes
    result["targets"] = check_targets(modes)
    latest, png = bl.write_results("", result, plot)
    print_table(result)
    console.print(f"results: {latest}  plot: {png}")
    return 0 if all(m.get("ok") for m in modes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
