"""kinetic.Data: parsing, the content hash, volumes= checks, the upload cache and the pod side.

Storage here is the real file:// backend in a temporary folder (what the
local cluster's shared volume uses); nothing is mocked.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from kinetic import storage
from kinetic.api.data import Data, check_volumes
from kinetic.api.staging import Stager, stage
from kinetic.model import layout, limits
from kinetic.model.data import (
    DataError,
    DataRef,
    substitute,
    volume_problems,
)
from kinetic.model.resources import DataVolume
from kinetic.runtime import datafetch

NS = "team-a"


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
    return root


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("path", "is_gcs", "is_hf", "is_dir"),
    [
        ("gs://bucket/datasets/imagenet/", True, False, True),
        ("gs://bucket/datasets/weights.h5", True, False, False),
        ("hf://imdb?split=train", False, True, True),
    ],
)
def test_remote_paths(path, is_gcs, is_hf, is_dir):
    d = Data(path)
    assert (d.path, d.is_gcs, d.is_hf, d.is_dir) == (path, is_gcs, is_hf, is_dir)
    assert not d.fuse and not d.hf_trust_remote_code


def test_local_paths_are_absolute_and_typed(tmp_path, monkeypatch):
    make_tree(tmp_path, {"ds/a.txt": b"a", "config.json": b"{}"})
    monkeypatch.chdir(tmp_path)
    assert Data("./ds/").path == str(tmp_path / "ds") and Data("./ds/").is_dir
    f = Data("config.json", fuse=True)
    assert f.path == str(tmp_path / "config.json") and not f.is_dir and f.fuse


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("", "expected a local path"),
        ("gs://", "needs a bucket"),
        ("hf://", "name the dataset"),
        ("s3://bucket/x", "s3:// is not supported"),
        ("/no/such/dir/anywhere", "no such file or directory"),
    ],
)
def test_bad_paths_are_refused_with_the_reason(path, words):
    with pytest.raises(DataError, match=words):
        Data(path)


# --------------------------------------------------------------------------- content hash


def test_content_hash_follows_the_documented_recipe(tmp_path):
    make_tree(tmp_path / "d", {"b.txt": b"bee", "a/x.bin": b"\x00\x01"})
    expected = hashlib.sha256(b"dir:")
    # Sorted depth-first walk: a folder's own files (sorted), then its subfolders (sorted).
    for rel, content in (("b.txt", b"bee"), ("a/x.bin", b"\x00\x01")):
        expected.update(hashlib.sha256(rel.encode() + b"\0" + content).digest())
    assert Data(str(tmp_path / "d")).content_hash() == expected.hexdigest()


def test_content_hash_changes_with_bytes_and_names_but_not_with_location(tmp_path):
    one = make_tree(tmp_path / "one", {"x.txt": b"1"})
    two = make_tree(tmp_path / "two", {"x.txt": b"1"})
    assert Data(str(one)).content_hash() == Data(str(two)).content_hash()
    (two / "x.txt").write_bytes(b"2")
    assert Data(str(one)).content_hash() != Data(str(two)).content_hash()
    three = make_tree(tmp_path / "three", {"y.txt": b"1"})
    assert Data(str(one)).content_hash() != Data(str(three)).content_hash()


def test_a_file_and_a_folder_holding_only_it_differ(tmp_path):
    make_tree(tmp_path / "d", {"x.txt": b"same"})
    folder, file = Data(str(tmp_path / "d")), Data(str(tmp_path / "d/x.txt"))
    assert folder.content_hash() != file.content_hash()


def test_symlinked_files_hash_their_target_and_linked_folders_are_not_entered(tmp_path):
    real = make_tree(tmp_path / "real", {"x.txt": b"payload"})
    make_tree(tmp_path / "elsewhere", {"data.txt": b"payload"})
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "x.txt").symlink_to(tmp_path / "elsewhere/data.txt")
    (linked / "loop").symlink_to(linked, target_is_directory=True)  # a cycle: never walked
    assert Data(str(linked)).content_hash() == Data(str(real)).content_hash()


def test_remote_data_has_no_content_hash():
    with pytest.raises(DataError, match="only local data"):
        Data("gs://b/x/").content_hash()


# --------------------------------------------------------------------------- volumes=


@pytest.mark.parametrize(
    ("volumes", "words"),
    [
        ({"data": Data("gs://b/x/")}, "'data' is relative; use an absolute path such as '/data'"),
        ({"/data": "gs://b/x/"}, "expected a kinetic.Data, got str; wrap it"),
        ({"/": Data("gs://b/x/")}, "would hide the whole image"),
        ({"/proc/x": Data("gs://b/x/")}, "container runtime owns"),
        ({"/a/../b": Data("gs://b/x/")}, "may not contain '..'"),
        ({"/d": Data("gs://b/x/"), "/d/e": Data("gs://b/y/")}, "'/d/e' lies inside '/d'"),
        (["/data"], "must be a dict"),
    ],
)
def test_volume_mistakes_are_refused_with_the_fix(volumes, words):
    with pytest.raises(DataError, match=words.replace("(", r"\(").replace(".", r"\.")):
        check_volumes(volumes)


def test_run_refuses_bad_volumes_when_decorating_before_any_upload(tmp_path):
    import kinetic

    with pytest.raises(DataError, match="relative"):
        kinetic.run(volumes={"data/": kinetic.Data(str(tmp_path))})
    with pytest.raises(DataError, match="expected a kinetic.Data, got str"):
        kinetic.run(volumes={"/data": str(tmp_path)})


def test_raw_specs_get_the_same_mount_path_rules():
    bad = {"container": {"command": ["x"]}, "volumes": [{"mountPath": "data", "uri": "gs://b/"}]}
    assert limits.check_job_spec(bad) == [
        "spec.volumes[0].mountPath: mount path 'data' is relative; use an absolute path such as "
        "'/data'"
    ]
    nested = {"template": {"volumes": [{"mountPath": "/a"}, {"mountPath": "/a/b"}]}}
    assert limits.check_batch_spec(nested, storage_root=None) == [
        "spec.template.volumes: mount path '/a/b' lies inside '/a'; give each volume its own folder"
    ]


@pytest.mark.parametrize(
    "mount, expected",
    [
        ("/proc/self", "spec.jobs[1].volumes[0].mountPath: mount path '/proc/self' is under /proc"),
        ("/", "spec.jobs[1].volumes[0].mountPath: mount path '/' would hide the whole image"),
        ("../etc", "spec.jobs[1].volumes[0].mountPath: mount path '../etc' is relative"),
    ],
)
def test_each_job_of_a_mixed_batch_gets_the_mount_path_rules(mount: str, expected: str) -> None:
    job = {"container": {"command": ["x"]}}
    bad = {**job, "volumes": [{"mountPath": mount, "uri": "gs://b/x/"}]}
    problems = limits.check_batch_spec({"jobs": [job, bad]}, storage_root=None)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_volume_uris_under_the_root_must_be_the_namespaces_own():
    root = "gs://kinetic/root"
    mine = f"{layout.namespace_prefix(root, NS)}data/{'a' * 64}/"
    theirs = f"{layout.namespace_prefix(root, 'team-b')}uploads/x-0123456789abcdef/"
    vols = [
        DataVolume(mount_path="/ok", uri=mine),
        DataVolume(mount_path="/other-bucket", uri="gs://public-datasets/imagenet/"),
        DataVolume(mount_path="/hf", uri="hf://imdb"),
        DataVolume(mount_path="/theirs", uri=theirs),
        DataVolume(mount_path="/disk", uri="file:///etc/"),
    ]
    problems = volume_problems(root, NS, vols, "spec")
    assert len(problems) == 2
    assert problems[0].startswith(f"spec.volumes[3].uri: {theirs} is outside this namespace")
    assert problems[1].startswith("spec.volumes[4].uri: file:///etc/ is outside")


# --------------------------------------------------------------------------- arguments


def test_substitute_replaces_data_in_plain_containers_only():
    d = Data("gs://b/x/")
    value = ([d, 1], {"k": (d,)}, "s")
    out = substitute(value, lambda _: "/local", Data)
    assert out == (["/local", 1], {"k": ("/local",)}, "s")
    untouched = ([1], {"k": 2})
    assert substitute(untouched, lambda _: "/local", Data) is untouched


# --------------------------------------------------------------------------- cache and pod side


def cache_objects(root: str) -> dict[str, int | None]:
    """The namespace's data cache: each object and its generation (a rewrite changes it)."""
    return {
        u: storage.stat(u) for u in storage.list_prefix(f"{layout.namespace_prefix(root, NS)}data/")
    }


