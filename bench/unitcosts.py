"""What a Pod and a process cost on this machine: the figures `bench/unitsim.py` is fit to.

Two measurements, each short:

  pods   Plain Pods (the busybox stand-in, no Kinetic) created in waves of 1, 10 and 30 at
         once in a namespace of their own, then deleted. Per Pod: create -> the watch shows
         it Running, and create -> its container's first instruction (the container prints
         the node's uptime, the same clock as this process's, since the node is this
         machine). Per wave: the machine's CPU above its idle rate from the first create
         until the last Pod is gone (so a Pod's teardown counts), the CPU of the node's and
         the control plane's processes, and the API writes (the API server's own counter).
  fork   What a Python process that has imported numpy pays to fork a child that runs one
         call, against starting a fresh interpreter that imports numpy; with and without
         a large heap in the parent (a model's weights): fork copies page tables, not pages.

    python bench/unitcosts.py pods [--waves 1,1,1,10,30]
    python bench/unitcosts.py fork [--runs 20]

Results go to bench/results/unitcosts-<what>-latest.json (and a timestamped copy).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
NAMESPACE = "kinetic-bench-unitcosts"
IMAGE = "busybox:1.36"  # tagged: the kubelet does not ask the registry again (like the runner's)
# The node's processes whose CPU a Pod's life costs (the Pod's own `sleep` costs nothing).
DAEMONS = (
    "kubelet",
    "containerd",
    "kube-apiserver",
    "etcd",
    "kube-scheduler",
    "kube-controller",  # kube-controller-manager, as /proc/<pid>/comm cuts it (15 chars)
    "kube-proxy",
)
# Writes a Pod's life makes (the rest of a window's writes are the cluster's background
# or someone else's work, reported beside them).
POD_WRITES = ("pods", "pods/status", "pods/binding", "events")
TICKS = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- the machine's CPU


def machine_busy_seconds() -> float:
    """CPU-seconds the machine has spent on anything but idle and iowait since boot."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    idle = ticks[3] + ticks[4]
    return (sum(ticks[:8]) - idle) / TICKS


def uptime() -> float:
    """The node's uptime (what the Pods print: one machine, one clock)."""
    return float(Path("/proc/uptime").read_text().split()[0])


