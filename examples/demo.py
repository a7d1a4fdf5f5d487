"""The Kinetic tour: one job, then a small hyperparameter sweep, on the local cluster.

Run it with `make demo` (which starts the local cluster and the operator if
they are not up) or, against any cluster with the operator installed,
`python examples/demo.py`.
"""

from __future__ import annotations

import sys
import time

import kinetic
from kinetic.api.jobs import list_jobs_with_status
from rich.console import Console
from rich.table import Table

try:
    from kinetic_dev import use_local_cluster
except ModuleNotFoundError:  # the slim client alone: use the cluster KUBECONFIG names

    def use_local_cluster() -> bool:
        return False


console = Console()


def step(text: str) -> None:
    console.print(f"\n[bold cyan]==>[/bold cyan] {text}")


@kinetic.run(accelerator="cpu")
def fit(lr: float, epochs: int = 200) -> float:
    """A tiny least-squares fit by gradient descent; returns the final loss."""
    import random

    rng = random.Random(0)
    xs = [rng.uniform(-1, 1) for _ in range(64)]
    ys = [3.0 * x + 0.5 + rng.gauss(0, 0.05) for x in xs]
    w = b = 0.0
    for epoch in range(epochs):
        gw = sum(2 * (w * x + b - y) * x for x, y in zip(xs, ys, strict=True)) / len(xs)
        gb = sum(2 * (w * x + b - y) for x, y in zip(xs, ys, strict=True)) / len(xs)
        w, b = w - lr * gw, b - lr * gb
        if epoch % 50 == 0:
            print(f"lr={lr} epoch={epoch} w={w:.3f} b={b:.3f}", flush=True)
    return sum((w * x + b - y) ** 2 for x, y in zip(xs, ys, strict=True)) / len(xs)


def main() -> int:
    use_local_cluster()

    step("Submitting one job: fit(lr=0.1) — the client uploads a payload and creates a KineticJob")
    job = fit.run_async(0.1)
    console.print(f"    job id: [bold]{job.job_id}[/bold] (namespace {job.namespace})")

    step("Listing jobs, as `kinetic jobs list` does")
    for h, status in list_jobs_with_status(namespace=job.namespace):
        name = h.func_name if len(h.func_name) <= 24 else h.func_name[:23] + "…"
        console.print(f"    {h.job_id:28} {name:24} {status.get('phase', 'PENDING')}")

    step("Waiting for it on a watch; the operator moves it through its phases")
    job.wait(on_status_change=lambda s: console.print(f"    status: {s.value}"))

    step("Its logs, read through the API server (`kinetic jobs logs --tail 3`)")
    for line in job.tail(3).splitlines():
        console.print(f"    | {line}")

    step("Its result (the value the function returned), then cleanup of the job")
    loss = job.result()
    console.print(f"    final loss: [bold green]{loss:.5f}[/bold green]")

    rates = [0.001, 0.01, 0.03, 0.1, 0.3, 0.6]
    step(f"A sweep over {len(rates)} learning rates with run_async_map (max 3 at once)")
    batch = fit.run_async_map(rates, max_concurrent=3, name="lr-sweep", tags={"demo": "yes"})
    console.print(
        f"    batch id: [bold]{batch.group_id}[/bold] — also `kubectl get kb {batch.group_id}`"
    )
    started = time.monotonic()
    losses = batch.results(progress=True)
    elapsed = time.monotonic() - started

    table = Table(title=f"Results in input order ({elapsed:.1f}s)")
    table.add_column("lr", justify="right")
    table.add_column("final loss", justify="right")
    best = min(range(len(rates)), key=lambda i: losses[i])
    for i, (lr, value) in enumerate(zip(rates, losses, strict=True)):
        style = "bold green" if i == best else ""
        table.add_row(f"{lr:g}", f"{value:.5f}", style=style)
    console.print(table)
    console.print(f"    best learning rate: [bold]{rates[best]:g}[/bold]")

    step("One input of the batch: its own handle, backed by the batch, its Pods and storage")
    one = batch.jobs[best]
    console.print(
        f"    {one.job_id} (also `kinetic.attach({one.job_id!r})`, "
        f"`kinetic jobs logs {one.job_id}`): {one.status().value}"
    )
    for attempt in one.attempts():
        console.print(
            f"    attempt {attempt['attempt']}: Pod {attempt['pod']}, {attempt['outcome']}"
        )
    for line in one.tail(2).splitlines():
        console.print(f"    | {line}")
    console.print(f"    every input: {batch.status_counts()}")

    step("Cleaning up the batch (its Pods, artifacts, logs and manifest)")
    batch.cleanup()
    console.print("    done.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
