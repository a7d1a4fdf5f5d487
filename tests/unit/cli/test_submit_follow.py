"""`kinetic batches submit --wait` follows each object on a watch (`KubeClient.watch_one`,
which starts a broken-off watch again by itself: tests/unit/api/test_kube_client.py and, on
the real API server, tests/integration/test_client_jobs.py). A watch that fails for good
is a fault the local cluster does not produce on demand, so a stand-in client injects it
here (the rest of `--wait` runs against the real cluster in tests/integration/test_submit.py)."""

from __future__ import annotations

from collections.abc import Iterator
from queue import Queue
from typing import Any

import pytest
from kinetic.cli import submit
from kinetic.cli.submit_file import Document

DOC = Document(1, "KineticBatch", "sweep", "ns", {})


class FailsForGood:
    """A watch that shows the batch running, then fails past its retry bound."""

    def __init__(self, context: str | None = None) -> None:
        self.context = context

    def watch_one(self, *args: Any) -> Iterator[dict[str, Any] | None]:
        yield {"status": {"phase": "RUNNING"}}
        raise ConnectionRefusedError("connection refused")


def test_a_watch_failing_for_good_ends_the_wait_as_unseen_never_silently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(submit, "KubeClient", FailsForGood)
    out: Queue = Queue()
    submit._follow(DOC, 0, None, None, out)
    seen = [out.get_nowait() for _ in range(out.qsize())]
    # None: the waiter stops waiting for it and reports its row as UNKNOWN (exit 1).
    assert seen == [(0, {"phase": "RUNNING"}), (0, None)]
    assert not submit._ended({"phase": "RUNNING"}) and submit._ended(None)
