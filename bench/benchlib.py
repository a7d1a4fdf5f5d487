"""Instruments shared by `bench/run.py` and `bench/scale.py`.

The benchmarks compare Kinetic with a plain batch/v1 Job on the same cluster,
so every figure must come from a source that does not depend on Kinetic's own
bookkeeping:

* API writes come from the API server's `apiserver_request_total` counter
  (scraped from `/metrics` through the kube API), differenced over a window.
  The counter has no namespace or user label, so a window counts everything
  the cluster wrote in it: the benchmarks keep windows apart (one mode at a
  time, cleanup waited for) and measure the idle background rate separately.
* The operator's memory is read from `/proc/<pid>/status` (VmRSS) of the local
  operator process and its children, sampled in a thread, because a Python
  process's high-water mark (VmHWM) cannot be reset between windows.
* Sizes are the compact JSON of `.status`, which is what every watcher and
  every status write carries.
* Times that must be compared across processes (an input's end in the manifest, the
  moment the bench's watch saw it) are wall-clock seconds since the epoch: the local
  cluster's node shares this machine's clock.

The pure measures (percentiles, which inputs a skewed run slows, lags, Pod start
latencies) sit at the end of this module, apart from the code that talks to the
cluster, and have table tests (`tests/unit/bench/`).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kinetic.api.kube import KubeClient
from kinetic.model import names
from kinetic.model import resources as r
from kinetic.model.manifest import InputRecord
from kinetic.model.ranges import IndexSet
from kinetic_dev import LocalConfig
from kubernetes import client, watch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

kube = KubeClient()  # the client's own calls to the API server, through the current context

RESULTS = Path(__file__).resolve().parent / "results"

# --------------------------------------------------------------------------- API writes

# kube-apiserver 1.20 labels `verb` with the request verb in upper case (POST, PUT,
# PATCH, DELETE, DELETECOLLECTION, APPLY for server-side apply); the lower-case
# RBAC verbs (create, update, ...) are accepted too, so the bench also reads a
# server that labels them that way.
WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"}
VERB_ALIASES = {
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETECOLLECTION",
    "apply": "APPLY",
}
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_METRIC = "apiserver_request_total{"

# (verb, resource[/subresource], code) -> requests so far
Counts = dict[tuple[str, str, str], float]


def scrape_requests() -> Counts:
    """The API server's write-request counters, by verb, resource and response code.

    Read through the kube API (`GET /metrics`, as `kubectl get --raw /metrics`
    does) so it works wherever the kubeconfig does.
    """
    return parse_requests(get_raw("/metrics").decode())


def get_raw(path: str) -> bytes:
    """GET a non-resource path of the API server with the client's credentials."""
    api = kube.api
    if hasattr(api, "param_serialize"):  # kubernetes client >= 32 (new generator)
        response = api.call_api(*api.param_serialize("GET", path, auth_settings=["BearerToken"]))
        data = response.read()
    else:
        response = api.call_api(
            path,
            "GET",
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        data = response.data
    if response.status != 200:
        raise RuntimeError(f"GET {path}: HTTP {response.status}: {data[:200]!r}")
    return data


def parse_requests(text: str) -> Counts:
    """Sum `apiserver_request_total` write samples by (verb, resource, code)."""
    counts: Counts = defaultdict(float)
    for line in text.splitlines():
        if not line.startswith(_METRIC):
            continue
        labels_end = line.rindex("}")
        labels = dict(_LABEL.findall(line[len(_METRIC) : labels_end]))
        verb = labels.get("verb", "")
        verb = VERB_ALIASES.get(verb, verb.upper())
        if verb not in WRITE_VERBS:
            continue
        resource = labels.get("resource", "") or "(none)"
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[(verb, resource, labels.get("code", ""))] += float(line[labels_end + 1 :].split()[0])
    return dict(counts)


@dataclass
class Writes:
    """API writes in one window, with the breakdown that explains them."""

    total: int = 0
    conflicts: int = 0
    # resource[/subresource] -> {"writes": n, "verbs": {verb: n}, "codes": {code: n}}
    by_resource: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_code: dict[str, int] = field(default_factory=dict)
    counter_reset: bool = False  # the API server restarted inside the window
    foreign: dict[str, Any] = field(default_factory=dict)  # see ForeignActivity

    @classmethod
    def between(cls, before: Counts, after: Counts) -> Writes:
        w = cls()
        by_resource: dict[str, dict[str, Any]] = defaultdict(
            lambda: {"writes": 0, "verbs": defaultdict(int), "codes": defaultdict(int)}
        )
        by_code: dict[str, int] = defaultdict(int)
        for key in set(before) | set(after):
            delta = int(round(after.get(key, 0.0) - before.get(key, 0.0)))
            if delta < 0:
                w.counter_reset = True
                continue
            if delta == 0:
                continue
            verb, resource, code = key
            w.total += delta
            by_code[code] += delta
            row = by_resource[resource]
            row["writes"] += delta
            row["verbs"][verb] += delta
            row["codes"][code] += delta
            if code == "409":
                w.conflicts += delta
        w.by_resource = {
            k: {"writes": v["writes"], "verbs": dict(v["verbs"]), "codes": dict(v["codes"])}
            for k, v in sorted(by_resource.items(), key=lambda kv: -kv[1]["writes"])
        }
        w.by_code = dict(sorted(by_code.items()))
        return w

    def to_json(self, inputs: int | None = None, seconds: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "writes": self.total,
            "conflicts_409": self.conflicts,
            "conflict_share": self.conflicts / self.total if self.total else 0.0,
        }
        if inputs:
            out["writes_per_input"] = self.total / inputs
        if seconds:
            out["seconds"] = seconds
            out["writes_per_second"] = self.total / seconds
        out["by_resource"] = self.by_resource
        out["by_code"] = self.by_code
        if self.counter_reset:
            out["counter_reset"] = True
        if self.foreign:
            out["foreign_activity"] = self.foreign
        return out


class Window:
    """Scrape at the start; `close()` scrapes again and returns the writes in between.

    Pods created or deleted in other namespaces meanwhile are recorded with
    the writes (`foreign_activity`): they mean someone else shared the window.
    """

    def __init__(self, own_namespaces: Iterable[str] = ()) -> None:
        self.foreign = ForeignActivity(own_namespaces).__enter__()
        self.before = scrape_requests()
        self.started = time.monotonic()

    def close(self) -> tuple[Writes, float]:
        after = scrape_requests()
        seconds = time.monotonic() - self.started
        self.foreign.__exit__()
        writes = Writes.between(self.before, after)
        writes.foreign = self.foreign.to_json()
        return writes, seconds


class ForeignActivity(threading.Thread):
    """Counts Pods created or deleted outside our namespaces while a window is open.

    The request counter cannot tell a mode's writes from those of someone
    else's test run on the same cluster, so each window also watches Pods in
    every other namespace (a field selector keeps our own Pods off the wire):
    a window with foreign Pods is flagged rather than silently inflated.
    """

    def __init__(self, own_namespaces: Iterable[str]) -> None:
        super().__init__(daemon=True, name="foreign-activity")
        self.selector = ",".join(f"metadata.namespace!={ns}" for ns in own_namespaces)
        self.added = 0
        self.deleted = 0
        self.gaps = 0  # times the watch expired and was resumed from a fresh LIST
        self.namespaces: set[str] = set()
        self._stop_event = threading.Event()
        self._ready = threading.Event()

    def __enter__(self) -> ForeignActivity:
        self.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_event.set()
        self.join(timeout=10)

    def run(self) -> None:
        core = kube.core
        try:
            version = core.list_pod_for_all_namespaces(
                field_selector=self.selector, limit=1
            ).metadata.resource_version
        except Exception:
            self._ready.set()
            return
        self._ready.set()
        while not self._stop_event.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(
                    core.list_pod_for_all_namespaces,
                    field_selector=self.selector,
                    resource_version=version,
                    timeout_seconds=2,  # so that stopping never waits long
                ):
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    if event["type"] == "ADDED":
                        self.added += 1
                        self.namespaces.add(pod.metadata.namespace)
                    elif event["type"] == "DELETED":
                        self.deleted += 1
                        self.namespaces.add(pod.metadata.namespace)
                    if self._stop_event.is_set():
                        break
            except client.ApiException as e:
                if e.status != 410:
                    return
                version = self._relist(core)
                if version is None:
                    return
            except Exception:
                return
            finally:
                w.stop()

    def _relist(self, core: Any) -> str | None:
        """A fresh resourceVersion after the watch expired; retried while the API server is
        too busy to answer (a LIST across thousands of Pods can time out under load).
        Events between the two are not seen: counted in ``gaps``."""
        self.gaps += 1
        while not self._stop_event.is_set():
            try:
                listed = core.list_pod_for_all_namespaces(field_selector=self.selector, limit=1)
                return str(listed.metadata.resource_version)
            except Exception:  # noqa: BLE001 — a 504 or a dropped connection: try again
                self._stop_event.wait(2)
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "pods_added": self.added,
            "pods_deleted": self.deleted,
            "namespaces": sorted(self.namespaces),
            "watch_gaps": self.gaps,
        }

    @property
    def quiet(self) -> bool:
        return not (self.added or self.deleted)


