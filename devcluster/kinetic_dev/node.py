"""The process node: a tiny kubelet that runs each Pod bound to it as local processes.

Run as ``python -m kinetic_dev.node --kubeconfig ... --name kinetic-node``.
It registers a Node with configurable capacity, keeps it Ready (Lease + status
heartbeats, and removes the ``not-ready`` taint admission puts on new nodes,
since no node-lifecycle controller runs), watches Pods with ``spec.nodeName``
equal to its name, runs their containers (image ignored), reports their status
and serves their logs on the kubelet endpoint.  See ``podspec`` for the pure
parts (spec -> argv/env, resources, status).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.utils.quantity import parse_quantity

from kinetic_dev import podspec as ps
from kinetic_dev import probes as pr
from kinetic_dev import volumes as vol
from kinetic_dev.logserver import LogServer
from kinetic_dev.procs import proc_start_time, read_live_pid, stop_pid, write_pidfile

log = logging.getLogger("kinetic.node")

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
LEASE_NS = "kube-node-lease"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
CLEANUP_THREADS = 4  # removing deleted Pods: API calls and rmtree, off the watch thread


class _RawWatch(watch.Watch):
    """A Pod watch that hands out the API server's JSON as it came.

    The client's default builds a V1Pod model for every event (and the node
    turned it back into a dict): at thousands of Pods that was most of the
    node's CPU, and it delayed every other Pod's start behind it.
    """

    def get_return_type(self, func: Callable[..., object]) -> None:
        return None


class _Shutdown(Exception):
    pass


# What `Agent._retry` returns when the API server could not be reached in all its attempts
# (as opposed to None: the object is gone, or the request was refused for good).
_GAVE_UP = object()
# How often statuses the API server could not take are sent again (seconds).
# How long a Secret or ConfigMap the Node authorizer refuses (403) is retried for a volume.
NODE_AUTHZ_WAIT_SECONDS = 30.0
RESEND_INTERVAL = 2.0


def _total_memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1])}Ki"
    except OSError:
        pass
    return "16Gi"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m kinetic_dev.node", description=__doc__)
    p.add_argument("--kubeconfig", default=env("KUBECONFIG"))
    p.add_argument("--name", default=env("KINETIC_NODE_NAME", "kinetic-node"))
    p.add_argument("--port", type=int, default=int(env("KINETIC_NODE_PORT", "10250")))
    p.add_argument("--state-dir", default=env("KINETIC_LOCAL_DIR", ".local"))
    p.add_argument("--tls-cert", required=True)
    p.add_argument("--tls-key", required=True)
    p.add_argument("--client-ca", help="require API-server client certs signed by this CA")
    p.add_argument("--cpu", default=env("KINETIC_NODE_CPU", "16"))
    p.add_argument("--memory", default=env("KINETIC_NODE_MEMORY", _total_memory()))
    p.add_argument("--pods", default=env("KINETIC_NODE_PODS", "110"))
    p.add_argument("--gpus", default=env("KINETIC_NODE_GPUS", "0"), help="nvidia.com/gpu")
    p.add_argument("--tpus", default=env("KINETIC_NODE_TPUS", "0"), help="google.com/tpu")
    p.add_argument("--ephemeral-storage", default=env("KINETIC_NODE_EPHEMERAL_STORAGE", "100Gi"))
    p.add_argument("--heartbeat", type=float, default=10.0, help="seconds between Lease renewals")
    p.add_argument(
        "--pod-ip",
        default=env("KINETIC_NODE_POD_IP", ""),
        help="IP reported as every pod's status.podIP (default: this machine's first "
        "non-loopback IPv4 address; Endpoints refuse loopback addresses)",
    )
    return p.parse_args(argv)


def detect_pod_ip() -> str:
    """This machine's first global IPv4 address: pods share the host's network, and the
    API server (on this machine) reaches a Service's endpoints there."""
    import subprocess

    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show", "scope", "global"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
        for line in out.splitlines():
            parts = line.split()
            if "inet" in parts:
                return parts[parts.index("inet") + 1].split("/")[0]
    except (OSError, subprocess.SubprocessError):
        pass
    import socket

    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return ps.LOOPBACK


def capacity_from_args(a: argparse.Namespace) -> dict[str, str]:
    return {
        "cpu": str(a.cpu),
        "memory": str(a.memory),
        "pods": str(a.pods),
        "ephemeral-storage": str(a.ephemeral_storage),
        "nvidia.com/gpu": str(a.gpus),
        "google.com/tpu": str(a.tpus),
    }


