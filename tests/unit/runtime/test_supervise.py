"""The runner's first process, on this machine: it runs the work in a child, passes its
output through, archives the end of it, and tells how the child ended.

Each case runs `supervise` as the main process of a fresh interpreter, as the
Pod does: it installs a SIGTERM handler and forks, which must not happen
inside the test runner itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kinetic.model.logs import CUT_NOTE

LIMIT = 64 * 1024


def run_supervised(
    tmp_path: Path, body: str, *, wait: bool = True, returns: int | None = None
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """Start an interpreter whose main process supervises ``body`` (the child's work);
    returns the process, the archive and the termination log paths. With ``returns``, the
    work then ends as the runner's does: it leaves a termination message and returns that
    exit code."""
    archive, termination = tmp_path / "archive.log", tmp_path / "termination-log"
    lines = textwrap.dedent(body).strip("\n")
    if returns is not None:
        lines += f'\nopen(os.environ["T"], "w").write("ok")\nreturn {returns}'
    work = textwrap.indent(lines, "    ")
    script = (
        "import os, signal, subprocess, sys, time\n"
        "from kinetic.runtime.supervise import supervise\n"
        f"def work():\n{work}\n"
        f"sys.exit(supervise(work, log_uri={archive.as_uri()!r}, limit={LIMIT}, "
        f"termination_log={str(termination)!r}))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "T": str(termination)},
    )
    if wait:
        proc.out = proc.communicate(timeout=120)[0]  # type: ignore[attr-defined]
    return proc, archive, termination


def test_output_passes_through_and_a_short_log_is_archived_whole(tmp_path: Path) -> None:
    proc, archive, termination = run_supervised(
        tmp_path,
        """
        print("hello from the function", flush=True)
        print("and from stderr", file=sys.stderr, flush=True)
        """,
        returns=0,
    )
    out = proc.out.decode()  # type: ignore[attr-defined]
    assert proc.returncode == 0
    assert "hello from the function" in out and "and from stderr" in out
    assert archive.read_text() == out
    assert termination.read_text() == "ok"


def test_a_long_log_keeps_its_end_after_a_note_that_it_was_cut(tmp_path: Path) -> None:
    proc, archive, _ = run_supervised(
        tmp_path,
        """
        line = "y" * 1023 + "\\n"
        for _ in range(4096):  # 4 MiB, sixty-four times the archive's bound
            sys.stdout.write(line)
        sys.stdout.write("the very last line\\n")
        sys.stdout.flush()
        """,
        returns=0,
    )
    assert proc.returncode == 0
    kept = archive.read_bytes()
    assert kept.startswith(CUT_NOTE.format(limit=LIMIT).encode())
    assert kept.endswith(b"the very last line\n") and len(kept) <= LIMIT
    assert len(proc.out) > 4 << 20  # type: ignore[attr-defined]  # all of it passed through


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", 137, "killed by SIGKILL (signal 9)"),
        ("os.kill(os.getpid(), signal.SIGSEGV)", 139, "killed by SIGSEGV (signal 11)"),
        ("os._exit(3)", 3, "exited with code 3 before the runner recorded an outcome"),
        # a success with nothing recorded is no success
        ("os._exit(0)", 2, "exited with code 0 before the runner recorded an outcome"),
    ],
)
def test_a_child_that_dies_is_told_in_the_termination_message(
    tmp_path: Path, body: str, code: int, says: str
) -> None:
    proc, archive, termination = run_supervised(tmp_path, f'print("working", flush=True)\n{body}')
    assert proc.returncode == code
    message = termination.read_text()
    assert message.startswith("runner: the function's process") and says in message
    assert says in archive.read_text() and "working" in archive.read_text()


def test_a_termination_message_the_child_wrote_is_kept(tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    proc, _, _ = run_supervised(
        tmp_path,
        f"""
        with open({str(termination)!r}, "w") as f:
            f.write("ok sha256=" + "a" * 64)
        return 1
        """,
    )
    assert proc.returncode == 1
    assert termination.read_text() == "ok sha256=" + "a" * 64


def test_sigterm_reaches_the_childs_own_handler(tmp_path: Path) -> None:
    """Process 1 gets SIGTERM when the Pod is deleted; the user's code may checkpoint."""
    proc, archive, _ = run_supervised(
        tmp_path,
        """
        def saved(signum, frame):
            print("checkpoint saved on SIGTERM", flush=True)
            open(os.environ["T"], "w").write("stopped after a checkpoint")
            sys.exit(0)
        signal.signal(signal.SIGTERM, saved)
        print("ready", flush=True)
        time.sleep(60)
        return 1
        """,
        wait=False,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert "checkpoint saved on SIGTERM" in archive.read_text()


def test_a_process_left_holding_the_output_does_not_hold_the_runner(tmp_path: Path) -> None:
    """The child starts a process that keeps its stdout open and outlives it: the runner
    still ends once the child has, with that process still running."""
    pid_file = tmp_path / "left.pid"
    proc, _, _ = run_supervised(
        tmp_path,
        f"""
        left = subprocess.Popen(["sleep", "300"])
        open({str(pid_file)!r}, "w").write(str(left.pid))
        """,
        returns=0,
    )
    left = int(pid_file.read_text())
    try:
        assert proc.returncode == 0
        os.kill(left, 0)  # still alive: the runner did not wait for it
    finally:
        os.kill(left, signal.SIGKILL)
