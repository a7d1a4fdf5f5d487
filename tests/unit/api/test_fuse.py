"""kinetic.Data(fuse=True) at submission: refused before any upload, or turned into mounts.

`kinetic.api.fuse.refusal` is pure and table-tested; `Stager` is tested with
the real file:// storage backend in a temporary folder and a stand-in for
the one cluster read (the CSIDriver, whose read is tested on the local
cluster), so "nothing was uploaded" is checked on real storage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kinetic import storage
from kinetic.api.data import Data, call_data, inputs_data
from kinetic.api.fuse import FuseUnavailable, refusal
from kinetic.api.staging import Stager
from kinetic.model import layout, limits
from kinetic.model.data import (
    FUSE_ARGUMENTS_ROOT,
    GCSFUSE_DRIVER,
    DataRef,
)
from kinetic.model.resources import DataVolume

NS = "team-a"
GS_ROOT = "gs://kinetic"
FUSED = Data("gs://kinetic/datasets/imagenet/", fuse=True)
PLAIN = Data("gs://kinetic/datasets/small/")


@pytest.fixture
def local(tmp_path: Path) -> Data:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "a.txt").write_bytes(b"alpha")
    return Data(str(tmp_path / "ds"), fuse=True)


# --------------------------------------------------------------------------- the decision


@pytest.mark.parametrize("driver", [True, False, None])
def test_no_fuse_data_is_never_refused(driver: bool | None) -> None:
    assert refusal({"/d": PLAIN}, [("argument 0", PLAIN)], GS_ROOT, driver) is None


def test_with_the_driver_fuse_data_is_mounted() -> None:
    assert refusal({"/d": FUSED}, [("argument 'ds'", FUSED)], GS_ROOT, True) is None


def test_without_the_driver_every_fuse_data_is_named_with_the_driver_and_the_fix() -> None:
    text = refusal({"/d": FUSED}, [("argument 'ds'", FUSED), ("argument 1", PLAIN)], GS_ROOT, False)
    assert text is not None
    assert text.startswith(
        "volumes['/d'] Data('gs://kinetic/datasets/imagenet/', fuse=True), argument 'ds' "
        "Data('gs://kinetic/datasets/imagenet/', fuse=True) asks for a GCS FUSE mount"
    )
    assert GCSFUSE_DRIVER in text and "drop fuse=True" in text
    assert "argument 1" not in text  # downloaded data is fine anywhere


def test_a_user_who_cannot_read_csidrivers_leaves_it_to_the_operator() -> None:
    assert refusal({}, [("argument 0", FUSED)], GS_ROOT, None) is None


@pytest.mark.parametrize("driver", [True, False, None])
def test_local_fuse_data_needs_a_gcs_storage_root(local: Data, driver: bool | None) -> None:
    text = refusal({}, [("argument 0", local)], "file:///shared/kinetic", driver)
    assert text is not None and text.startswith(f"argument 0 {local!r}: local data is uploaded")
    assert "file:///shared/kinetic, which is not Cloud Storage" in text
    assert text.endswith("drop fuse=True to have it downloaded into the pod")
    # Uploaded to a gs:// root, it is Cloud Storage data like any other.
    assert refusal({}, [("argument 0", local)], GS_ROOT, True) is None


def test_fuse_arguments_must_fit_beside_the_volumes() -> None:
    many = [(f"input {i}", Data(f"gs://kinetic/shard-{i}/", fuse=True)) for i in range(16)]
    text = refusal({"/d": PLAIN}, many, GS_ROOT, True)
    assert text is not None and f"at most {limits.MAX_VOLUMES} allowed" in text
    same = [(f"input {i}", FUSED) for i in range(100)]  # one Data: one mount
    assert refusal({"/d": PLAIN}, same, GS_ROOT, True) is None
    text = refusal({"/mnt": PLAIN}, [("argument 0", FUSED)], GS_ROOT, True)
    assert text is not None and f"{FUSE_ARGUMENTS_ROOT} is where fuse=True arguments" in text


# --------------------------------------------------------------------------- staging


def objects(root: str) -> list[str]:
    return storage.list_prefix(layout.namespace_prefix(root, NS))


def driver(answer: bool | None) -> Any:
    asked: list[str | None] = []

    def read(context: str | None) -> bool | None:
        asked.append(context)
        return answer

    read.asked = asked  # type: ignore[attr-defined]
    return read


def test_the_cluster_is_asked_only_when_some_data_has_fuse(tmp_path: Path) -> None:
    read = driver(False)
    Stager(f"file://{tmp_path}", NS, "ctx", read).check({"/d": PLAIN}, [("argument 0", PLAIN)])
    assert read.asked == []
    with pytest.raises(FuseUnavailable):
        Stager(f"file://{tmp_path}", NS, "ctx", read).check({}, [("argument 0", FUSED)])
    assert read.asked == ["ctx"]


def test_a_refused_submission_uploads_nothing(tmp_path: Path, local: Data) -> None:
    root = f"file://{tmp_path / 'store'}"
    plain_local = Data(str(Path(local.path)))
    stager = Stager(root, NS, None, driver(False))
    args = (plain_local, FUSED)
    with pytest.raises(FuseUnavailable, match=r"argument 1 Data\('gs://kinetic/datasets/"):
        stager.check({}, call_data(args, {}))
    assert objects(root) == []  # the local argument before it was not uploaded either


def test_fuse_arguments_become_mounts_and_the_function_gets_their_paths(tmp_path: Path) -> None:
    stager = Stager(f"file://{tmp_path}", NS, None, driver(True))
    obj = Data("gs://kinetic/weights/model.h5", fuse=True)
    args = (FUSED, [obj, FUSED], PLAIN)
    stager.check({"/data": PLAIN}, call_data(args, {}))
    staged, _ = stager.call(args, {})
    assert staged[0] == f"{FUSE_ARGUMENTS_ROOT}/0"  # a prefix: the mount itself
    assert staged[1] == [f"{FUSE_ARGUMENTS_ROOT}/1/model.h5", f"{FUSE_ARGUMENTS_ROOT}/0"]
    assert isinstance(staged[2], DataRef) and not staged[2].fuse  # downloaded as before
    volumes = stager.volumes({"/data": PLAIN})
    assert volumes == [
        DataVolume(mount_path="/data", uri=PLAIN.path),
        DataVolume(mount_path=f"{FUSE_ARGUMENTS_ROOT}/0", uri=FUSED.path, fuse=True),
        DataVolume(mount_path=f"{FUSE_ARGUMENTS_ROOT}/1", uri=obj.path, fuse=True),
    ]


def test_a_batch_mounts_each_distinct_fuse_input_once(tmp_path: Path) -> None:
    stager = Stager(f"file://{tmp_path}", NS, None, driver(True))
    items = [{"ds": FUSED, "lr": lr} for lr in (0.1, 0.01, 0.001)]
    stager.check({}, inputs_data(items))
    staged = [stager.value(item) for item in items]
    assert {item["ds"] for item in staged} == {f"{FUSE_ARGUMENTS_ROOT}/0"}
    assert stager.volumes({}) == [
        DataVolume(mount_path=f"{FUSE_ARGUMENTS_ROOT}/0", uri=FUSED.path, fuse=True)
    ]


def test_uploaded_local_fuse_data_is_mounted_from_the_cache(tmp_path: Path) -> None:
    # The upload cache on a file:// root stands in for a gs:// one (check() refuses file://).
    root = f"file://{tmp_path / 'store'}"
    (tmp_path / "config.json").write_bytes(b"{}")
    one_file = Data(str(tmp_path / "config.json"), fuse=True)
    stager = Stager(root, NS, None, driver(True))
    assert stager.argument(one_file) == f"{FUSE_ARGUMENTS_ROOT}/0/config.json"
    (volume,) = stager.volumes({}) or []
    h = one_file.content_hash()
    assert volume.uri == layout.data_cache_prefix(root, NS, h) and volume.fuse
    assert volume.file_name == "config.json"
    assert volume.manifest_uri == layout.data_manifest_uri(root, NS, h)