class ProcessCpu:
    """CPU of the node's and control plane's processes, by name, across snapshots.

    Each process counts its own CPU and that of the children it reaped (containerd runs
    the CNI plugins, each shim runs runc). A process that appears between snapshots
    counts from zero, and a process that exits counts what it had when last seen, so
    take a snapshot while the Pods' shims are still alive (before the delete). Another
    tenant's Pods started meanwhile count too: the window says when there were any.
    """

    def __init__(self) -> None:
        import benchlib as bl

        self.operator = bl.operator_pid()
        self.first: dict[int, tuple[str, float]] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.snapshot(first=True)

    def snapshot(self, first: bool = False) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                comm = Path(entry.path, "comm").read_text().strip()
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            name = self.name_of(int(entry.name), comm)
            if name is None:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            cpu = sum(int(x) for x in fields[11:15]) / TICKS  # utime stime cutime cstime
            self.last[int(entry.name)] = (name, cpu)
            if first:
                self.first[int(entry.name)] = (name, cpu)

    def name_of(self, pid: int, comm: str) -> str | None:
        if comm.startswith("containerd"):  # the node's, not Docker's (which builds images)
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                return None
            if b"docker" in cmdline or b"moby" in cmdline:
                return None
            return "containerd-shim" if comm.startswith("containerd-shim") else "containerd"
        if pid == self.operator:
            return "operator"
        return next((d for d in DAEMONS if comm.startswith(d)), None)

    def used(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, (name, cpu) in self.last.items():
            before = self.first.get(pid, (name, 0.0))[1]
            out[name] = round(out.get(name, 0.0) + cpu - before, 3)
        return out


def idle_rate(seconds: float) -> float:
    """Cores the machine keeps busy without us (the control plane, and anyone else)."""
    busy0, t0 = machine_busy_seconds(), time.monotonic()
    time.sleep(seconds)
    return (machine_busy_seconds() - busy0) / (time.monotonic() - t0)


# --------------------------------------------------------------------------- pods


@dataclass
class PodTimes:
    name: str
    created: float = 0.0  # monotonic, just before its create was sent
    created_uptime: float = 0.0  # the node's uptime then
    running_seen: float | None = None  # monotonic, the watch showed phase Running
    container_uptime: float | None = None  # the node's uptime the container printed

    def to_start(self) -> float | None:
        if self.container_uptime is None:
            return None
        return round(self.container_uptime - self.created_uptime, 3)

    def to_running(self) -> float | None:
        if self.running_seen is None:
            return None
        return round(self.running_seen - self.created, 3)


@dataclass
class Wave:
    size: int
    pods: list[PodTimes] = field(default_factory=list)
    cpu_seconds: float = 0.0  # machine CPU above the idle rate, first create -> last Pod gone
    busy_seconds: float = 0.0  # machine CPU, all of it, in the same window
    idle_cores: float = 0.0  # the idle rate: the mean of the readings before and after
    seconds: float = 0.0
    daemons: dict[str, float] = field(default_factory=dict)
    writes: int = 0
    pod_writes: int = 0
    writes_by_resource: dict[str, int] = field(default_factory=dict)
    foreign: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        starts = [p.to_start() for p in self.pods if p.to_start() is not None]
        running = [p.to_running() for p in self.pods if p.to_running() is not None]
        return {
            "size": self.size,
            "to_container_start": spread(starts),
            "to_running_seen": spread(running),
            "cpu_per_pod": round(self.cpu_seconds / self.size, 3),
            "process_cpu_per_pod": round(sum(self.daemons.values()) / self.size, 3),
            "machine_busy_seconds": round(self.busy_seconds, 2),
            "idle_cores": round(self.idle_cores, 3),
            "writes_per_pod": round(self.writes / self.size, 2),
            "pod_writes_per_pod": round(self.pod_writes / self.size, 2),
            "seconds": round(self.seconds, 2),
        }


def spread(values: list[float | None]) -> dict[str, float]:
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return {}
    return {
        "min": xs[0],
        "median": round(statistics.median(xs), 3),
        "max": xs[-1],
        "mean": round(statistics.fmean(xs), 3),
    }


def pod_body(name: str, wave: str) -> dict[str, Any]:
    """A plain Pod, shaped like the operator's (restricted security, no token), that
    prints the node's uptime as its first act and then works 0.2 s."""
    from kinetic_operator.logic.podspec import CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench.kinetic.dev/wave": wave}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": POD_SECURITY_CONTEXT,
            "containers": [
                {
                    "name": "task",
                    "image": IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "cat /proc/uptime; sleep 0.2"],
                    "securityContext": CONTAINER_SECURITY_CONTEXT,
                }
            ],
        },
    }


class RunningWatch(threading.Thread):
    """Times, on a watch opened before the first create, when each Pod is seen Running,
    and when all have ended."""

    def __init__(self, wave: str, pods: dict[str, PodTimes]) -> None:
        super().__init__(daemon=True, name="running-watch")
        self.wave, self.pods = wave, pods
        self.ended: set[str] = set()
        self.all_ended = threading.Event()
        self.ready = threading.Event()
        self.stop_event = threading.Event()

    def run(self) -> None:
        from kinetic.api.kube import KubeClient
        from kubernetes import watch

        core = KubeClient().core
        listed = core.list_namespaced_pod(NAMESPACE, label_selector=self.selector, limit=1)
        version = listed.metadata.resource_version
        self.ready.set()
        while not self.stop_event.is_set():
            w = watch.Watch()
            for event in w.stream(
                core.list_namespaced_pod,
                NAMESPACE,
                label_selector=self.selector,
                resource_version=version,
                timeout_seconds=5,
            ):
                pod = event["object"]
                version = pod.metadata.resource_version
                self.seen(pod.metadata.name, pod.status.phase, time.monotonic())
                if self.stop_event.is_set():
                    break
            w.stop()

    @property
    def selector(self) -> str:
        return f"bench.kinetic.dev/wave={self.wave}"

    def seen(self, name: str, phase: str | None, at: float) -> None:
        times = self.pods.get(name)
        if times is None:
            return
        if phase in ("Running", "Succeeded", "Failed") and times.running_seen is None:
            times.running_seen = at
        if phase in ("Succeeded", "Failed"):
            self.ended.add(name)
            if len(self.ended) == len(self.pods):
                self.all_ended.set()