class PodWorker(threading.Thread):
    """Runs one Pod: init containers in order, then the app containers together."""

    def __init__(self, agent: Agent, pod: dict, request: dict[str, Decimal]):
        md = pod["metadata"]
        super().__init__(name=f"pod-{md['namespace']}/{md['name']}", daemon=True)
        self.agent = agent
        self.pod = pod
        self.uid: str = md["uid"]
        self.ns: str = md["namespace"]
        self.pod_name: str = md["name"]
        self.request = request
        self.dir = agent.pods_dir / ps.pod_dir_name(pod)
        spec = pod["spec"]
        self.restart_policy = spec.get("restartPolicy") or "Always"
        self.init_runs = [
            ps.ContainerRun(c["name"], c.get("image", ""), waiting_reason="PodInitializing")
            for c in spec.get("initContainers") or []
        ]
        self.app_runs = [
            ps.ContainerRun(
                c["name"],
                c.get("image", ""),
                waiting_reason="PodInitializing"
                if spec.get("initContainers")
                else "ContainerCreating",
            )
            for c in spec.get("containers") or []
        ]
        self.procs: dict[str, object] = {}
        self.specs: dict[str, ps.ProcessSpec] = {}
        self.mount_targets: list[str] = []  # every container's, for the node's bookkeeping
        self.made_dirs: list[str] = []  # mount points this pod created on the host
        self.probes: dict[str, list[pr.Probe]] = {}
        self.report_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.stop_grace = 30.0
        self.stop_reason: str | None = None  # None: deletion; else report Failed with it
        self.start_time = time.time()
        ads = spec.get("activeDeadlineSeconds")
        self.deadline = self.start_time + ads if ads else None
        self.terminal_reason: str | None = None
        self.terminal_message: str | None = None
        self.finished = threading.Event()
        self.removed = False  # this worker sent the Pod's final DELETE

    # ---- called from other threads ----
    def request_stop(self, grace: float, reason: str | None = None) -> None:
        if not self.stop_event.is_set():
            self.stop_grace = max(0.0, grace)
            self.stop_reason = reason
            self.stop_event.set()

    def is_running(self, container: str) -> bool:
        for r in self.init_runs + self.app_runs:
            if r.name == container:
                return not r.done and not self.finished.is_set()
        return False

    # ---- the pod's life ----
    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - one pod must never take the agent down
            log.exception("pod %s/%s: unexpected error", self.ns, self.pod_name)
            self._kill_all(2)
            self._report(phase="Failed", reason="NodeError", message=f"process node error: {e}")
        finally:
            self.finished.set()
            self.agent.worker_done(self)

    def _run(self) -> None:
        (self.dir / "work").mkdir(parents=True, exist_ok=True)
        spec = self.pod["spec"]
        try:
            self._write_volumes()
            for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
                pspec = ps.process_spec(
                    self.pod,
                    c,
                    node_name=self.agent.name,
                    pod_dir=self.dir,
                    base_env=self.agent.base_env,
                    bin_dir=self.agent.bin_dir,
                    lookup=self.agent.lookup,
                    pod_ip=self.agent.pod_ip,
                    service_env=self.agent.service_env,
                )
                mounts = vol.container_mounts(self.pod, c, str(self.dir / "volumes"))
                program = shutil.which(pspec.argv[0]) or pspec.argv[0] if pspec.argv else ""
                mounts, skipped = vol.hiding(mounts, [str(self.dir), program])
                for m in skipped:
                    log.warning(
                        "pod %s/%s: volume at %s not mounted: it would hide %s or its program",
                        self.ns,
                        self.pod_name,
                        m.target,
                        self.dir,
                    )
                if mounts and not self.agent.can_mount:
                    raise ps.PodConfigError(
                        f"container {c['name']!r} mounts volumes: the process node needs root "
                        "and `unshare` (util-linux) for a per-pod mount namespace"
                    )
                if mounts:  # workingDir may be a mount: entered inside the namespace
                    pspec.argv = vol.mount_namespace_argv(pspec.argv, mounts, c.get("workingDir"))
                    pspec.cwd = str(self.dir / "work")
                    self.mount_targets += [m.target for m in mounts]
                self.specs[c["name"]] = pspec
            self.made_dirs = vol.created_mount_points(self.mount_targets, os.path.exists)
            for c in spec.get("containers") or []:
                self.probes[c["name"]] = pr.container_probes(c, self.agent.pod_ip)
                run = next(r for r in self.app_runs if r.name == c["name"])
                run.ready = pr.initial_ready(self.probes[c["name"]])
        except ps.PodConfigError as e:
            for r in self.init_runs + self.app_runs:
                r.waiting_reason, r.waiting_message = "CreateContainerConfigError", str(e)
            self._report(phase="Failed", reason="CreateContainerConfigError", message=str(e))
            return

        for run in self.init_runs:
            while True:
                self._start(run)
                self._report()
                if not self._wait([run]):
                    return self._finish_stopped()
                if run.exit_code == 0 or self.restart_policy == "Never":
                    break
                if not self._backoff(run):
                    return self._finish_stopped()
            if run.exit_code != 0:
                for r in self.app_runs:
                    r.waiting_reason = "PodInitializing"
                self._report(phase="Failed")
                return

        for run in self.app_runs:
            self._start(run)
        self._report()
        while True:
            pending = [r for r in self.app_runs if not r.done]
            if not pending:
                break
            if not self._wait(pending, any_exit=True):
                return self._finish_stopped()
            for run in self.app_runs:
                if run.done and self._should_restart(run):
                    self._report()
                    if not self._backoff(run):
                        return self._finish_stopped()
                    self._start(run)
                    self._report()
        self._report()

    def _write_volumes(self) -> None:
        """Each volume's files under <pod dir>/volumes/<name>, as the kubelet prepares them."""
        root = self.dir / "volumes"
        for volume in self.pod["spec"].get("volumes") or []:
            files = vol.volume_files(
                self.pod,
                volume,
                node_name=self.agent.name,
                pod_ip=self.agent.pod_ip,
                fetch=self.agent.fetch_data,
                token=lambda aud, secs: self.agent.request_token(self.pod, aud, secs),
            )
            if files is None:  # hostPath: mounted as it is
                continue
            vdir = root / volume["name"]
            vdir.mkdir(parents=True, exist_ok=True)
            for f in files:
                path = vdir / f.path
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(f.content)
                os.chmod(path, f.mode)

    def _should_restart(self, run: ps.ContainerRun) -> bool:
        if self.restart_policy == "Always":
            return True
        return self.restart_policy == "OnFailure" and run.exit_code != 0

    def _backoff(self, run: ps.ContainerRun) -> bool:
        """Wait before a restart (10s doubling, max 5 min); False if stopped meanwhile."""
        delay = run.restart_delay()
        run.reset_for_restart(f"back-off {delay:.0f}s restarting failed container")
        self._report()
        return not self._sleep(delay)

    def _sleep(self, seconds: float) -> bool:
        """True if interrupted by a stop or the deadline."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.stop_event.wait(0.2) or self._deadline_passed():
                return True
        return False

    def _deadline_passed(self) -> bool:
        return self.deadline is not None and time.time() > self.deadline

    def _start(self, run: ps.ContainerRun) -> None:
        import subprocess

        spec = self.specs[run.name]
        Path(spec.cwd).mkdir(parents=True, exist_ok=True)
        Path(spec.termination_log).write_bytes(b"")
        run.started_at = time.time()
        try:
            with open(spec.log_path, "ab") as out:
                proc = subprocess.Popen(
                    spec.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=spec.env,
                    cwd=spec.cwd,
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as e:
            run.finished_at = time.time()
            run.exit_code = 128
            run.reason = "StartError"
            run.message = f"failed to start {spec.argv[0]!r}: {e}"
            with open(spec.log_path, "ab") as out:
                out.write((run.message + "\n").encode())
            log.warning("pod %s/%s container %s: %s", self.ns, self.pod_name, run.name, run.message)
            return
        run.pid = proc.pid
        self.procs[run.name] = proc
        write_pidfile(self.dir / f"{run.name}.pid", proc.pid)
        if self.probes.get(run.name):
            Prober(self, run, proc, self.probes[run.name]).start()
        log.info(
            "pod %s/%s container %s started pid %d: %s",
            self.ns,
            self.pod_name,
            run.name,
            proc.pid,
            spec.argv,
        )

    def _collect(self, run: ps.ContainerRun, returncode: int) -> None:
        spec = self.specs[run.name]
        run.finished_at = time.time()
        run.exit_code = ps.exit_code_of(returncode)
        try:
            text = (
                Path(spec.termination_log)
                .read_bytes()[: ps.TERMINATION_MESSAGE_LIMIT * 2]
                .decode(errors="replace")
            )
        except OSError:
            text = ""
        tail = ""
        if spec.fallback_to_logs and not text.strip() and run.exit_code != 0:
            try:
                with open(spec.log_path, "rb") as f:
                    f.seek(max(0, os.path.getsize(spec.log_path) - 16384))
                    tail = f.read().decode(errors="replace")
            except OSError:
                pass
        run.message = ps.termination_message(text, tail, run.exit_code, spec.fallback_to_logs)
        (self.dir / f"{run.name}.pid").unlink(missing_ok=True)
        log.info(
            "pod %s/%s container %s exited %d", self.ns, self.pod_name, run.name, run.exit_code
        )

    def _wait(self, runs: list[ps.ContainerRun], any_exit: bool = False) -> bool:
        """Wait for the runs to exit (any or all). False if stopped (deletion/deadline/shutdown)."""
        while True:
            exited = False
            for run in runs:
                if run.done:
                    continue
                proc = self.procs.get(run.name)
                rc = proc.poll() if proc is not None else None  # type: ignore[attr-defined]
                if rc is not None:
                    self._collect(run, rc)
                    exited = True
            if all(r.done for r in runs) or (any_exit and exited):
                return True
            if self._deadline_passed() and not self.stop_event.is_set():
                self.terminal_reason, self.terminal_message = "DeadlineExceeded", DEADLINE_MESSAGE
                grace = self.pod["spec"].get("terminationGracePeriodSeconds")
                self.request_stop(30 if grace is None else grace, "DeadlineExceeded")
            if self.stop_event.wait(0.1):
                return False

    def _kill_all(self, grace: float) -> None:
        import signal as sig

        live = [(n, p) for n, p in self.procs.items() if p.poll() is None]  # type: ignore[attr-defined]
        for _, p in live:
            try:
                os.killpg(p.pid, sig.SIGTERM)  # type: ignore[attr-defined]
            except OSError:
                pass
        end = time.monotonic() + grace
        while time.monotonic() < end and any(p.poll() is None for _, p in live):  # type: ignore[attr-defined]
            time.sleep(0.05)
        for _, p in live:
            if p.poll() is None:  # type: ignore[attr-defined]
                try:
                    os.killpg(p.pid, sig.SIGKILL)  # type: ignore[attr-defined]
                except OSError:
                    pass
        for name, p in live:
            try:
                rc = p.wait(timeout=5)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001
                rc = -9
            run = next(r for r in self.init_runs + self.app_runs if r.name == name)
            if not run.done:
                self._collect(run, rc)

    def _finish_stopped(self) -> None:
        log.info(
            "pod %s/%s: stopping (grace %.0fs, reason %s)",
            self.ns,
            self.pod_name,
            self.stop_grace,
            self.stop_reason or "deleted",
        )
        self._kill_all(self.stop_grace)
        if self.stop_reason is None:  # deleted: remove the Pod as a kubelet does
            self.agent.delete_pod(self.ns, self.pod_name, self.uid)
            self.removed = True
            return
        if self.stop_reason == "DeadlineExceeded":
            self._report(phase="Failed", reason="DeadlineExceeded", message=DEADLINE_MESSAGE)
        else:
            self._report(
                phase="Failed",
                reason=self.stop_reason,
                message="the kinetic process node shut down while this pod was running",
            )

    def _report(
        self, phase: str | None = None, reason: str | None = None, message: str | None = None
    ) -> None:
        with self.report_lock:  # the worker and the probers report; one status at a time
            status = ps.pod_status(
                self.init_runs,
                self.app_runs,
                self.restart_policy,
                self.start_time,
                reason=reason,
                message=message,
                phase=phase,
                pod_ip=self.agent.pod_ip,
            )
            self.agent.patch_status(self.ns, self.pod_name, status, self.uid)

    def kill_container(self, run: ps.ContainerRun, proc: object, why: str) -> None:
        """Stop one container (its liveness failed); the worker's loop restarts it."""
        grace = self.pod["spec"].get("terminationGracePeriodSeconds")
        grace = 30.0 if grace is None else float(grace)
        log.info("pod %s/%s container %s: %s; killing it", self.ns, self.pod_name, run.name, why)
        self.agent.event(self.pod, "Warning", "Unhealthy", f"{why}; container will be restarted")
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # type: ignore[attr-defined]
        except OSError:
            return
        end = time.monotonic() + grace
        while time.monotonic() < end and proc.poll() is None:  # type: ignore[attr-defined]
            time.sleep(0.1)
        if proc.poll() is None:  # type: ignore[attr-defined]
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
            except OSError:
                pass


