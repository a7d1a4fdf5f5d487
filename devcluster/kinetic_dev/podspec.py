"""Pure logic of the process node: Pod spec -> process, resources, exit -> status.

Everything here works on the API's JSON form (camelCase dicts, as returned by
``ApiClient.sanitize_for_serialization``) and does no I/O, so it is unit-tested
without a cluster.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from kubernetes.utils.quantity import parse_quantity

TERMINATION_MESSAGE_LIMIT = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
DEFAULT_TERMINATION_PATH = "/dev/termination-log"


class PodConfigError(ValueError):
    """The Pod asks for something a process node cannot do (reported on the Pod)."""


@dataclass
class ProcessSpec:
    """What to exec for one container."""

    container: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    log_path: str
    termination_log: str
    fallback_to_logs: bool = False


def pod_dir_name(pod: Mapping) -> str:
    md = pod["metadata"]
    return f"{md['namespace']}_{md['name']}_{md.get('uid', 'nouid')[:8]}"


# ---- env -----------------------------------------------------------------------------------------
_FIELD_LABEL = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


LOOPBACK = "127.0.0.1"


def field_ref(pod: Mapping, path: str, node_name: str, pod_ip: str = LOOPBACK) -> str:
    """The subset of the downward API a process can use."""
    md = pod.get("metadata", {})
    simple = {
        "metadata.name": md.get("name", ""),
        "metadata.namespace": md.get("namespace", ""),
        "metadata.uid": md.get("uid", ""),
        "spec.nodeName": pod.get("spec", {}).get("nodeName") or node_name,
        "spec.serviceAccountName": pod.get("spec", {}).get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.hostIP": pod_ip,
    }
    if path in simple:
        return simple[path]
    m = _FIELD_LABEL.match(path)
    if m:
        return (md.get(m.group(1)) or {}).get(m.group(2), "")
    raise PodConfigError(f"unsupported fieldRef {path!r} on the process node")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined vars are replaced, ``$$`` escapes, others kept."""
    out = []
    i = 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
        elif value.startswith("$(", i):
            end = value.find(")", i + 2)
            if end == -1:
                out.append(value[i:])
                break
            name = value[i + 2 : end]
            out.append(env[name] if name in env else value[i : end + 1])
            i = end + 1
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


# (kind, namespace, name, key) -> the value, or with key "*" the whole data as a dict
Lookup = Callable[[str, str, str, str], "str | dict | None"]


def container_env(
    pod: Mapping,
    container: Mapping,
    node_name: str,
    lookup: Lookup | None = None,
    pod_ip: str = LOOPBACK,
) -> dict[str, str]:
    """envFrom then env, in order, with $(VAR) expansion against what came before."""
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        for kind in ("configMapRef", "secretRef"):
            ref = src.get(kind)
            if ref:
                if lookup is None:
                    raise PodConfigError(f"envFrom.{kind} needs API access")
                data = lookup(kind, ns, ref["name"], "*")
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise PodConfigError(f"{kind} {ns}/{ref['name']} not found")
                if not isinstance(data, dict):
                    raise PodConfigError(f"{kind} {ns}/{ref['name']}: not a map of values")
                for k, v in data.items():
                    env[prefix + k] = v
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" in var and var["valueFrom"]:
            vf = var["valueFrom"]
            if vf.get("fieldRef"):
                env[name] = field_ref(pod, vf["fieldRef"]["fieldPath"], node_name, pod_ip)
            elif vf.get("configMapKeyRef") or vf.get("secretKeyRef"):
                kind = "configMapKeyRef" if vf.get("configMapKeyRef") else "secretKeyRef"
                ref = vf[kind]
                val = lookup(kind, ns, ref["name"], ref["key"]) if lookup else None
                if val is None:
                    if ref.get("optional"):
                        continue
                    raise PodConfigError(f"{kind} {ns}/{ref['name']}[{ref['key']}] not found")
                env[name] = val if isinstance(val, str) else str(val)
            else:
                raise PodConfigError(
                    f"env {name}: only fieldRef, configMapKeyRef and secretKeyRef are supported"
                )
        else:
            env[name] = expand(var.get("value") or "", env)
    return env


