"""Per-slot submission errors (issue 32, item 6): an input-specific failure is that input's.

As the reference records a packaging or validation problem of one input in
its slot, `run_async_map` records every failure that is one input's (its
type for the input mode, its pickling, its `Data`) in the batch's
``submissionFailures`` and submits the rest. Storage is the real file://
backend in a temporary folder; the batch is not created (a stand-in for
`create_batch` stops with the spec it was given). A fuse input the cluster
cannot mount is in test_fuse.py; the same failures on a real cluster, read
back by another process, in tests/integration/test_reference_api.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kinetic
import pytest
from kinetic import storage
from kinetic.api import batches, remote
from kinetic.api.config import ClientConfig
from kinetic.model import layout
from kinetic.model.data import DataError

NS = "team-a"


class Created(Exception):
    """Raised by the stand-in for `create_batch` with the spec it was given."""


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    root = f"file://{tmp_path / 'store'}"
    monkeypatch.setattr(
        remote, "resolve", lambda **_: ClientConfig(namespace=NS, storage_root=root)
    )

    def create_batch(_cfg: Any, _group: str, spec: Any) -> None:
        raise Created(spec)

    monkeypatch.setattr(batches, "create_batch", create_batch)
    return root


def submitted(fn: Any, items: list[Any], **options: Any) -> Any:
    with pytest.raises(Created) as created:
        fn.run_async_map(items, **options)
    return created.value.args[0]


@kinetic.run()
def size(data: str = "", n: int = 0) -> int:
    return len(data) + n


def test_a_local_file_gone_since_data_checked_it_fails_its_input_alone(
    root: str, tmp_path: Path
) -> None:
    kept, gone = tmp_path / "kept.txt", tmp_path / "gone.txt"
    kept.write_text("alpha")
    gone.write_text("beta")
    items = [{"data": kinetic.Data(str(kept))}, {"data": kinetic.Data(str(gone))}, {"n": 3}]
    gone.unlink()  # after Data() checked that it exists
    spec = submitted(size, items, input_mode="kwargs")
    [failure] = spec.submission_failures
    assert (failure.index, failure.error_type) == (1, "kinetic.model.data.DataError")
    assert "gone.txt" in failure.message
    uploads = storage.list_prefix(layout.namespace_prefix(root, NS))
    assert [u for u in uploads if u.endswith("/inputs/0.pkl")]
    assert [u for u in uploads if u.endswith("/inputs/2.pkl")]
    assert not [u for u in uploads if u.endswith("/inputs/1.pkl")]


def test_every_kind_of_input_failure_keeps_its_own_slot(root: str, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    data = kinetic.Data(str(gone))
    gone.rmdir()
    items = [{"n": 1}, [2], {"n": threading.Lock()}, {"data": data}, {"n": 5}]
    spec = submitted(size, items, input_mode="kwargs")
    failed = {f.index: f.error_type for f in spec.submission_failures}
    # a wrong-typed item, an unpicklable value, data gone: each its own
    assert failed == {1: "TypeError", 2: "TypeError", 3: "kinetic.model.data.DataError"}
    assert spec.inputs.count == 5


def test_a_problem_of_the_whole_call_still_raises_from_it(root: str, tmp_path: Path) -> None:
    """volumes= concern every input: their data gone is the call's error, nothing created."""
    folder = tmp_path / "shared"
    folder.mkdir()
    mounted = size.with_options(volumes={"/data": kinetic.Data(str(folder))})
    folder.rmdir()
    with pytest.raises(DataError) as raised:
        mounted.run_async_map([{"n": 1}], input_mode="kwargs")
    assert "shared" in str(raised.value)
