"""Helpers shared by the integration tests (import: `from kube_helpers import ...`).

A plain module rather than conftest, so test files can import it unambiguously.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kinetic.model.names import LEADER_LEASE, holder_pod
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

REPO = Path(__file__).resolve().parents[2]


def local_env() -> dict[str, str]:
    """The ``export`` lines of ``.local/env`` (``$KINETIC_LOCAL_DIR/env``) as a dict."""
    state = Path(os.environ.get("KINETIC_LOCAL_DIR") or REPO / ".local")
    env: dict[str, str] = {}
    path = state / "env"
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line.startswith("export ") and "=" in line:
                k, v = line[len("export ") :].split("=", 1)
                env[k] = shlex.split(v)[0] if v else ""
    return env


@dataclass
class Kube:
    """Handles to one cluster, and the kubeconfig for kubectl subprocesses."""

    kubeconfig: str
    api: client.ApiClient
    core: client.CoreV1Api
    batch: client.BatchV1Api
    is_local: bool

    def kubectl(
        self, *args: str, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["kubectl", "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def apply(self, ns: str, body: dict) -> None:
        """``kubectl apply`` one object, as a user would; fails the test on refusal."""
        applied = subprocess.run(
            ["kubectl", "--kubeconfig", self.kubeconfig, "apply", "-n", ns, "-f", "-"],
            input=json.dumps(body),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert applied.returncode == 0, applied.stderr


def local_up() -> None:
    """`kinetic local up`: starts what is missing, waits for the operator's Pod to be Ready
    and rewrites its pid file."""
    up = subprocess.run(
        [str(Path(sys.executable).with_name("kinetic")), "local", "up"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert up.returncode == 0, up.stderr


def witness_command(prefix: str) -> str:
    """A shell line for a busybox container that records one run of its Pod in storage:
    an empty object ``<prefix>/$KINETIC_INDEX/$HOSTNAME`` (the Pod's name names the
    attempt), uploaded to the storage emulator the Pod was given. Count them with
    `runs_in`. ``prefix`` is a gs:// URI (the local cluster's and kind's storage)."""
    assert prefix.startswith("gs://"), prefix
    bucket, _, path = prefix[len("gs://") :].partition("/")
    url = (
        f"$STORAGE_EMULATOR_HOST/upload/storage/v1/b/{bucket}/o?uploadType=media"
        f"&name={path}/$KINETIC_INDEX/$HOSTNAME"
    )
    return f'wget -q -O /dev/null --post-data "" "{url}"'


def runs_in(prefix: str) -> list[int]:
    """The input index of every run recorded under ``prefix`` (one entry per run)."""
    from kinetic import storage

    found = storage.list_prefix(prefix.rstrip("/") + "/")
    return [int(uri[len(prefix) + 1 :].split("/")[0]) for uri in found]


OPERATOR_NAMESPACE = "kinetic-system"
OPERATOR_SELECTOR = "app.kubernetes.io/name=kinetic"


def operator_pod(kube: Kube) -> dict | None:
    """The chart's operator Pod that reconciles: the one whose replica holds the leader
    Lease (any running one while none does)."""
    got = kube.kubectl(
        "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR, "-o", "json"
    )
    live = [
        p
        for p in json.loads(got.stdout)["items"]
        if not p["metadata"].get("deletionTimestamp")
        and p.get("status", {}).get("phase") == "Running"
    ]
    leader = leader_pod_name(kube)
    live.sort(key=lambda p: p["metadata"]["name"] != leader)
    return live[0] if live else None


def leader_lease(kube: Kube) -> dict:
    """The leader Lease's spec (empty when there is none)."""
    got = kube.kubectl(
        "get", "lease", LEADER_LEASE, "-n", OPERATOR_NAMESPACE, "-o", "json", check=False
    )
    return (json.loads(got.stdout).get("spec") or {}) if got.returncode == 0 else {}


def leader_pod_name(kube: Kube) -> str:
    """The Pod of the replica that holds the leader Lease ("" when none does)."""
    holder = leader_lease(kube).get("holderIdentity") or ""
    return holder_pod(holder) if holder else ""


def kill_operator(kube: Kube) -> None:
    """SIGKILL the operator: on the local cluster its container's process, from this
    machine (the kubelet restarts the container, as after a crash); elsewhere its Pod,
    force-deleted (the Deployment replaces it)."""
    pod = operator_pod(kube)
    assert pod is not None, "no running operator Pod to kill"
    if kube.is_local:
        import os
        import signal

        from kinetic_dev import operator as local_operator
        from kinetic_dev.config import LocalConfig

        pid = local_operator.container_pid(LocalConfig(), pod)
        assert pid is not None, "the operator's container has no process on this node"
        os.kill(pid, signal.SIGKILL)
        return
    kube.kubectl(
        "delete",
        "pod",
        "-n",
        OPERATOR_NAMESPACE,
        pod["metadata"]["name"],
        "--grace-period=0",
        "--force",
        "--wait=false",
    )


def wait_operator_ready(kube: Kube, timeout: float = 180) -> None:
    """The operator's Pod is Ready again (and, on the local cluster, its webhook trusted
    by the API server): what `kinetic local up` waits for."""
    if kube.is_local:
        from kinetic_dev import operator as local_operator
        from kinetic_dev.config import LocalConfig

        cfg = LocalConfig()
        wait_for(lambda: local_operator.ready(cfg), timeout, 0.5, "the operator to be Ready")
        return

    def ready() -> bool:
        pod = operator_pod(kube)
        conds = (pod or {}).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    wait_for(ready, timeout, 0.5, "the operator to be Ready")


