"""Operator failover: one replica alone against two with leader election, in one run.

For each setup of the installed chart (first ``operator.replicas: 1`` without
leader election, the previous default; then the chart's default, two replicas
with leader election), each fault is made once while a probe runs:

* ``sigkill``: SIGKILL of the reconciling replica's process on this node (an
  OOM kill); the kubelet restarts its container;
* ``force-delete``: ``kubectl delete pod --grace-period=0 --force`` of its Pod;
  the Deployment makes another;
* ``rollout-restart``: ``kubectl rollout restart`` of the Deployment.

Measured for each:

* **reconciled after**: from the fault to the first status of a KineticJob
  submitted right after it: how long a user's new job waits for an operator;
* **admission**: a server-side dry run of an invalid KineticJob every 0.25 s
  from the fault until the operator is whole again; each answer is a denial
  (the webhook answered), an admission (the webhook was away and fails open:
  an invalid object would have been stored) or an error.

Needs the local cluster (it signals a process on the node) and leaves the
release as it found it. Writes ``bench/results/failover-latest.{json,png}``.

    make bench-failover
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import benchlib as bl
from kinetic.api.doctor import WEBHOOK_SUFFIX, invalid_job
from kinetic.api.kube import KubeClient
from kinetic.model import resources as r
from kinetic_dev import LocalConfig
from kinetic_dev import operator as local_operator
from kubernetes import client
from rich.console import Console
from rich.table import Table

kube = KubeClient()  # the client's own calls to the API server, through the current context

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "kinetic-bench-failover"
FAULTS = ("sigkill", "force-delete", "rollout-restart")
SETUPS = {
    "one replica": {"operator": {"replicas": 1, "leaderElection": False}},
    "two replicas, elected": {},
}
PROBE_EVERY = 0.25  # seconds between admission probes


@dataclass
class Admission:
    """What the webhook answered while the operator was not whole."""

    denied: int = 0
    admitted: int = 0  # fail-open: the webhook did not answer, the invalid object got in
    errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event, repr=False)

    def probe(self) -> None:
        custom = kube.custom
        body = {**invalid_job(), "metadata": {"generateName": "failover-probe-"}}
        while not self.stop.is_set():
            try:
                custom.create_namespaced_custom_object(
                    r.GROUP, r.VERSION, NAMESPACE, r.JOB_PLURAL, body, dry_run="All"
                )
                self.admitted += 1
            except client.ApiException as e:
                if WEBHOOK_SUFFIX in _message(e):
                    self.denied += 1
                else:
                    self.errors += 1
            except Exception:  # noqa: BLE001 - a timeout or a refused connection
                self.errors += 1
            self.stop.wait(PROBE_EVERY)


def _message(e: client.ApiException) -> str:
    """The API server's message (its body is a Status, the quotes in it escaped)."""
    try:
        return str(json.loads(e.body or "{}").get("message") or "")
    except ValueError:
        return str(e.body or "")


@dataclass
class Outcome:
    setup: str
    fault: str
    reconciled_after: float
    whole_after: float
    denied: int
    admitted: int
    errors: int


def upgrade(values: dict[str, Any]) -> None:
    import helm_sdkpy as helm

    cfg = LocalConfig()
    config = helm.Configuration(namespace=local_operator.NAMESPACE, kubeconfig=str(cfg.kubeconfig))
    chart = str(local_operator.chart_dir(REPO))
    asyncio.run(helm.Upgrade(config).run(local_operator.RELEASE, chart, values=values, wait=False))
    time.sleep(2)
    wait_whole(cfg, 240)


def wait_whole(cfg: LocalConfig, timeout: float) -> float:
    started = time.monotonic()
    while not local_operator.ready(cfg):
        if time.monotonic() - started > timeout:
            raise TimeoutError("the operator did not become Ready")
        time.sleep(0.25)
    return time.monotonic() - started


