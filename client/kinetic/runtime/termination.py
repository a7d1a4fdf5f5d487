"""The Pod's termination message: where it goes and how it is written.

The kubelet reads one file when a container ends and shows its text as the
container's termination message; the operator reads the outcome from it.
Both of the runtime's entrypoints write it — the runner
(`kinetic.runtime.runner`) and the data init container
(`kinetic.runtime.datafetch`) — so the file's path and its size limit have
one owner here, which imports nothing of either.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = [
    "DEFAULT_TERMINATION_LOG",
    "MAX_TERMINATION_MESSAGE",
    "termination_log_path",
    "write_termination_log",
]

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
MAX_TERMINATION_MESSAGE = 4096
"""The kubelet keeps at most this many bytes of the message."""


def termination_log_path(environ: Mapping[str, str]) -> str | None:
    """The explicit path, else the kubelet's file if it exists and is writable.

    The default is never created: outside a Pod (a test, a debug run on a
    laptop) /dev/termination-log is not ours to make.
    """
    explicit = environ.get("KINETIC_TERMINATION_LOG", "").strip()
    if explicit:
        return explicit
    if os.path.isfile(DEFAULT_TERMINATION_LOG) and os.access(DEFAULT_TERMINATION_LOG, os.W_OK):
        return DEFAULT_TERMINATION_LOG
    return None


def write_termination_log(path: str | None, summary: str) -> None:
    """A one-line summary, at most 4096 bytes, for the pod's termination message."""
    if not path:
        return
    line = " ".join(summary.split())
    encoded = line.encode("utf-8")[:MAX_TERMINATION_MESSAGE]
    try:
        with open(path, "wb") as f:
            f.write(encoded.decode("utf-8", "ignore").encode("utf-8"))
    except OSError as e:
        # The runner's progress-line prefix, whichever entrypoint wrote: it always read so.
        print(f"kinetic runner: could not write the termination log {path}: {e}", flush=True)
