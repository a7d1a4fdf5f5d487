"""Attaching a debugger to a debug job: the port-forward and the editor's configuration.

`@kinetic.run(debug=True)` makes the Pod's runner start debugpy on the Pod's
loopback and wait (`kinetic.runtime.debugger`). `JobHandle.debug_attach` waits
for the runner's ready line, then calls `start_port_forward` here: a
``kubectl port-forward`` process, returned to the caller as the reference API
returns it, which `cleanup_port_forward` ends.

Path mappings: a function shipped by value keeps the file names it had on the
submitting machine (its code objects carry them), so the Pod's paths *are* the
local ones and the mapping is the identity on the working directory. Breakpoints
set in the editor on the local files match the frames in the Pod as they are.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from kinetic.model.job_status import JobStatus
from kinetic.model.names import DEBUG_PORT

__all__ = [
    "DEBUGPY_PORT",
    "DEBUG_PORT",
    "DebugAttachError",
    "cleanup_port_forward",
    "free_local_port",
    "print_attach_instructions",
    "start_port_forward",
    "vscode_configuration",
    "wait_for_debug_server",
]

FORWARD_READY_TIMEOUT = 30.0
DEBUGPY_PORT = DEBUG_PORT  # the reference's name for it
# What kubectl port-forward prints when a client connects through the forward.
_CONNECTION_LINE = "Handling connection for"


class _DebugServer(Protocol):
    """A handle whose job runs debugpy (`kinetic.api.handle.JobHandle`, above this module)."""

    def wait_for_debug_server(self, timeout: float | None = ...) -> str: ...


def wait_for_debug_server(handle: _DebugServer, *, timeout: float | None = 600.0) -> str:
    """Wait until the job's runner says debugpy listens; return its Pod's name.

    The reference's helper: `JobHandle.wait_for_debug_server` does the work.
    """
    return handle.wait_for_debug_server(timeout)


def free_local_port(preferred: int = DEBUG_PORT) -> int:
    """``preferred`` when nothing listens on it at the loopback, else a free port.

    Another forward (or another debug session) may hold 5678; a blocking
    debug call then forwards another port and prints which.
    """
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise DebugAttachError("no free local port to forward the debugger to")


class DebugAttachError(RuntimeError):
    """The debugger could not be connected to the job (no kubectl, no Pod, a failed forward)."""


def vscode_configuration(local_port: int, working_dir: str | None = None) -> dict[str, Any]:
    """A VS Code ``launch.json`` entry that attaches to the forwarded port.

    ``working_dir`` is the local folder of the function's source (default: this
    process's current directory); see the module docstring for why the remote
    root is the same path.
    """
    root = os.path.abspath(working_dir) if working_dir else os.getcwd()
    return {
        "name": "Attach to Kinetic job",
        "type": "debugpy",
        "request": "attach",
        "connect": {"host": "localhost", "port": local_port},
        "pathMappings": [{"localRoot": root, "remoteRoot": root}],
        "justMyCode": True,
    }


def print_attach_instructions(local_port: int, working_dir: str | None = None) -> None:
    """Print what to paste into ``.vscode/launch.json`` (or any DAP client's settings)."""
    config = json.dumps(vscode_configuration(local_port, working_dir), indent=2)
    print(
        f"debugpy is forwarded to localhost:{local_port}. Attach your debugger; for VS Code, "
        f"add this to .vscode/launch.json under configurations and start it:\n{config}",
        flush=True,
    )


def port_forward_argv(
    kubectl: str, pod: str, namespace: str, local_port: int, remote_port: int, context: str | None
) -> list[str]:
    """The ``kubectl port-forward`` command line (local loopback only)."""
    argv = [kubectl, "port-forward", "--namespace", namespace, "--address", "127.0.0.1"]
    if context:
        argv += ["--context", context]
    return [*argv, f"pod/{pod}", f"{local_port}:{remote_port}"]


def start_port_forward(
    pod: str,
    namespace: str,
    local_port: int = DEBUG_PORT,
    remote_port: int = DEBUG_PORT,
    context: str | None = None,
    ready_timeout: float = FORWARD_READY_TIMEOUT,
    *,
    on_connection: Callable[[], None] | None = None,
) -> subprocess.Popen[str]:
    """Start ``kubectl port-forward`` to the Pod and return it once it forwards.

    kubectl says "Forwarding from ..." when the local port is listening; until
    then a connection would be refused, so this waits for that line. A forward
    that exits first (port in use, Pod gone, no rights) raises with kubectl's
    own message. ``on_connection`` is called once, from the thread that reads
    kubectl's output, when the first client connects through the forward.
    """
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise DebugAttachError(
            "debug_attach starts `kubectl port-forward`, and kubectl is not on PATH: install "
            "kubectl (the same one your kubeconfig works with) and try again"
        )
    argv = port_forward_argv(kubectl, pod, namespace, local_port, remote_port, context)
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc, lines, on_connection), daemon=True).start()
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:  # kubectl exited before forwarding
            err = proc.stderr.read() if proc.stderr else ""
            raise DebugAttachError(
                f"kubectl port-forward to pod {pod} exited ({proc.wait()}): {err.strip()}"
            )
        if line.startswith("Forwarding from"):
            return proc
    cleanup_port_forward(proc)
    raise DebugAttachError(
        f"kubectl port-forward to pod {pod} did not start forwarding within {ready_timeout:.0f} s"
    )


