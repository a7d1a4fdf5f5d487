"""Kinetic against a plain batch/v1 Job doing the same work on the same cluster.

Three ways to run N short tasks with at most P at once:

  job        one batch/v1 Job, completions=N, parallelism=P (the baseline)
  container  a KineticBatch whose template is the same container command
  function   `f.run_async_map(range(N))` of a Python function (runner included)

Each is timed from submission to the last task finished, in the same run, so
the ratios are comparable; absolute numbers depend on the machine. Results go
to bench/results/<timestamp>.json and a plot next to it.

    python bench/run.py --tasks 100 --parallel 20
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import kinetic
from kinetic import kube
from kinetic import resources as r
from kinetic.local import use_local_cluster
from kubernetes import client, watch

RESULTS = Path(__file__).resolve().parent / "results"
COMMAND = ["sh", "-c", "echo task; sleep 0.2"]


def ensure_namespace(name: str) -> None:
    core = kube.core()
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except client.ApiException as e:
        if e.status != 409:
            raise
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # 1.20 admits pods only once the SA token exists
        try:
            if core.read_namespaced_service_account("default", name).secrets:
                return
        except client.ApiException:
            pass
        time.sleep(0.2)


def run_plain_job(ns: str, tasks: int, parallel: int) -> float:
    """The baseline: one Job, the Job controller does the fan-out."""
    batch = client.BatchV1Api(kube.api_client())
    name = f"bench-job-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": tasks,
            "parallelism": parallel,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "task", "image": "busybox", "command": COMMAND}],
                }
            },
        },
    }
    started = time.monotonic()
    batch.create_namespaced_job(ns, body)
    w = watch.Watch()
    for event in w.stream(batch.list_namespaced_job, ns, field_selector=f"metadata.name={name}"):
        st = event["object"].status
        if (st.succeeded or 0) + (st.failed or 0) >= tasks:
            w.stop()
    elapsed = time.monotonic() - started
    batch.delete_namespaced_job(name, ns, propagation_policy="Background")
    return elapsed


def run_container_batch(ns: str, tasks: int, parallel: int) -> float:
    """The same command as a KineticBatch: the operator does the fan-out."""
    name = f"grp-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "template": {"container": {"image": "busybox", "command": COMMAND}},
            "inputs": {"items": list(range(tasks))},
            "maxConcurrent": parallel,
        },
    }
    started = time.monotonic()
    kube.create(r.BATCH_PLURAL, ns, body)
    _wait_batch(ns, name)
    elapsed = time.monotonic() - started
    kube.delete(r.BATCH_PLURAL, ns, name)
    return elapsed


def _wait_batch(ns: str, name: str) -> None:
    for obj in kube.watch_one(r.BATCH_PLURAL, ns, name, timeout=3600):
        if obj and r.Phase(obj.get("status", {}).get("phase", "PENDING")).terminal:
            return


def run_function_batch(ns: str, tasks: int, parallel: int) -> float:
    """A Python function over range(tasks): upload, runner, result download included."""

    @kinetic.run(namespace=ns)
    def task(i: int) -> int:
        time.sleep(0.2)
        return i

    started = time.monotonic()
    batch = task.run_async_map(range(tasks), max_concurrent=parallel)
    values = batch.results(cleanup=True, progress=False)
    elapsed = time.monotonic() - started
    assert values == list(range(tasks)), "results out of order or missing"
    batch.cleanup()
    return elapsed


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["seconds"])
    seconds = [result["seconds"][n] for n in names]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bars = ax.barh(names, seconds, color=["#888888", "#2a9d8f", "#264653"][: len(names)])
    for bar, n in zip(bars, names, strict=True):
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f"  {result['seconds'][n]:.1f}s  ({result['ratio_to_job'][n]:.2f}x job)",
            va="center",
        )
    ax.set_xlabel("seconds from submit to last task done (lower is better)")
    ax.set_title(f"{result['tasks']} tasks, at most {result['parallel']} at once")
    ax.set_xlim(0, max(seconds) * 1.6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=20)
    parser.add_argument("--namespace", default="kinetic-bench")
    parser.add_argument("--only", choices=["job", "container", "function"], action="append")
    args = parser.parse_args(argv)
    use_local_cluster()
    ensure_namespace(args.namespace)

    runners = {
        "job": run_plain_job,
        "container": run_container_batch,
        "function": run_function_batch,
    }
    seconds: dict[str, float] = {}
    for name, fn in runners.items():
        if args.only and name not in args.only:
            continue
        print(f"{name:10} running {args.tasks} tasks, {args.parallel} at once ...", flush=True)
        seconds[name] = fn(args.namespace, args.tasks, args.parallel)
        print(f"{name:10} {seconds[name]:7.1f}s  {args.tasks / seconds[name]:6.1f} tasks/s")

    base = seconds.get("job")
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "tasks": args.tasks,
        "parallel": args.parallel,
        "seconds": seconds,
        "tasks_per_second": {n: args.tasks / s for n, s in seconds.items()},
        "ratio_to_job": {n: (s / base if base else float("nan")) for n, s in seconds.items()},
    }
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    if base:
        plot(result, stem.with_suffix(".png"))
        print(f"plot: {stem.with_suffix('.png')}")
    print(json.dumps(result["ratio_to_job"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