def fault(cfg: LocalConfig, what: str) -> None:
    pod = local_operator.operator_pod(cfg)
    assert pod is not None, "no operator Pod"
    if what == "sigkill":
        pid = local_operator.container_pid(cfg, pod)
        assert pid is not None, "no operator process on this node"
        os.kill(pid, signal.SIGKILL)
        return
    args = {
        "force-delete": ["delete", "pod", pod["metadata"]["name"], "--grace-period=0", "--force"],
        "rollout-restart": ["rollout", "restart", f"deployment/{local_operator.DEPLOYMENT}"],
    }[what]
    subprocess.run(
        ["kubectl", "--kubeconfig", str(cfg.kubeconfig), "-n", local_operator.NAMESPACE, *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


def probe_job() -> str:
    name = f"probe-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.JOB_KIND,
        "metadata": {"name": name},
        "spec": {"container": {"image": "busybox:1.36", "command": ["true"]}},
    }
    kube.create(r.JOB_PLURAL, NAMESPACE, body)
    return name


def reconciled(name: str, timeout: float = 180) -> None:
    started = time.monotonic()
    while not ((kube.get(r.JOB_PLURAL, NAMESPACE, name) or {}).get("status")):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"job {name} was not reconciled within {timeout:.0f} s")
        time.sleep(0.1)


def one(cfg: LocalConfig, setup: str, what: str) -> Outcome:
    admission = Admission()
    prober = threading.Thread(target=admission.probe, daemon=True)
    started = time.monotonic()
    fault(cfg, what)
    prober.start()
    name = probe_job()
    reconciled(name)
    reconciled_after = time.monotonic() - started
    time.sleep(3)  # the controllers have seen the fault before "whole" is judged
    wait_whole(cfg, 240)
    whole_after = time.monotonic() - started
    admission.stop.set()
    prober.join(10)
    kube.delete(r.JOB_PLURAL, NAMESPACE, name)
    return Outcome(
        setup,
        what,
        reconciled_after,
        whole_after,
        admission.denied,
        admission.admitted,
        admission.errors,
    )


def plot(data: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["outcomes"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    for i, setup in enumerate(SETUPS):
        mine = [o for o in rows if o["setup"] == setup]
        xs = [FAULTS.index(o["fault"]) + (i - 0.5) * width for o in mine]
        left.bar(xs, [o["reconciled_after"] for o in mine], width, label=setup)
        total = [max(1, o["denied"] + o["admitted"] + o["errors"]) for o in mine]
        right.bar(xs, [100 * o["admitted"] / t for o, t in zip(mine, total, strict=True)], width,
                  label=setup)  # fmt: skip
    for ax, title in (
        (left, "fault → a new job's first reconcile (s)"),
        (right, "invalid objects admitted while recovering (%)"),
    ):
        ax.set_xticks(range(len(FAULTS)), FAULTS)
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    console = Console()
    cfg = LocalConfig()
    if not cfg.kubeconfig.exists():
        console.print("needs the local cluster: make cluster-up")
        return 2
    os.environ.setdefault("KUBECONFIG", str(cfg.kubeconfig))
    bl.ensure_namespace(NAMESPACE)
    installed = local_operator.installed_values(cfg)
    outcomes: list[Outcome] = []
    try:
        with bl.progress_bar(console) as bar:
            task = bar.add_task("failover", total=len(SETUPS) * len(FAULTS), detail="")
            for setup, values in SETUPS.items():
                bar.update(task, detail=f"installing: {setup}")
                upgrade({**installed, **values})
                for what in FAULTS:
                    bar.update(task, detail=f"{setup}: {what}")
                    outcomes.append(one(cfg, setup, what))
                    bar.advance(task)
    finally:
        upgrade(installed)
    table = Table(title="operator failover (one run)")
    for column in (
        "setup",
        "fault",
        "reconciled after",
        "whole after",
        "denied",
        "admitted",
        "errors",
    ):
        table.add_column(column)
    for o in outcomes:
        table.add_row(
            o.setup, o.fault, f"{o.reconciled_after:.1f} s", f"{o.whole_after:.1f} s",
            str(o.denied), str(o.admitted), str(o.errors),
        )  # fmt: skip
    console.print(table)
    data = {
        "when": bl.now_iso(),
        "server": bl.server_version(),
        "probe_every_seconds": PROBE_EVERY,
        "outcomes": [asdict(o) for o in outcomes],
    }
    latest, png = bl.write_results("failover-", data, plot)
    console.print(f"results: {latest} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