def _pump(
    proc: subprocess.Popen[str],
    lines: queue.Queue[str | None],
    on_connection: Callable[[], None] | None = None,
) -> None:
    """Hand kubectl's stdout lines over until it closes (None), draining it meanwhile so the
    forward never blocks on a full pipe; tell ``on_connection`` of the first connection."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if on_connection is not None and line.startswith(_CONNECTION_LINE):
            on_connection()
            on_connection = None
        lines.put(line)
    lines.put(None)


def cleanup_port_forward(proc: subprocess.Popen[Any], *, timeout: float = 5.0) -> None:
    """End a forward from `start_port_forward` (or `JobHandle.debug_attach`): terminate,
    and kill it if it has not ended within `timeout` seconds. Safe to call twice."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _DebugJob(Protocol):
    """A debug job's handle (`kinetic.api.handle.JobHandle`, above this module)."""

    job_id: str
    namespace: str
    context: str | None

    def debug_attach(
        self,
        local_port: int = ...,
        working_dir: str | None = ...,
        *,
        timeout: float | None = ...,
        on_connection: Callable[[], None] | None = ...,
    ) -> subprocess.Popen[str]: ...

    def status(self) -> JobStatus: ...

    def result(self, timeout: float | None = ...) -> Any: ...


def debug_result(handle: _DebugJob, timeout: float | None, local_port: int | None) -> Any:
    """A blocking call of a debug function (`JobHandle.debug_result`): attach, then wait.

    What it says and when is `JobHandle.debug_result`'s docstring; this is the
    sequence, kept beside the forward it starts and ends.
    """
    command = debug_command(handle)
    print(
        f"Job {handle.job_id} runs with debug=True: its Pod waits for a debugger before the "
        f"call runs. A local port is forwarded to it here once the Pod is ready; from "
        f"another shell: {command}",
        flush=True,
    )
    port = local_port or free_local_port(DEBUG_PORT)
    forward = None
    try:
        forward = handle.debug_attach(
            port, timeout=timeout, on_connection=lambda: _say_connected(handle, port)
        )
    except DebugAttachError as e:
        if handle.status().terminal:
            return handle.result(timeout=timeout)  # it ended: its value, or why not
        print(f"No local forward ({e}); attach with: {command}", flush=True)
    try:
        return handle.result(timeout=timeout)
    finally:
        if forward is not None:
            cleanup_port_forward(forward)


def debug_command(handle: _DebugJob) -> str:
    """The shell command that attaches a debugger to ``handle``'s job."""
    context = f" --context {handle.context}" if handle.context else ""
    return f"kinetic jobs debug {handle.job_id} -n {handle.namespace}{context}"


def _say_connected(handle: _DebugJob, port: int) -> None:
    print(
        f"A debugger connected to job {handle.job_id} (localhost:{port}); the call runs now.",
        flush=True,
    )
