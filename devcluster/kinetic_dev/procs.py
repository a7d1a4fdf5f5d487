"""Start, identify and stop the cluster's background processes by pid file.

A pid file holds ``<pid> <start-time>`` where start-time is field 22 of
``/proc/<pid>/stat``; `down` only signals a pid whose start time still
matches, so a recycled pid belonging to someone else is never killed.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


class ClusterError(RuntimeError):
    """A failure with a message meant for the person running `kinetic local`."""


def proc_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces/parens: split after the last ')'.
    rest = stat.rsplit(")", 1)[1].split()
    if rest and rest[0] == "Z":
        return None  # a zombie is as good as gone
    return rest[19] if len(rest) > 19 else None


def write_pidfile(path: Path, pid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{pid} {proc_start_time(pid) or ''}\n")


def read_live_pid(path: Path) -> int | None:
    """The pid recorded in ``path`` if that very process is still alive."""
    try:
        parts = path.read_text().split()
        pid = int(parts[0])
    except (OSError, ValueError, IndexError):
        return None
    started = proc_start_time(pid)
    if started is None:
        return None
    if len(parts) > 1 and parts[1] != started:
        return None
    return pid


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE or e.errno == errno.EACCES
    return False


def port_owner(port: int) -> str:
    """Best-effort description of who listens on ``port`` (via ss), for error messages."""
    try:
        out = subprocess.run(
            ["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.splitlines()[0] if out else ""


def spawn(
    argv: Sequence[str],
    log_file: Path,
    pid_file: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
) -> int:
    """Start a detached process (own session, so it survives us and is killed as a group)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        log.write(
            f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode()
        )
        log.flush()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
            close_fds=True,
        )
    write_pidfile(pid_file, proc.pid)
    return proc.pid


def stop_pid(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the process group (falling back to the pid), SIGKILL after ``grace``."""
    start = proc_start_time(pid)
    if start is None:
        return

    def alive() -> bool:
        return proc_start_time(pid) == start

    def send(sig: int) -> None:
        try:
            os.killpg(pid, sig)
        except OSError:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive():
            return
        time.sleep(0.1)
    send(signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.05)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    except OSError:
        pass


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        data = path.read_bytes()[-8192:].decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in data.splitlines()[-lines:])


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    log_file: Path | None = None,
    pid: int | None = None,
    interval: float = 0.2,
) -> None:
    """Poll ``check`` until true; fail naming the component and its log on timeout or death."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - the check itself failing means "not yet"
            pass
        if pid is not None and proc_start_time(pid) is None:
            _reap(pid)
            tail = log_tail(log_file) if log_file else ""
            raise ClusterError(f"{what} exited during start-up; see {log_file}\n{tail}")
        if time.monotonic() > deadline:
            raise ClusterError(
                f"timed out after {timeout:.0f}s waiting for {what}; see {log_file}\n"
                f"{log_tail(log_file) if log_file else ''}"
            )
        time.sleep(interval)