# --------------------------------------------------------------------------- operator memory


def operator_pid() -> int | None:
    """The host pid of the local operator's running container (its Pod, its task on
    the node), looked up now: the kubelet may have restarted it since."""
    from kinetic_dev import operator as local_operator

    cfg = LocalConfig()
    try:
        return local_operator.container_pid(cfg, local_operator.operator_pod(cfg))
    except Exception:  # noqa: BLE001 - no local cluster: RSS is not measured
        return None


def _descendants(pid: int) -> list[int]:
    """Child processes, recursively (via /proc/<pid>/task/*/children)."""
    out: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = Path(f"/proc/{p}/task/{t}/children").read_text().split()
            except OSError:
                continue
            for k in kids:
                out.append(int(k))
                stack.append(int(k))
    return out


def rss_bytes(pid: int) -> int | None:
    """VmRSS of `pid` plus all its descendants, or None once it has gone."""
    total = 0
    found = False
    for p in [pid, *_descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    found = True
                    break
        except OSError:
            continue
    return total if found else None


def process_env(pid: int, name: str) -> str | None:
    """One variable of a running process's environment (e.g. the operator's settings)."""
    try:
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            key, _, value = item.decode(errors="replace").partition("=")
            if key == name:
                return value
    except OSError:
        pass
    return None


class RssSampler(threading.Thread):
    """Samples the operator's RSS every `interval` seconds until `stop()`.

    The pid file is re-read each time, so a restart of the operator (by the
    lead, or by a crash) shows up as a pid change instead of silently
    measuring nothing.
    """

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.interval = interval
        self.samples: list[tuple[float, int, int]] = []  # (monotonic, pid, rss bytes)
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            pid = operator_pid()
            if pid is not None:
                rss = rss_bytes(pid)
                if rss is not None:
                    self.samples.append((time.monotonic(), pid, rss))
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)

    def window(self, start: float, end: float | None = None) -> dict[str, Any]:
        """Peak and first RSS (MB) between two monotonic times, and the pids seen."""
        end = time.monotonic() if end is None else end
        inside = [s for s in self.samples if start <= s[0] <= end]
        if not inside:
            return {"rss_start_mb": None, "rss_peak_mb": None, "samples": 0}
        pids = sorted({s[1] for s in inside})
        out: dict[str, Any] = {
            "rss_start_mb": mb(inside[0][2]),
            "rss_peak_mb": mb(max(s[2] for s in inside)),
            "rss_end_mb": mb(inside[-1][2]),
            "samples": len(inside),
        }
        if len(pids) > 1:
            out["operator_restarted"] = pids
        return out