def process_spec(
    pod: Mapping,
    container: Mapping,
    *,
    node_name: str,
    pod_dir: Path,
    base_env: Mapping[str, str],
    bin_dir: str | None = None,
    lookup: Lookup | None = None,
    pod_ip: str = LOOPBACK,
    service_env: Mapping[str, str] | None = None,
) -> ProcessSpec:
    """Pod + container -> argv/env/cwd. The image is ignored: no entrypoint exists here.

    ``service_env`` is what a kubelet adds for the API server's Service
    (KUBERNETES_SERVICE_HOST/PORT): in-cluster clients find the API with it.
    """
    name = container["name"]
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if not command:
        raise PodConfigError(
            f"container {name!r} has no command: the process node ignores images, so there "
            "is no image entrypoint; set command (and args)"
        )
    term_log = str(pod_dir / f"{name}.termination-log")
    env = {k: v for k, v in base_env.items() if k != "KUBECONFIG"}
    path = env.get("PATH", os.defpath)
    if bin_dir:
        env["PATH"] = bin_dir + os.pathsep + path
    md = pod["metadata"]
    env.update(
        {
            "HOSTNAME": md["name"],
            "KINETIC_TERMINATION_LOG": term_log,
            "KINETIC_POD_DIR": str(pod_dir),
            **(service_env or {}),
        }
    )
    own = container_env(pod, container, node_name, lookup, pod_ip)
    env.update(own)
    argv = [expand(a, own) for a in command + args]
    cwd = container.get("workingDir") or str(pod_dir / "work")
    return ProcessSpec(
        container=name,
        argv=argv,
        env=env,
        cwd=cwd,
        log_path=str(pod_dir / f"{name}.log"),
        termination_log=term_log,
        fallback_to_logs=container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
    )


# ---- resources -----------------------------------------------------------------------------------
def _requests(container: Mapping) -> dict[str, Decimal]:
    res = container.get("resources") or {}
    reqs = dict(res.get("limits") or {})  # limits default the requests
    reqs.update(res.get("requests") or {})
    return {k: parse_quantity(v) for k, v in reqs.items()}


def pod_requests(pod: Mapping) -> dict[str, Decimal]:
    """As the scheduler computes it: max(sum of app containers, each init container), + pods=1."""
    spec = pod.get("spec", {})
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in _requests(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in _requests(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, Decimal(0)) + parse_quantity(v)
    total["pods"] = Decimal(1)
    return total


def admit(
    request: Mapping[str, Decimal],
    in_use: Mapping[str, Decimal],
    allocatable: Mapping[str, Decimal],
) -> tuple[str, str] | None:
    """None if it fits, else (reason, message) as the kubelet reports them (OutOf<resource>)."""
    for res, want in sorted(request.items()):
        if want <= 0:
            continue
        cap = allocatable.get(res, Decimal(0))
        used = in_use.get(res, Decimal(0))
        if used + want > cap:
            return (
                f"OutOf{res}",
                f"Pod Node didn't have enough resource: {res}, requested: {want}, "
                f"used: {used}, capacity: {cap}",
            )
    return None


def add(a: Mapping[str, Decimal], b: Mapping[str, Decimal], sign: int = 1) -> dict[str, Decimal]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Decimal(0)) + sign * v
    return out


# ---- status ----------------------------------------------------------------------------
def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def termination_message(file_text: str, log_tail: str, exit_code: int, fallback: bool) -> str:
    """File content, else (FallbackToLogsOnError and failed) the log tail; capped at 4096 bytes."""
    msg = file_text
    if not msg.strip() and fallback and exit_code != 0:
        lines = log_tail.splitlines()[-FALLBACK_LOG_LINES:]
        tail = "\n".join(lines)
        msg = tail.encode()[-FALLBACK_LOG_BYTES:].decode(errors="ignore")
    return msg.encode()[:TERMINATION_MESSAGE_LIMIT].decode(errors="ignore")


def exit_code_of(returncode: int) -> int:
    """Popen's -N (killed by signal N) becomes 128+N, as container runtimes report it."""
    return 128 - returncode if returncode < 0 else returncode


# The kubelet's crash-loop back-off: the cap, and how long a run must last to reset it.
MAX_BACKOFF_SECONDS = 300.0
BACKOFF_RESET_SECONDS = 600.0


@dataclass
class ContainerRun:
    """What the node knows about one container's process (init or app)."""

    name: str
    image: str = ""
    pid: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    message: str = ""
    reason: str | None = None  # override (e.g. DeadlineExceeded, CreateContainerConfigError)
    restart_count: int = 0
    # Doublings of the restart delay so far; back to 0 after a long enough run.
    backoff_step: int = 0
    last_state: dict = field(default_factory=dict)
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    # The readiness probe's verdict; None: no readiness probe, ready while running.
    ready: bool | None = None

    def restart_delay(self) -> float:
        """Seconds to wait before restarting this finished run, as a kubelet would.

        10 s doubling up to 5 min; a run that lasted BACKOFF_RESET_SECONDS or
        more starts the doubling over, so a container that crashes once a day
        is not held back for 5 minutes forever after its first crash loop.
        """
        lasted = (self.finished_at or 0.0) - (self.started_at or 0.0)
        if self.started_at is not None and lasted >= BACKOFF_RESET_SECONDS:
            self.backoff_step = 0
        delay = min(10.0 * 2**self.backoff_step, MAX_BACKOFF_SECONDS)
        self.backoff_step += 1
        return delay

    def reset_for_restart(self, message: str) -> None:
        """Keep the finished run as lastState and wait (CrashLoopBackOff) for the next one."""
        self.last_state = {"terminated": container_status(self)["state"]["terminated"]}
        self.restart_count += 1
        self.pid = self.started_at = self.finished_at = self.exit_code = None
        self.reason = None
        if self.ready is not None:
            self.ready = False
        self.message = ""
        self.waiting_reason, self.waiting_message = "CrashLoopBackOff", message

    @property
    def running(self) -> bool:
        return self.started_at is not None and self.finished_at is None

    @property
    def done(self) -> bool:
        return self.finished_at is not None


