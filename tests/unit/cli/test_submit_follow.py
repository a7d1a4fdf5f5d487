"""`kinetic batches submit --wait` follows each object on a watch; a watch the API server
breaks off is a fault the local cluster does not produce on demand, so a stand-in client
injects it here (the rest of `--wait` runs against the real cluster in
tests/integration/test_submit.py)."""

from __future__ import annotations

from collections.abc import Iterator
from queue import Queue
from typing import Any

import pytest
from kinetic.cli import submit
from kinetic.cli.submit_file import Document

DOC = Document(1, "KineticBatch", "sweep", "ns", {})


class BrokenOnce:
    """Each new client's watch: the first breaks off after one status (as a dropped
    connection does); the next, started from a fresh read, sees the batch end."""

    made = 0

    def __init__(self, context: str | None = None) -> None:
        BrokenOnce.made += 1
        self.first = BrokenOnce.made == 1

    def watch_one(self, *args: Any) -> Iterator[dict[str, Any] | None]:
        if self.first:
            yield {"status": {"phase": "RUNNING"}}
            raise ConnectionResetError("connection reset by peer")
        yield {"status": {"phase": "SUCCEEDED"}}


def test_a_watch_broken_off_is_started_again_and_sees_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(submit, "KubeClient", BrokenOnce)
    monkeypatch.setattr(submit.time, "sleep", lambda seconds: None)
    out: Queue = Queue()
    submit._follow(DOC, 0, None, None, out)
    seen = [out.get_nowait() for _ in range(out.qsize())]
    assert seen == [(0, {"phase": "RUNNING"}), (0, {"phase": "SUCCEEDED"})]