def mb(n: float) -> float:
    return round(n / 1e6, 1)


# --------------------------------------------------------------------------- cluster


def unfinished_elsewhere(objects: Iterable[Mapping[str, Any]], own: Collection[str]) -> list[str]:
    """``kind namespace/name`` of the Kinetic objects (API list items) not ended yet, outside
    the namespaces in ``own``: work that would share every window and inflate its writes
    and wall time."""
    busy = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace", ""))
        phase = (obj.get("status") or {}).get("phase", "PENDING")
        ended = phase in r.Phase.__members__ and r.Phase(phase).terminal
        if namespace in own or ended:
            continue
        busy.append(f"{obj.get('kind', '?')} {namespace}/{meta.get('name', '?')}")
    return sorted(busy)


def busy_elsewhere(own: Collection[str]) -> list[str]:
    """Kinetic jobs and batches running or pending on the cluster outside the bench's own
    namespaces (a batch an interrupted run left behind keeps its Pods going for hours)."""
    found: list[Mapping[str, Any]] = []
    for plural in (r.JOB_PLURAL, r.BATCH_PLURAL):
        listed = kube.custom.list_cluster_custom_object(r.GROUP, r.VERSION, plural)
        found.extend(listed.get("items") or [])
    return unfinished_elsewhere(found, own)


def ensure_namespace(name: str, timeout: float = 60) -> None:
    """Create the namespace if needed and wait until Pods can be admitted in it.

    On 1.20 a Pod is admitted only once the namespace's default ServiceAccount
    has its token Secret; submitting earlier would time the token controller.
    """
    core = kube.core
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except client.ApiException as e:
        if e.status != 409:
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if core.read_namespaced_service_account("default", name).secrets:
                return
        except client.ApiException:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"namespace {name}: no default ServiceAccount token after {timeout}s")