class Prober(threading.Thread):
    """Probes one running container until its process exits, as the kubelet's workers do."""

    def __init__(
        self, worker: PodWorker, run: ps.ContainerRun, proc: object, probes: list[pr.Probe]
    ):
        super().__init__(name=f"probe-{worker.pod_name}/{run.name}", daemon=True)
        self.worker, self.run_, self.proc, self.probes = worker, run, proc, probes

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.worker.stop_event.is_set()  # type: ignore[attr-defined]

    def run(self) -> None:
        try:
            self._loop()
        except Exception:  # noqa: BLE001 - a prober must not take the node down
            log.exception("prober %s", self.name)

    def _loop(self) -> None:
        started = time.monotonic()
        states = {p.kind: pr.ProbeState() for p in self.probes}
        due = {p.kind: started + p.initial_delay for p in self.probes}
        startup_done = not any(p.kind == "startup" for p in self.probes)
        while self.alive():
            now = time.monotonic()
            for probe in self.probes:
                if now < due[probe.kind] or (probe.kind != "startup" and not startup_done):
                    continue
                if probe.kind == "startup" and startup_done:
                    continue
                due[probe.kind] = now + probe.period
                ok, detail = check(probe, self.proc.pid)  # type: ignore[attr-defined]
                if not self.alive():
                    return
                before = states[probe.kind].verdict
                states[probe.kind] = state = pr.observe(probe, states[probe.kind], ok)
                if not ok:
                    log.info("%s: %s probe failed: %s", self.name, probe.kind, detail)
                if probe.kind == "startup" and state.verdict:
                    startup_done = True
                elif probe.kind in ("startup", "liveness") and state.verdict is False:
                    why = f"{probe.kind.capitalize()} probe failed: {detail}"
                    self.worker.kill_container(self.run_, self.proc, why)
                    return
                elif probe.kind == "readiness" and state.verdict != before:
                    self.run_.ready = bool(state.verdict)
                    if not ok:
                        self.worker.agent.event(
                            self.worker.pod,
                            "Warning",
                            "Unhealthy",
                            f"Readiness probe failed: {detail}",
                        )
                    self.worker._report()
            time.sleep(0.1)