def container_status(run: ContainerRun, ready_when_running: bool = True) -> dict:
    """ContainerRun -> a containerStatuses[] entry."""
    st: dict = {
        "name": run.name,
        "image": run.image,
        "imageID": "",
        "restartCount": run.restart_count,
        "ready": False,
        "started": run.running,
        "lastState": run.last_state,
    }
    if run.pid is not None:
        st["containerID"] = f"process://{run.pid}"
    if run.done:
        code = run.exit_code if run.exit_code is not None else 1
        term = {
            "exitCode": code,
            "reason": run.reason or ("Completed" if code == 0 else "Error"),
            "finishedAt": iso(run.finished_at),  # type: ignore[arg-type]
        }
        if run.started_at is not None:
            term["startedAt"] = iso(run.started_at)
        if run.message:
            term["message"] = run.message
        if run.pid is not None:
            term["containerID"] = f"process://{run.pid}"
        st["state"] = {"terminated": term}
    elif run.running:
        st["ready"] = ready_when_running and run.ready is not False
        st["state"] = {"running": {"startedAt": iso(run.started_at)}}  # type: ignore[arg-type]
    else:
        waiting = {"reason": run.waiting_reason}
        if run.waiting_message:
            waiting["message"] = run.waiting_message
        st["state"] = {"waiting": waiting}
    return st


def pod_phase(init: list[ContainerRun], app: list[ContainerRun], restart_policy: str) -> str:
    """Pending until the app containers start; Succeeded/Failed once all of them ended."""
    if any(r.done and r.exit_code not in (0, None) for r in init) and restart_policy == "Never":
        return "Failed"
    if app and all(r.done for r in app):
        return "Succeeded" if all(r.exit_code == 0 for r in app) else "Failed"
    if any(r.started_at is not None or r.restart_count > 0 for r in app):
        return "Running"
    return "Pending"


def _cond(ctype: str, status: bool, reason: str | None = None, msg: str | None = None) -> dict:
    c = {
        "type": ctype,
        "status": "True" if status else "False",
        "lastTransitionTime": now_iso(),
        "lastProbeTime": None,
    }
    if reason:
        c["reason"] = reason
    if msg:
        c["message"] = msg
    return c


def pod_status(
    init: list[ContainerRun],
    app: list[ContainerRun],
    restart_policy: str,
    start_time: float,
    reason: str | None = None,
    message: str | None = None,
    phase: str | None = None,
    pod_ip: str = LOOPBACK,
) -> dict:
    """The whole status block the node patches (conditions merge by type).

    The pod is Ready when every app container runs and none has a readiness
    probe saying otherwise: the endpoints controller lists only Ready pods.
    """
    phase = phase or pod_phase(init, app, restart_policy)
    initialized = all(r.done and r.exit_code == 0 for r in init)
    running = phase == "Running" and all(r.running and r.ready is not False for r in app)
    terminal = phase in ("Succeeded", "Failed")
    not_ready_reason = "PodCompleted" if terminal else "ContainersNotReady"
    status = {
        "phase": phase,
        "hostIP": pod_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": iso(start_time),
        "qosClass": None,
        "conditions": [
            _cond(
                "Initialized",
                initialized or terminal,
                None if initialized or terminal else "ContainersNotInitialized",
            ),
            _cond("Ready", running, None if running else not_ready_reason),
            _cond("ContainersReady", running, None if running else not_ready_reason),
        ],
        "containerStatuses": [container_status(r) for r in app],
    }
    status.pop("qosClass")
    if init:
        status["initContainerStatuses"] = [container_status(r, False) for r in init]
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return status


def failed_status(
    reason: str,
    message: str,
    containers: list[str],
    start_time: float,
    pod_ip: str = LOOPBACK,
) -> dict:
    """A Pod the node refuses or gave up on: Failed with a reason, containers never ran."""
    runs = [
        ContainerRun(name=n, waiting_reason=reason, waiting_message=message) for n in containers
    ]
    st = pod_status(
        [], runs, "Never", start_time, reason=reason, message=message, phase="Failed", pod_ip=pod_ip
    )
    return st