def pod_count(namespace: str) -> int:
    """Pods in the namespace, from one cheap LIST (limit=1 and remainingItemCount)."""
    pods = kube.core.list_namespaced_pod(namespace, limit=1)
    return len(pods.items) + (pods.metadata.remaining_item_count or 0)


def leftovers(namespace: str) -> dict[str, int]:
    """What still exists in the namespace that a benchmark created: Jobs, Kinetic objects, Pods."""
    found = {"pods": pod_count(namespace)}
    found["jobs"] = len(client.BatchV1Api(kube.api).list_namespaced_job(namespace).items)
    for plural in (r.BATCH_PLURAL, r.JOB_PLURAL):
        found[plural] = len(kube.list_(plural, namespace))
    return {k: v for k, v in found.items() if v}


def delete_everything(namespace: str) -> None:
    """Delete whatever a previous (interrupted) run left, so a window starts clean."""
    batch = client.BatchV1Api(kube.api)
    for job in batch.list_namespaced_job(namespace).items:
        batch.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Background")
    for plural in (r.BATCH_PLURAL, r.JOB_PLURAL):
        for obj in kube.list_(plural, namespace):
            kube.delete(plural, namespace, obj["metadata"]["name"])


def wait_empty(
    namespace: str,
    timeout: float,
    on_tick: Callable[[dict[str, int]], None] | None = None,
    interval: float = 0.5,
) -> float:
    """Wait until the namespace holds none of the benchmark's objects; returns seconds waited."""
    started = time.monotonic()
    while True:
        left = leftovers(namespace)
        if on_tick is not None:
            on_tick(left)
        if not left:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"namespace {namespace} still holds {left} after {timeout:.0f}s")
        time.sleep(interval)


def container_batch(
    ns: str,
    name: str,
    command: Sequence[str],
    inputs: Mapping[str, Any],
    parallel: int,
    image: str = "busybox",
) -> dict[str, Any]:
    """The body of a container KineticBatch running ``command`` over ``inputs`` (the spec's
    ``inputs``: ``{"items": [...]}`` or ``{"grid": {...}}``), ``parallel`` at once."""
    return {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "template": {"container": {"image": image, "command": list(command)}},
            "inputs": dict(inputs),
            "maxConcurrent": parallel,
        },
    }


def status_bytes(obj: dict | None) -> int | None:
    """Size of `.status` as compact JSON: what each status write and watch event carries."""
    if obj is None:
        return None
    return len(json.dumps(obj.get("status") or {}, separators=(",", ":")).encode())


def server_version() -> str:
    return client.VersionApi(kube.api).get_code().git_version


# --------------------------------------------------------------------------- results


def write_results(
    prefix: str, data: dict[str, Any], plot: Callable[[dict[str, Any], Path], None]
) -> tuple[Path, Path]:
    """Write `<prefix>latest.json` and a timestamped copy, each with its plot beside it."""
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    latest = RESULTS / f"{prefix}latest.json"
    dated = RESULTS / f"{prefix}{stamp}.json"
    text = json.dumps(data, indent=2) + "\n"
    for path in (latest, dated):
        path.write_text(text)
    png = latest.with_suffix(".png")
    try:
        plot(data, png)
        dated.with_suffix(".png").write_bytes(png.read_bytes())
    except Exception as e:  # a plot must never lose the numbers
        print(f"plot failed: {e!r}")
    return latest, png


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def first(items: Iterable[Any], default: Any = None) -> Any:
    return next(iter(items), default)