def check(probe: pr.Probe, pid: int) -> tuple[bool, str]:
    """Run one probe: (success, what happened)."""
    import socket
    import subprocess
    import urllib.error
    import urllib.request

    try:
        if probe.action == "http":
            import ssl

            ctx = ssl._create_unverified_context()  # the kubelet does not verify either
            try:
                with urllib.request.urlopen(probe.target, timeout=probe.timeout, context=ctx) as r:
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
            return pr.http_ok(status), f"HTTP GET {probe.target}: {status}"
        if probe.action == "tcp":
            host, port = probe.target.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=probe.timeout):
                return True, f"connected to {probe.target}"
        # exec: inside the container's mount namespace
        argv = ["nsenter", "-t", str(pid), "-m", "--", *probe.command]
        done = subprocess.run(argv, capture_output=True, timeout=probe.timeout)
        return done.returncode == 0, f"{list(probe.command)} exited {done.returncode}"
    except Exception as e:  # noqa: BLE001 - any failure to answer is a failed probe
        target = probe.target or list(probe.command)
        return False, f"{probe.action} {target}: {e}"


class Agent:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.name: str = args.name
        self.state_dir = Path(args.state_dir).resolve()
        self.pods_dir = self.state_dir / "pods"
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        cfg = client.Configuration()
        config.load_kube_config(config_file=args.kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = 64
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.coord = client.CoordinationV1Api(self.api)
        self.capacity = capacity_from_args(args)
        self.allocatable = {k: parse_quantity(v) for k, v in self.capacity.items()}
        self.in_use: dict[str, Decimal] = {}
        self.lock = threading.RLock()
        self.workers: dict[str, PodWorker] = {}  # uid -> worker
        self.by_name: dict[tuple[str, str], PodWorker] = {}
        self.finished: set[str] = set()  # uids this agent has settled (terminal/deleted)
        self.deleting: set[str] = set()
        # Pod statuses the API server could not take (it was down), latest per uid, and one
        # lock per uid so a resend never lands after a newer status: see patch_status.
        self.unsent: dict[str, tuple[str, str, dict]] = {}
        self.status_locks: dict[str, threading.Lock] = {}
        self.stopping = threading.Event()
        self.synced = threading.Event()  # /healthz: registered and first pod sync done
        self.bin_dir = os.path.dirname(sys.executable)
        # A kubelet passes none of its own environment to containers; this node passes the
        # machine's (PATH, the venv, the storage emulator) but not what would make pods
        # behave unlike pods: the cluster's credentials, or a ban on bytecode caches that
        # would recompile every module at every pod start.
        self.base_env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "PYTHONDONTWRITEBYTECODE")
            and not k.startswith("KUBERNETES_")
        }
        self.base_env["VIRTUAL_ENV"] = str(Path(self.bin_dir).parent)
        self.version = "v0.0.0-kinetic"
        self.pod_ip: str = args.pod_ip or detect_pod_ip()
        from urllib.parse import urlparse

        api = urlparse(cfg.host)
        self.service_env = vol.service_env(api.hostname or ps.LOOPBACK, api.port or 443)
        self.can_mount = os.geteuid() == 0 and shutil.which("unshare") is not None
        # The watch thread only decides; what takes an API round trip or a disk walk for a
        # deleted Pod happens here, so a batch of thousands being deleted never holds back
        # a new Pod's start (a kubelet's pod workers are independent in the same way).
        self.cleaner = ThreadPoolExecutor(CLEANUP_THREADS, thread_name_prefix="pod-cleanup")

    # ---- API helpers ----
    def _retry(
        self, what: str, fn: Callable[[], object], attempts: int = 8, quiet: bool = False
    ) -> object | None:
        """fn's value; None if the object is gone or the request is refused for good;
        _GAVE_UP if the API server could not be reached (or was overloaded) every time.
        ``quiet`` logs giving up at DEBUG (for resends: the first failure was logged)."""
        warn = log.debug if quiet else log.warning
        delay = 0.1
        for i in range(attempts):
            try:
                return fn()
            except ApiException as e:
                if e.status == 404:
                    log.debug("%s: not found", what)
                    return None
                if e.status not in (409, 429, 500, 502, 503, 504):
                    log.warning("%s failed: %s %s", what, e.status, e.reason)
                    return None
                if i == attempts - 1:
                    warn("%s failed: %s %s", what, e.status, e.reason)
                    return _GAVE_UP
            except Exception as e:  # noqa: BLE001 - connection errors: the apiserver may restart
                if i == attempts - 1:
                    warn("%s failed: %s", what, e)
                    return _GAVE_UP
            time.sleep(delay)
            delay = min(delay * 2, 3)
        return _GAVE_UP

    def _status_lock(self, uid: str) -> threading.Lock:
        with self.lock:
            return self.status_locks.setdefault(uid, threading.Lock())

    def patch_status(self, ns: str, name: str, status: dict, uid: str) -> None:
        """Report a pod's status; one the API server cannot take now is kept and sent again.

        A kubelet's status manager keeps at it until the API server has each
        pod's latest status, and so does this node: a pod that finished while
        the API server was down must not look Running forever, nor must
        whatever waits for it (a batch's next launch) wait forever with it.
        """
        with self._status_lock(uid):
            self._send_status(uid, ns, name, status)

    def _send_status(
        self, uid: str, ns: str, name: str, status: dict, resend: bool = False
    ) -> None:
        """Patch the status (the caller holds the uid's status lock); remember it if unsent."""
        sent = self._retry(
            f"status of {ns}/{name}",
            lambda: self.core.patch_namespaced_pod_status(name, ns, {"status": status}),
            attempts=2 if resend else 8,
            quiet=resend,
        )
        with self.lock:
            if sent is _GAVE_UP:
                if not resend:
                    log.warning(
                        "pod %s/%s: status kept, to send when the API server answers", ns, name
                    )
                self.unsent[uid] = (ns, name, status)
            else:
                self.unsent.pop(uid, None)

    def resend_statuses(self) -> None:
        """Send again each pod's latest status the API server could not take before."""
        with self.lock:
            pending = list(self.unsent.items())
        for uid, entry in pending:
            lock = self._status_lock(uid)
            if not lock.acquire(blocking=False):
                continue  # its worker is reporting a newer status right now
            try:
                with self.lock:
                    if self.unsent.get(uid) is not entry:
                        continue  # sent, or replaced by a newer one, meanwhile
                ns, name, status = entry
                self._send_status(uid, ns, name, status, resend=True)
                if uid not in self.unsent:
                    log.info("pod %s/%s: status delivered after the API server came back", ns, name)
            finally:
                lock.release()

    def resend_loop(self) -> None:
        while not self.stopping.wait(RESEND_INTERVAL):
            try:
                self.resend_statuses()
            except Exception:  # noqa: BLE001 - never let this thread die
                log.exception("re-sending pod statuses")

    def delete_pod(self, ns: str, name: str, uid: str) -> None:
        body = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
        )
        self._retry(
            f"delete {ns}/{name}",
            lambda: self.core.delete_namespaced_pod(name, ns, body=body, grace_period_seconds=0),
        )

    def fetch_data(self, kind: str, ns: str, name: str) -> dict[str, bytes] | None:
        """A ConfigMap's or Secret's data as bytes, for volumes; None if it does not exist.

        The API server's Node authorizer lets a node read a Secret only once its
        graph links the object to a Pod bound to that node, which can lag the
        binding the node just saw: a 403 then means "not yet", and is retried
        for a while, as a kubelet keeps retrying a mount.
        """
        delay, waited = 0.1, 0.0
        while True:
            try:
                return self._read_data(kind, ns, name)
            except ApiException as e:
                if e.status == 404:
                    return None
                if e.status != 403 or waited >= NODE_AUTHZ_WAIT_SECONDS:
                    raise
            time.sleep(delay)
            waited += delay
            delay = min(delay * 2, 2.0)

    def _read_data(self, kind: str, ns: str, name: str) -> dict[str, bytes]:
        import base64

        if kind == "configMap":
            cm = self.core.read_namespaced_config_map(name, ns)
            data = {k: v.encode() for k, v in (cm.data or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
            return data
        secret = self.core.read_namespaced_secret(name, ns)
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    def request_token(self, pod: dict, audience: str | None, seconds: int) -> str:
        """A ServiceAccount token bound to the pod (TokenRequest), as for projected volumes."""
        md = pod["metadata"]
        sa = pod["spec"].get("serviceAccountName") or "default"
        body = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[audience] if audience else [],
                expiration_seconds=max(seconds, 600),
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=md["name"], uid=md["uid"]
                ),
            )
        )
        got = self.core.create_namespaced_service_account_token(sa, md["namespace"], body)
        return got.status.token

    def event(self, pod: dict, etype: str, reason: str, message: str) -> None:
        """Post an Event about the pod (probe failures), as `kubectl describe` shows them."""
        md = pod["metadata"]
        now = ps.now_iso()
        body = {
            "metadata": {"generateName": f"{md['name']}.", "namespace": md["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "namespace": md["namespace"],
                "name": md["name"],
                "uid": md["uid"],
                "apiVersion": "v1",
            },
            "type": etype,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "kubelet", "host": self.name},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._retry(
            f"event for {md['namespace']}/{md['name']}",
            lambda: self.core.create_namespaced_event(md["namespace"], body),
            attempts=2,
        )

    def lookup(self, kind: str, ns: str, name: str, key: str) -> str | dict | None:
        """configMap/secret values for env (the Node authorizer allows those its pods use)."""
        import base64

        try:
            if kind.startswith("configMap"):
                data = self.core.read_namespaced_config_map(name, ns).data or {}
            else:
                raw = self.core.read_namespaced_secret(name, ns).data or {}
                data = {k: base64.b64decode(v).decode() for k, v in raw.items()}
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return data if key == "*" else data.get(key)

    # ---- node registration and heartbeats ----
    def register(self) -> None:
        try:
            self.version = client.VersionApi(self.api).get_code().git_version
        except Exception:  # noqa: BLE001
            pass
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "kinetic.dev/process-node": "true",
                },
            },
        }
        try:
            self.core.create_node(node)
            log.info("registered node %s", self.name)
        except ApiException as e:
            if e.status != 409:
                raise
        self.heartbeat_status()
        self.remove_not_ready_taint()

    def _node_status(self) -> dict:
        now = ps.now_iso()
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kinetic process node is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        conds = [ready] + [
            {
                "type": t,
                "status": "False",
                "reason": r,
                "message": "ok",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for t, r in (
                ("MemoryPressure", "KubeletHasSufficientMemory"),
                ("DiskPressure", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "KubeletHasSufficientPID"),
            )
        ]
        return {
            "capacity": self.capacity,
            "allocatable": self.capacity,
            "conditions": conds,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.args.port}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": os.uname().release,
                "osImage": "kinetic process node",
                "containerRuntimeVersion": "process://local",
                "kubeletVersion": self.version,
                "kubeProxyVersion": self.version,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def heartbeat_status(self) -> None:
        self._retry(
            "node status",
            lambda: self.core.patch_node_status(self.name, {"status": self._node_status()}),
        )

    def remove_not_ready_taint(self) -> None:
        node = self.core.read_node(self.name)
        taints = node.spec.taints or []
        keep = [t for t in taints if t.key != NOT_READY_TAINT]
        if len(keep) != len(taints):
            patch = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": node.metadata.resource_version,
                },
                {
                    "op": "replace",
                    "path": "/spec/taints",
                    "value": [self.api.sanitize_for_serialization(t) for t in keep],
                },
            ]
            self.core.patch_node(self.name, patch)
            log.info("removed taint %s", NOT_READY_TAINT)

    def renew_lease(self) -> None:
        import datetime as dt

        # MicroTime must carry microseconds; isoformat() drops them when they are 0.
        now = dt.datetime.now(dt.UTC)
        now = now.replace(microsecond=now.microsecond or 1)
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=LEASE_NS),
            spec=client.V1LeaseSpec(
                holder_identity=self.name, lease_duration_seconds=40, renew_time=now
            ),
        )
        try:
            self.coord.patch_namespaced_lease(self.name, LEASE_NS, body)
        except ApiException as e:
            if e.status != 404:
                raise
            self.coord.create_namespaced_lease(LEASE_NS, body)

    def heartbeat_loop(self) -> None:
        n = 0
        while not self.stopping.wait(self.args.heartbeat):
            n += 1
            try:
                self.renew_lease()
                if n % 3 == 0:
                    self.heartbeat_status()
                    self.remove_not_ready_taint()
            except Exception as e:  # noqa: BLE001
                log.warning("heartbeat failed: %s", e)

    # ---- pods ----
    def log_target(
        self, ns: str, pod: str, container: str
    ) -> tuple[Path, Callable[[], bool]] | None:
        with self.lock:
            w = self.by_name.get((ns, pod))
        if w is not None and container in w.specs:
            return Path(w.specs[container].log_path), lambda: w.is_running(container)
        dirs = sorted(self.pods_dir.glob(f"{ns}_{pod}_*"), key=lambda p: p.stat().st_mtime)
        for d in reversed(dirs):
            if (d / f"{container}.log").exists():
                return d / f"{container}.log", lambda: False
        return None

    def _kill_leftovers(self, pod_dir: Path) -> None:
        for pf in pod_dir.glob("*.pid"):
            pid = read_live_pid(pf)
            if pid is not None:
                log.info("killing leftover process group %d from %s", pid, pf)
                stop_pid(pid, grace=2)
            pf.unlink(missing_ok=True)

    def _fail_orphan(self, pod: dict) -> None:
        md, spec = pod["metadata"], pod["spec"]
        pod_dir = self.pods_dir / ps.pod_dir_name(pod)
        if pod_dir.exists():
            self._kill_leftovers(pod_dir)
        self.finished.add(md["uid"])
        now = time.time()
        msg = (
            "the kinetic process node restarted while this pod was running; its processes "
            "were stopped and cannot be resumed"
        )
        runs = [
            ps.ContainerRun(
                c["name"],
                c.get("image", ""),
                started_at=now,
                finished_at=now,
                exit_code=137,
                reason="NodeRestarted",
                message=msg,
            )
            for c in spec.get("containers") or []
        ]
        status = ps.pod_status(
            [],
            runs,
            "Never",
            now,
            reason="NodeRestarted",
            message=msg,
            phase="Failed",
            pod_ip=self.pod_ip,
        )
        log.info(
            "pod %s/%s orphaned by a node restart: marking Failed", md["namespace"], md["name"]
        )
        self.patch_status(md["namespace"], md["name"], status, md["uid"])

    def on_pod(self, etype: str, pod: dict) -> None:
        md = pod["metadata"]
        uid, ns, name = md["uid"], md["namespace"], md["name"]
        with self.lock:
            worker = self.workers.get(uid)
        if etype == "DELETED":
            if worker is not None:
                worker.request_stop(2)
            else:
                self._in_background(self._cleanup_dir, pod)
            with self.lock:
                self.finished.discard(uid)
                self.deleting.discard(uid)
                self.unsent.pop(uid, None)
                self.status_locks.pop(uid, None)
                if (
                    self.by_name.get((ns, name)) is worker
                    and worker is not None
                    and worker.finished.is_set()
                ):
                    self.by_name.pop((ns, name), None)
            return
        if md.get("deletionTimestamp"):
            grace = md.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
            if worker is not None and not worker.finished.is_set():
                worker.request_stop(float(grace))
            elif int(grace) == 0:
                # Grace 0 (a finished Pod, or --force): the API server removes the object
                # itself; a DELETE from us would only be answered 404.
                return
            elif uid not in self.deleting:
                self.deleting.add(uid)
                self._in_background(self._remove_finished, pod)
            return
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if worker is not None or uid in self.finished or phase in ("Succeeded", "Failed"):
            return
        if self.stopping.is_set():
            return
        if phase == "Running" or (self.pods_dir / ps.pod_dir_name(pod)).exists():
            self._fail_orphan(pod)
            return
        self._admit_and_start(pod)

    def _admit_and_start(self, pod: dict) -> None:
        md = pod["metadata"]
        request = ps.pod_requests(pod)
        with self.lock:
            refusal = ps.admit(request, self.in_use, self.allocatable)
            if refusal is None:
                self.in_use = ps.add(self.in_use, request)
                worker = PodWorker(self, pod, request)
                self.workers[md["uid"]] = worker
                self.by_name[(md["namespace"], md["name"])] = worker
        if refusal is not None:
            reason, message = refusal
            self.finished.add(md["uid"])
            log.warning("pod %s/%s rejected: %s", md["namespace"], md["name"], message)
            names = [c["name"] for c in pod["spec"].get("containers") or []]
            self.patch_status(
                md["namespace"],
                md["name"],
                ps.failed_status(reason, message, names, time.time(), self.pod_ip),
                md["uid"],
            )
            return
        worker.start()

    def worker_done(self, worker: PodWorker) -> None:
        with self.lock:
            self.workers.pop(worker.uid, None)
            self.in_use = ps.add(self.in_use, worker.request, -1)
            self.finished.add(worker.uid)
            others = [t for w in self.workers.values() for t in w.mount_targets]
            for path in worker.made_dirs:  # deepest first; rmdir keeps anything not empty
                if not vol.in_use(path, others):
                    with contextlib.suppress(OSError):
                        os.rmdir(path)
        if worker.stop_reason is None and worker.stop_event.is_set():
            # deleted: its logs go with it
            self._cleanup_dir(worker.pod)
            if not worker.removed:
                # Its containers ended on their own just as it was deleted (after its
                # last wait), and its last status came before: no later event will
                # bring it back to on_pod, so remove it now, or it stays Terminating.
                self.delete_pod(worker.ns, worker.pod_name, worker.uid)

    def _in_background(self, fn: Callable[[dict], None], pod: dict) -> None:
        """``fn(pod)`` on the cleanup threads; an error is logged, not lost in a Future."""

        def run() -> None:
            try:
                fn(pod)
            except Exception:  # noqa: BLE001 - one pod's cleanup must not stop the others
                log.exception("cleaning up pod %s", pod["metadata"].get("name"))

        self.cleaner.submit(run)

    def _remove_finished(self, pod: dict) -> None:
        """A finished Pod being deleted with a grace period: no process to stop, so remove it."""
        md = pod["metadata"]
        pod_dir = self.pods_dir / ps.pod_dir_name(pod)
        if pod_dir.exists():
            self._kill_leftovers(pod_dir)
        self.delete_pod(md["namespace"], md["name"], md["uid"])

    def _cleanup_dir(self, pod: dict) -> None:
        d = self.pods_dir / ps.pod_dir_name(pod)
        if d.exists():
            self._kill_leftovers(d)
            shutil.rmtree(d, ignore_errors=True)

    # ---- main loop ----
    def _list(self) -> tuple[list[dict], str]:
        resp = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.name}", _preload_content=False
        )
        body = json.loads(resp.data)
        return body.get("items") or [], body["metadata"]["resourceVersion"]

    def sync(self) -> str:
        """List and reconcile (start-up, and after a broken watch); returns the resourceVersion."""
        pods, rv = self._list()
        seen = {p["metadata"]["uid"] for p in pods}
        for pod in pods:
            try:
                self.on_pod("MODIFIED", pod)
            except Exception:  # noqa: BLE001
                log.exception("handling pod %s", pod["metadata"].get("name"))
        with self.lock:
            gone = [w for uid, w in self.workers.items() if uid not in seen]
        for w in gone:
            w.request_stop(2)
        return rv

    def watch_loop(self) -> None:
        rv = self.sync()
        self.synced.set()
        while not self.stopping.is_set():
            w = _RawWatch()
            try:
                for ev in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=f"spec.nodeName={self.name}",
                    resource_version=rv,
                    timeout_seconds=300,
                    allow_watch_bookmarks=True,
                ):
                    pod = ev["object"]
                    if ev["type"] == "ERROR":
                        raise RuntimeError(f"watch error: {pod}")
                    rv = pod["metadata"].get("resourceVersion", rv)
                    if ev["type"] == "BOOKMARK":
                        continue
                    try:
                        self.on_pod(ev["type"], pod)
                    except Exception:  # noqa: BLE001
                        log.exception("handling pod event %s", pod["metadata"].get("name"))
            except _Shutdown:
                raise
            except Exception as e:  # noqa: BLE001 - 410 Gone, connection resets: relist
                if self.stopping.is_set():
                    return
                log.info("watch ended (%s); relisting", e)
                time.sleep(0.5)
                while not self.stopping.is_set():
                    try:
                        rv = self.sync()
                        break
                    except _Shutdown:
                        raise
                    except Exception as e2:  # noqa: BLE001
                        log.warning("relist failed: %s", e2)
                        time.sleep(2)

    def shutdown(self) -> None:
        """Stop every pod process (a process node cannot keep them past its own life)."""
        self.stopping.set()
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.request_stop(5, "NodeShutdown")
        for w in workers:
            w.join(timeout=15)
        self.cleaner.shutdown(wait=False, cancel_futures=True)
        log.info("process node stopped (%d pods stopped)", len(workers))

    def run(self) -> None:
        self.register()
        server = LogServer(
            self.args.port,
            self.args.tls_cert,
            self.args.tls_key,
            self.args.client_ca,
            self.log_target,
            healthy=self.synced.is_set,
        )
        server.start()
        try:
            self.renew_lease()
        except Exception as e:  # noqa: BLE001
            log.warning("lease: %s", e)
        threading.Thread(target=self.heartbeat_loop, name="heartbeat", daemon=True).start()
        threading.Thread(target=self.resend_loop, name="status-resend", daemon=True).start()
        log.info(
            "process node %s ready: capacity %s, logs on https://127.0.0.1:%d, pod IP %s",
            self.name,
            self.capacity,
            self.args.port,
            self.pod_ip,
        )
        try:
            self.watch_loop()
        except _Shutdown:
            pass
        finally:
            self.shutdown()
            server.shutdown()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s",
    )
    logging.getLogger("urllib3").setLevel(logging.ERROR)

    def on_signal(signum, frame):  # noqa: ANN001, ARG001
        raise _Shutdown()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent = Agent(args)
    agent.run()


if __name__ == "__main__":
    main()

__all__ = ["Agent", "PodWorker", "main", "proc_start_time"]
