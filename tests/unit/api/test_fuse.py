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
from kinetic.api import fuse
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


# --------------------------------------------------------------------------- whole submissions


@pytest.fixture
def refusing_cluster(monkeypatch, tmp_path: Path) -> str:
    """A file:// root, a cluster without the driver, and no resource may be created.

    (The CSIDriver read itself, present, absent and unreadable, is tested on the
    local cluster: tests/integration/test_data_fuse.py.)"""
    from kinetic.api import batches, remote
    from kinetic.api.config import ClientConfig

    root = f"file://{tmp_path / 'store'}"
    monkeypatch.setattr(
        remote, "resolve", lambda **_: ClientConfig(namespace=NS, storage_root=root)
    )
    monkeypatch.setattr(fuse, "driver_present", lambda context: False)

    def no_create(*_: Any, **__: Any) -> None:
        raise AssertionError("nothing may be created")

    monkeypatch.setattr(remote, "submit_job", no_create)
    monkeypatch.setattr(batches, "create_batch", no_create)
    # No kubeconfig: any other way to the API server fails loudly (ClusterUnreachable).
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    return root


def test_run_async_and_run_async_map_refuse_before_uploading_anything(
    refusing_cluster: str, local: Data
) -> None:
    import kinetic

    plain_local = Data(local.path)  # would be uploaded first, were it not refused

    @kinetic.run()
    def count(path: str, other: str) -> int:
        return len(path + other)

    with pytest.raises(FuseUnavailable) as refused:
        count.run_async(plain_local, other=FUSED)
    assert str(refused.value).startswith(f"argument 'other' {FUSED!r} asks for a GCS FUSE mount")
    mounted = count.with_options(volumes={"/data": FUSED})
    with pytest.raises(FuseUnavailable, match=r"^volumes\['/data'\]"):
        mounted.run_async(plain_local, "x")
    with pytest.raises(FuseUnavailable, match=r"^volumes\['/data'\]"):  # every input's
        mounted.run_async_map([{"path": plain_local}], input_mode="kwargs")
    assert objects(refusing_cluster) == []


class Created(Exception):
    """Raised by the stand-in for `create_batch` with the spec it was given."""


def test_a_fuse_input_the_cluster_cannot_mount_fails_its_own_slot(
    refusing_cluster: str, local: Data, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the reference records a packaging error: the input alone, the others submitted."""
    import kinetic
    from kinetic.api import batches

    def create_batch(_cfg: Any, _group: str, spec: Any) -> None:
        raise Created(spec)

    monkeypatch.setattr(batches, "create_batch", create_batch)

    @kinetic.run()
    def count(path: str = "", other: str = "") -> int:
        return len(path + other)

    with pytest.raises(Created) as created:
        count.run_async_map([{"path": Data(local.path)}, {"other": FUSED}], input_mode="kwargs")
    spec = created.value.args[0]
    [failure] = spec.submission_failures
    assert failure.index == 1 and failure.error_type == "kinetic.api.fuse.FuseUnavailable"
    assert failure.message.startswith("kinetic.api.fuse.FuseUnavailable: input 1['other']")
    assert spec.inputs.count == 2
    # Input 0's local data was staged (uploaded), and so was its pickled value; input 1's not.
    uploaded = objects(refusing_cluster)
    assert any("/data/" in uri for uri in uploaded)
    assert [u for u in uploaded if u.endswith("/inputs/0.pkl")] and not [
        u for u in uploaded if u.endswith("/inputs/1.pkl")
    ]