def run_wave(size: int, timeout: float) -> Wave:
    """Create `size` Pods at once, wait for them to end, delete them, wait until gone."""
    import benchlib as bl
    from kinetic.api.kube import KubeClient

    core = KubeClient().core
    tag = uuid.uuid4().hex[:6]
    times = {f"w{tag}-{i}": PodTimes(name=f"w{tag}-{i}") for i in range(size)}
    watcher = RunningWatch(tag, times)
    watcher.start()
    watcher.ready.wait(10)
    window = bl.Window(own_namespaces=[NAMESPACE])
    busy0, processes, t0 = machine_busy_seconds(), ProcessCpu(), time.monotonic()

    def create(name: str) -> None:
        body = pod_body(name, tag)
        times[name].created_uptime = uptime()
        times[name].created = time.monotonic()
        core.create_namespaced_pod(NAMESPACE, body)

    with ThreadPoolExecutor(max_workers=size) as pool:
        list(pool.map(create, times))
    if not watcher.all_ended.wait(timeout):
        print(f"  wave of {size}: not all Pods ended within {timeout:.0f}s", file=sys.stderr)
    watcher.stop_event.set()
    for name, t in times.items():
        log = core.read_namespaced_pod_log(name, NAMESPACE)
        t.container_uptime = float(log.split()[0]) if log.strip() else None
    processes.snapshot()  # the shims, before they go
    core.delete_collection_namespaced_pod(
        NAMESPACE, label_selector=watcher.selector, grace_period_seconds=0
    )
    while core.list_namespaced_pod(NAMESPACE, label_selector=watcher.selector, limit=1).items:
        time.sleep(0.2)
    seconds = time.monotonic() - t0
    writes, _ = window.close()
    wave = Wave(size=size, pods=list(times.values()), seconds=seconds)
    wave.busy_seconds = machine_busy_seconds() - busy0
    processes.snapshot()
    wave.daemons = processes.used()
    wave.writes = writes.total
    wave.writes_by_resource = {k: v["writes"] for k, v in writes.by_resource.items()}
    wave.pod_writes = sum(wave.writes_by_resource.get(k, 0) for k in POD_WRITES)
    wave.foreign = writes.foreign
    return wave


def measure_pods(args: argparse.Namespace) -> dict[str, Any]:
    import benchlib as bl
    from kinetic_dev import use_local_cluster

    use_local_cluster()
    bl.ensure_namespace(NAMESPACE)
    processes = ProcessCpu()
    before = idle_rate(args.idle)
    processes.snapshot()
    idle_daemons = {k: round(v / args.idle, 3) for k, v in processes.used().items()}
    first_idle = before
    print(f"idle: the machine busy {before:.2f} cores of {os.cpu_count()}")
    waves = []
    for size in args.waves:
        wave = run_wave(size, args.timeout)
        after = idle_rate(args.settle)  # also lets the node settle before the next wave
        wave.idle_cores = (before + after) / 2
        wave.cpu_seconds = wave.busy_seconds - wave.idle_cores * wave.seconds
        before = after
        waves.append(wave)
        s = wave.summary()
        print(
            f"wave of {size:>2}: container start {fmt(s['to_container_start'])}, "
            f"running seen {fmt(s['to_running_seen'])}, "
            f"CPU {s['cpu_per_pod']:.2f} s/Pod (machine), "
            f"{s['process_cpu_per_pod']:.2f} s/Pod (node processes), "
            f"{s['pod_writes_per_pod']:.1f} Pod writes/Pod "
            f"({s['writes_per_pod']:.1f} in all)"
            + ("" if not wave.foreign.get("pods_added") else "  (others' Pods in the window)")
        )
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "image": IMAGE,
        "idle_busy_cores_at_start": round(first_idle, 3),
        "idle_daemon_cores": idle_daemons,
        "waves": [
            {**w.summary(), "daemons_cpu": w.daemons, "writes_by_resource": w.writes_by_resource}
            | {"foreign": w.foreign, "pods": [asdict(p) for p in w.pods]}
            for w in waves
        ],
    }