@pytest.fixture
def root(tmp_path) -> str:
    return f"file://{tmp_path / 'store'}"


def test_local_data_is_uploaded_once_and_arrives_byte_identical(tmp_path, root):
    src = make_tree(tmp_path / "ds", {"a.txt": b"alpha", "sub/b.bin": os.urandom(3000)})
    ref = stage(Data(str(src)), root, NS)
    h = Data(str(src)).content_hash()
    assert ref.uri == layout.data_cache_prefix(root, NS, h)
    assert ref.manifest_uri == layout.data_manifest_uri(root, NS, h)
    stored = cache_objects(root)
    assert len(stored) == 3  # two files and the manifest

    again = Stager(root, NS)(Data(str(src)))  # a second submission: same ref, nothing written
    assert again == ref
    assert cache_objects(root) == stored

    dest = tmp_path / "pod"
    assert datafetch.fetch(ref, str(dest)) == str(dest)
    assert (dest / "a.txt").read_bytes() == b"alpha"
    assert (dest / "sub/b.bin").read_bytes() == (src / "sub/b.bin").read_bytes()


def test_a_single_file_keeps_its_name(tmp_path, root):
    src = make_tree(tmp_path, {"config.json": b'{"lr": 0.1}'}) / "config.json"
    ref = stage(Data(str(src)), root, NS)
    got = datafetch.fetch(ref, str(tmp_path / "pod"))
    assert got == str(tmp_path / "pod" / "config.json")
    assert Path(got).read_bytes() == b'{"lr": 0.1}'