def wait_for(
    pred: Callable[[], object], timeout: float = 60, interval: float = 0.2, what: str = "condition"
) -> object:
    """Poll ``pred`` until truthy; returns its value; fails naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001
            last_exc = e
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}"
        + (f" (last error: {last_exc})" if last_exc else "")
    )


def run_client(script: str, env: dict[str, str], timeout: float) -> dict:
    """Run a client script in a fresh Python process (another user's, or a later session)
    and return the JSON object it printed last; fails with its stderr if it failed."""
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@contextmanager
def fresh_namespace(kube: Kube) -> Iterator[str]:
    """A new namespace that accepts Pods at once, deleted afterwards (its objects go with it)."""
    name = f"kt-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # Pods are refused until the namespace's default ServiceAccount (and, before 1.24,
    # its token Secret) exist; wait for them so tests do not race the controllers.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            sa = kube.core.read_namespaced_service_account("default", name)
            if sa.secrets or not _needs_sa_secret(kube):
                break
        except client.ApiException:
            pass
        time.sleep(0.2)
    try:
        yield name
    finally:
        try:
            kube.core.delete_namespace(name, propagation_policy="Background")
        except client.ApiException:
            pass


_sa_secret_cache: dict[str, bool] = {}


def _needs_sa_secret(kube: Kube) -> bool:
    """Before 1.24, a Pod is admitted only once its SA's token Secret exists."""
    if "v" not in _sa_secret_cache:
        minor = client.VersionApi(kube.api).get_code().minor
        _sa_secret_cache["v"] = int("".join(ch for ch in minor if ch.isdigit()) or 99) < 24
    return _sa_secret_cache["v"]


def witness_batch(
    kube: Kube, ns: str, name: str, runs: str, *, total: int, concurrent: int, seconds: int = 1
) -> None:
    """`kubectl apply` a busybox batch of ``total`` inputs, ``concurrent`` at a time, each
    recording its run under ``runs`` (`witness_command`) and then sleeping ``seconds``."""
    kube.apply(
        ns,
        {
            "apiVersion": "kinetic.dev/v1alpha1",
            "kind": "KineticBatch",
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "container": {
                        "image": "busybox:1.36",
                        "command": ["sh", "-c", f"{witness_command(runs)} && sleep {seconds}"],
                    }
                },
                "inputs": {"items": list(range(total))},
                "maxConcurrent": concurrent,
            },
        },
    )


def ended_status(kube: Kube, kind: str, ns: str, name: str, timeout: float) -> dict:
    """The status of a job (``kj``) or batch (``kb``) once it has ended, read with kubectl."""

    def ended() -> dict | None:
        got = kube.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
        if got.returncode != 0:
            return None
        status = json.loads(got.stdout).get("status") or {}
        return status if status.get("phase") in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    return wait_for(ended, timeout, interval=0.5, what=f"{kind} {ns}/{name} to end")  # type: ignore[return-value]


def assert_each_ran_once(runs: str, status: dict, total: int) -> None:
    """The batch succeeded and each of its ``total`` inputs ran exactly once."""
    from collections import Counter

    assert status["phase"] == "SUCCEEDED", status.get("message")
    assert status["counts"]["succeeded"] == total
    time.sleep(2)  # a duplicate launch would have run by now
    assert Counter(runs_in(runs)) == {i: 1 for i in range(total)}


class PodWatch:
    """Every Pod of one namespace from now on, as a watch sees it: the API server sends
    each change, so a Pod made and deleted between two polls is still seen. Use as a
    context manager; read ``added``, ``last`` and ``deleted`` afterwards (or meanwhile)."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.added: list[str] = []  # names, in the order first seen
        self.last: dict[str, client.V1Pod] = {}  # name -> the Pod as last seen
        self.deleted: dict[str, str] = {}  # name -> its phase when it was deleted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodWatch:
        listed = self.kube.core.list_namespaced_pod(self.namespace)
        for pod in listed.items:
            self._saw("ADDED", pod)
        self._version = listed.metadata.resource_version
        self._thread.start()  # from the list's version: nothing after it is missed
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def labelled(self, label: str, value: str) -> list[str]:
        """Names of the Pods seen with ``label=value``, in the order first seen."""
        return [n for n in self.added if (self.last[n].metadata.labels or {}).get(label) == value]

    def _saw(self, kind: str, pod: client.V1Pod) -> None:
        name = pod.metadata.name
        if name not in self.last:
            self.added.append(name)
        self.last[name] = pod
        if kind == "DELETED":
            self.deleted[name] = (pod.status.phase if pod.status else None) or ""

    def _run(self) -> None:
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self.kube.core.list_namespaced_pod,
                    self.namespace,
                    resource_version=self._version,
                    timeout_seconds=5,  # to look at the stop flag
                ):
                    pod = event["object"]
                    if event["type"] == "ERROR":  # history compacted (410): list again
                        self._relist()
                        break
                    self._version = pod.metadata.resource_version
                    self._saw(event["type"], pod)
                    if self._stop.is_set():
                        return
            except client.ApiException as exc:
                if exc.status != 410:
                    raise
                self._relist()
            except ProtocolError:  # the connection cut: watch again from the last version
                continue

    def _relist(self) -> None:
        listed = self.kube.core.list_namespaced_pod(self.namespace)
        gone = set(self.last) - {p.metadata.name for p in listed.items} - set(self.deleted)
        for name in gone:  # deleted while the watch was away, in its last seen phase
            self._saw("DELETED", self.last[name])
        for pod in listed.items:
            self._saw("MODIFIED", pod)
        self._version = listed.metadata.resource_version