def progress_bar(console: Console) -> Progress:
    """The live display both benchmarks show: one bar per run, with a detail column."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[detail]}"),
        console=console,
    )


# --------------------------------------------------------------------------- pure measures


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0 to 100) by linear interpolation between the sorted values
    (numpy's default), or None for no values: a summary of nothing is not zero. An
    infinite value (something that never happened) sorts last and stays infinite."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be between 0 and 100, got {q}")
    if not values:
        return None
    xs = sorted(values)
    at = (len(xs) - 1) * q / 100
    lo = math.floor(at)
    hi = min(lo + 1, len(xs) - 1)
    if at == lo or xs[lo] == xs[hi]:
        return xs[lo]
    return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)


def rounded(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


# The skewed workload: 5% of the inputs, spread at random, take 20x longer. The seed is
# the unit simulation's (`bench/unitsim.py`, workload c), so that at 300 inputs the bench
# runs the very inputs the simulation slowed.
SKEW_SHARE = 0.05
SKEW_SEED = 30
SHORT_SECONDS = 0.2
SLOW_SECONDS = 4.0  # 20x SHORT_SECONDS


def slow_inputs(n: int, share: float = SKEW_SHARE, seed: int = SKEW_SEED) -> frozenset[int]:
    """The inputs of ``n`` a skewed run slows: ``share`` of them (at least one, so a small
    run is still skewed), chosen at random with a fixed seed: the same ones every run."""
    if n <= 0:
        return frozenset()
    k = min(n, max(1, round(n * share)))
    return frozenset(random.Random(seed).sample(range(n), k))


def input_seconds(
    n: int, slow: frozenset[int], short: float = SHORT_SECONDS, long: float = SLOW_SECONDS
) -> list[float]:
    """How long each of ``n`` inputs sleeps: ``long`` for the slow ones, else ``short``."""
    return [long if i in slow else short for i in range(n)]


def epoch_seconds(text: str | None) -> float | None:
    """An RFC 3339 time as the API server and the manifest write it, in seconds since the
    epoch (None for none)."""
    return None if not text else names.parse_time(text).timestamp()


def input_end_times(records: Mapping[str, InputRecord]) -> dict[int, float]:
    """Each input's end as its manifest record says: its last attempt's ``endTime`` (the
    Pod's clock; whole seconds, cut down). Inputs whose last attempt has not ended are left
    out."""
    out: dict[int, float] = {}
    for key, record in records.items():
        end = epoch_seconds(record.attempts[-1].end_time) if record.attempts else None
        if end is not None:
            out[int(key)] = end
    return out


class FirstSeen:
    """When a watch of a batch first showed each input ended (in the status's succeeded or
    failed ranges): the moment a client following the batch could know it.

    ``saw`` takes the time as an argument, so that it stays a pure bookkeeping of what
    the statuses said and when.
    """

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self.truncated = False  # some status cut its ranges: inputs past the cut go unseen
        self._ended = IndexSet()

    def saw(self, status: Mapping[str, Any], now: float) -> None:
        ended = IndexSet.parse(status.get("succeededIndexes")).union(
            IndexSet.parse(status.get("failedIndexes"))
        )
        for i in ended.difference(self._ended):
            self.at[i] = now
        self._ended = self._ended.union(ended)
        self.truncated = self.truncated or bool(status.get("truncated"))


def lag_summary(ends: Mapping[int, float], seen: Mapping[int, float]) -> dict[str, Any]:
    """From each input's end to the moment the watch first showed it ended: p50, p95 and
    the worst, in seconds, over the inputs both know; and how many each side lacks."""
    lags = [seen[i] - end for i, end in ends.items() if i in seen]
    return {
        "p50_seconds": rounded(percentile(lags, 50)),
        "p95_seconds": rounded(percentile(lags, 95)),
        "max_seconds": rounded(max(lags, default=None)),
        "inputs": len(lags),
        "ended_never_seen": sum(1 for i in ends if i not in seen),
        "seen_without_end": sum(1 for i in seen if i not in ends),
    }


def pod_start_seconds(pods: Iterable[Mapping[str, Any]]) -> list[float]:
    """For each Pod (as the API server returns it, as a dict) whose container has started:
    seconds from its ``creationTimestamp`` to its first container's ``startedAt``
    (running or terminated). Both are whole seconds, so each is within a second."""
    out = []
    for pod in pods:
        created = epoch_seconds((pod.get("metadata") or {}).get("creationTimestamp"))
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        state = (statuses[0].get("state") or {}) if statuses else {}
        started = epoch_seconds(
            (state.get("terminated") or state.get("running") or {}).get("startedAt")
        )
        if created is not None and started is not None:
            out.append(started - created)
    return out


def slot_refill_seconds(pods: Iterable[Mapping[str, Any]], parallel: int) -> list[float]:
    """How long each freed slot stood empty: Pods (API dicts) in creation order; the first
    ``parallel`` fill the slots, and each later one takes the slot of the earliest Pod that
    ended before it was created and whose slot no Pod took yet. Whole seconds (the API's
    times), so each figure is within a second; the same for a Job and a KineticBatch."""
    created: list[float] = []
    ended: list[float] = []
    for pod in pods:
        at = epoch_seconds((pod.get("metadata") or {}).get("creationTimestamp"))
        if at is not None:
            created.append(at)
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        state = (statuses[0].get("state") or {}) if statuses else {}
        end = epoch_seconds((state.get("terminated") or {}).get("finishedAt"))
        if end is not None:
            ended.append(end)
    created.sort()
    ended.sort()
    waits: list[float] = []
    free = 0  # ends handed out so far
    for at in created[parallel:]:
        if free < len(ended) and ended[free] <= at:
            waits.append(at - ended[free])
            free += 1
    return waits
