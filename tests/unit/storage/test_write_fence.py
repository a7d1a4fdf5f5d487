"""`storage.fence_writes`: the operator's leader check before every storage write.

On file:// storage (the same public functions the operator calls for gs://): a fence
that refuses stops the write and the delete before anything changes; reads never
ask it; removing it lets writes through again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kinetic import storage


class Replaced(RuntimeError):
    """What a fence raises for a replica that may have been replaced."""


@pytest.fixture
def fence() -> Iterator[list[str]]:
    """A fence that counts its calls and refuses once told to; removed afterwards."""
    calls: list[str] = []

    def check() -> None:
        calls.append("check")
        if "refuse" in calls:
            raise Replaced("no renewal within the renew deadline before a write")

    storage.fence_writes(check)
    yield calls
    storage.fence_writes(None)


def test_a_refusing_fence_stops_writes_and_deletes_before_anything_changes(
    tmp_path: Path, fence: list[str]
) -> None:
    uri = f"file://{tmp_path}/batches/b/manifest/header-0.json"
    storage.write_bytes(uri, b"v1")  # leading: the fence lets it through
    assert fence == ["check"]
    fence.append("refuse")  # the renew deadline passed
    with pytest.raises(Replaced):
        storage.write_bytes(uri, b"v2 from a replica that was replaced")
    with pytest.raises(Replaced):
        storage.write_if_generation(f"file://{tmp_path}/new", b"x", 0)
    with pytest.raises(Replaced):
        storage.delete(uri)
    assert storage.read_bytes(uri) == b"v1"  # reads never ask the fence
    assert storage.list_prefix(f"file://{tmp_path}/") == [uri]


def test_without_a_fence_writes_go_through(tmp_path: Path) -> None:
    storage.fence_writes(lambda: (_ for _ in ()).throw(Replaced("refused")))
    storage.fence_writes(None)
    uri = f"file://{tmp_path}/x"
    storage.write_bytes(uri, b"ok")
    assert storage.delete(uri) is True