def fmt(s: dict[str, float]) -> str:
    if not s:
        return "-"
    return f"median {s['median']:.2f} s (min {s['min']:.2f}, max {s['max']:.2f})"


# --------------------------------------------------------------------------- fork


FORK_CHILD_WORK = "numpy.arange(1000).sum()"


def fork_once() -> tuple[float, float, float]:
    """Fork a child that runs one numpy call and exits. Returns (seconds until the child
    ran its call, seconds until it was reaped, the child's CPU-seconds)."""
    import numpy

    read_end, write_end = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: one call, a byte to say it ran, and out
        int(numpy.arange(1000).sum())
        os.write(write_end, b"x")
        os._exit(0)
    os.close(write_end)
    os.read(read_end, 1)
    ran = time.perf_counter() - started
    os.close(read_end)
    _, _, usage = os.wait4(pid, 0)
    reaped = time.perf_counter() - started
    return ran, reaped, usage.ru_utime + usage.ru_stime


def fresh_once(code: str) -> tuple[float, float]:
    """A new interpreter running `code`: (seconds until it exited, its CPU-seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu


def measure_fork(args: argparse.Namespace) -> dict[str, Any]:
    import numpy

    out: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "runs": args.runs,
    }
    fresh_code = f"import numpy; {FORK_CHILD_WORK}"
    for label, code in (("bare", "pass"), ("numpy", fresh_code)):
        fresh_once(code)  # warm the page cache
        runs = [fresh_once(code) for _ in range(args.runs)]
        out[f"fresh_{label}"] = {
            "wall_median": round(statistics.median(r[0] for r in runs), 4),
            "cpu_median": round(statistics.median(r[1] for r in runs), 4),
        }
    for mb in args.ballast_mb:
        ballast = b""
        if mb:
            # Filled byte by byte, so every page is resident; a bytearray lives in ordinary
            # 4 KiB pages (a large numpy array may get huge pages, which fork copies faster).
            ballast = bytearray(b"\x01") * (mb * 1024 * 1024)
        runs = [fork_once() for _ in range(args.runs)]
        out[f"fork_rss_{mb}mb"] = {
            "parent_rss_mb": rss_mb(),
            "child_ran_median": round(statistics.median(r[0] for r in runs), 5),
            "reaped_median": round(statistics.median(r[1] for r in runs), 5),
            "child_cpu_median": round(statistics.median(r[2] for r in runs), 5),
        }
        del ballast
    for key, value in out.items():
        print(f"{key}: {value}")
    return out


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


# --------------------------------------------------------------------------- main


def write(what: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps(data, indent=2) + "\n"
    latest = RESULTS / f"unitcosts-{what}-latest.json"
    for path in (latest, RESULTS / f"unitcosts-{what}-{stamp}.json"):
        path.write_text(text)
    return latest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    pods = sub.add_parser("pods", help="Pod start latency and CPU, waves of plain Pods")
    pods.add_argument(
        "--waves", type=lambda s: [int(x) for x in s.split(",")], default=[1, 1, 1, 10, 30]
    )
    pods.add_argument("--idle", type=float, default=10.0, help="seconds to read the idle rate")
    pods.add_argument("--settle", type=float, default=5.0, help="seconds between waves")
    pods.add_argument("--timeout", type=float, default=180.0)
    fork = sub.add_parser("fork", help="fork after importing numpy against a fresh interpreter")
    fork.add_argument("--runs", type=int, default=20)
    fork.add_argument(
        "--ballast-mb", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1000]
    )
    args = parser.parse_args(argv)
    if args.what == "pods":
        if max(args.waves) > 50 or sum(args.waves) > 100:
            parser.error("--waves: at most 50 Pods a wave and 100 in all (a shared 2-core node)")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        data = measure_pods(args)
    else:
        data = measure_fork(args)
    print(f"wrote {write(args.what, data)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