def test_a_data_manifest_past_its_bound_is_refused_unread(tmp_path, root):
    src = make_tree(tmp_path / "ds", {"a.txt": b"alpha"})
    ref = stage(Data(str(src)), root, NS)
    assert ref.manifest_uri is not None
    with open(ref.manifest_uri.removeprefix("file://"), "r+b") as f:
        f.truncate(limits.MAX_DATA_MANIFEST_BYTES + 1)  # a Pod made it huge (sparse: no cost)
    with pytest.raises(datafetch.FetchError, match="is larger than 67,108,864 bytes"):
        datafetch.fetch(ref, str(tmp_path / "pod"))


def test_bytes_changed_in_storage_are_refused(tmp_path, root):
    src = make_tree(tmp_path / "ds", {"a.txt": b"alpha"})
    ref = stage(Data(str(src)), root, NS)
    storage.write_bytes(ref.uri + "a.txt", b"tampered")
    with pytest.raises(datafetch.FetchError, match="changed in storage since it was uploaded"):
        datafetch.fetch(ref, str(tmp_path / "pod"))


def forge(ref: DataRef, files: dict[str, bytes]) -> str:
    """What a namespace-mate can do: write other files into the entry and a manifest that
    lists them faithfully, under the entry's own name. Returns the forged content hash."""
    from kinetic.model.data import LocalFile, combined_hash, manifest_bytes

    listed = []
    for rel, data in files.items():
        storage.write_bytes(ref.uri + rel, data)
        digest = hashlib.sha256(rel.encode() + b"\0" + data).hexdigest()
        sha = hashlib.sha256(data).hexdigest()
        listed.append(LocalFile(rel, "", digest, sha, len(data)))
    assert ref.manifest_uri is not None
    storage.write_bytes(ref.manifest_uri, manifest_bytes(True, listed))
    return combined_hash(True, (f.digest for f in listed))


def test_a_manifest_forged_in_storage_is_refused_naming_the_uri_and_both_hashes(tmp_path, root):
    src = make_tree(tmp_path / "ds", {"a.txt": b"alpha"})
    ref = stage(Data(str(src)), root, NS)
    genuine = Data(str(src)).content_hash()
    forged = forge(ref, {"a.txt": b"FORGED"})
    with pytest.raises(datafetch.FetchError) as refused:
        datafetch.fetch(ref, str(tmp_path / "pod"))
    message = str(refused.value)
    assert f"data manifest {ref.manifest_uri} does not match its name" in message
    assert f"content hash {forged}, its name says {genuine}" in message
    assert not (tmp_path / "pod" / "a.txt").exists()  # nothing of it reached the function


def test_genuine_digests_beside_forged_files_are_refused_file_by_file(tmp_path, root):
    """The manifest keeps the digests its name is made of, and lies only in its sha256s:
    each file is checked against its digest, which the name vouches for."""
    src = make_tree(tmp_path / "ds", {"a.txt": b"alpha"})
    ref = stage(Data(str(src)), root, NS)
    assert ref.manifest_uri is not None
    doc = json.loads(storage.read_bytes(ref.manifest_uri))
    doc["files"][0]["sha256"] = hashlib.sha256(b"BETA!").hexdigest()
    storage.write_bytes(ref.manifest_uri, json.dumps(doc).encode())
    storage.write_bytes(ref.uri + "a.txt", b"BETA!")  # the same size, other bytes
    with pytest.raises(datafetch.FetchError) as refused:
        datafetch.fetch(ref, str(tmp_path / "pod"))
    message = str(refused.value)
    assert f"{ref.uri}a.txt changed in storage since it was uploaded: its digest is" in message
    assert doc["files"][0]["digest"] in message and ref.manifest_uri in message


def test_a_manifest_without_digests_cannot_be_checked_and_is_refused(tmp_path, root):
    src = make_tree(tmp_path / "ds", {"a.txt": b"alpha"})
    ref = stage(Data(str(src)), root, NS)
    assert ref.manifest_uri is not None
    doc = json.loads(storage.read_bytes(ref.manifest_uri))
    for entry in doc["files"]:
        del entry["digest"]  # as a client before digests wrote it
    storage.write_bytes(ref.manifest_uri, json.dumps(doc).encode())
    with pytest.raises(datafetch.FetchError, match=r"files\[0\] \(a.txt\) lists no digest"):
        datafetch.fetch(ref, str(tmp_path / "pod"))


def test_staging_uploads_again_over_a_manifest_that_does_not_match_its_name(tmp_path, root, caplog):
    src = make_tree(tmp_path / "ds", {"a.txt": b"alpha", "b.txt": b"beta"})
    ref = stage(Data(str(src)), root, NS)
    forge(ref, {"a.txt": b"FORGED"})
    with caplog.at_level("WARNING", logger="kinetic"):
        again = stage(Data(str(src)), root, NS)
    assert again == ref
    assert "does not match its name" in caplog.text and "uploading the data again" in caplog.text
    dest = tmp_path / "pod"
    datafetch.fetch(again, str(dest))
    assert (dest / "a.txt").read_bytes() == b"alpha" and (dest / "b.txt").read_bytes() == b"beta"


def test_a_prefix_arrives_as_a_folder_and_escaping_names_are_refused(tmp_path, root):
    prefix = f"{root}/shared/ds/"
    storage.write_bytes(prefix + "x/1.txt", b"1")
    storage.write_bytes(prefix + "2.txt", b"2")
    dest = tmp_path / "pod"
    datafetch.fetch(DataRef(uri=prefix, is_dir=True), str(dest))
    assert (dest / "x/1.txt").read_bytes() == b"1" and (dest / "2.txt").read_bytes() == b"2"
    with pytest.raises(datafetch.FetchError, match="holds no objects"):
        datafetch.fetch(DataRef(uri=f"{root}/nothing/", is_dir=True), str(tmp_path / "p2"))


def test_what_the_cluster_lacks_is_said_plainly(tmp_path):
    with pytest.raises(datafetch.FetchError, match="GCS FUSE CSI driver"):
        datafetch.fetch(DataRef(uri="gs://b/x/", is_dir=True, fuse=True), str(tmp_path))
    try:
        import datasets  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        with pytest.raises(datafetch.FetchError, match="needs the Hugging Face `datasets` package"):
            datafetch.fetch(DataRef(uri="hf://imdb?split=train", is_dir=True), str(tmp_path))


def test_hf_source():
    assert datafetch.hf_source("hf://org/set?split=train&config=en") == (
        "org/set",
        {"split": "train", "config": "en"},
    )


def test_volumes_env_is_checked():
    assert datafetch.volumes_from_env({}) == []
    with pytest.raises(datafetch.FetchError, match="KINETIC_VOLUMES"):
        datafetch.volumes_from_env({"KINETIC_VOLUMES": json.dumps([{"uri": "gs://b/"}])})


def test_cache_paths_are_the_namespaces_and_take_only_a_hash():
    h = "0f" * 32
    assert layout.data_cache_prefix("gs://b/r", NS, h) == f"gs://b/r/namespaces/{NS}/data/{h}/"
    assert layout.data_manifest_uri("gs://b/r", NS, h) == f"gs://b/r/namespaces/{NS}/data/{h}.json"
    with pytest.raises(ValueError, match="64 lowercase hex"):
        layout.data_cache_prefix("gs://b/r", NS, "../../other")
