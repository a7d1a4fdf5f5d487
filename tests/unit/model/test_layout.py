"""The storage layout: every path of an object lies inside its own prefix, and specs that name
URIs outside their namespace's prefix are refused."""

from __future__ import annotations

import pytest
from kinetic.model import layout

ROOT = "gs://bucket/kinetic"
UID = "6f1c2a4e-1b2c-4d5e-8f90-0123456789ab"


def homes() -> list[layout.Home]:
    return [
        layout.job_home(ROOT, "team-a", "train-1", UID),
        layout.batch_home(ROOT, "team-a", "grp-1", UID),
    ]


@pytest.mark.parametrize("home", homes(), ids=["job", "batch"])
def test_everything_an_object_writes_is_inside_its_own_prefix(home: layout.Home) -> None:
    prefix = home.prefix
    assert prefix == f"{ROOT}/namespaces/team-a/{home.kind}/{home.name}/{UID}/"
    written = [
        home.result_uri,
        home.log_uri("train-1-3"),
        home.input_result_uri(7),
        home.report_uri("grp-1-0-1"),
        home.manifest_uri,
        home.manifest_shard_uri(2),
        home.accepted_spec_uri,
    ]
    assert all(uri.startswith(prefix) for uri in written)
    # Outputs are the namespace's (kept by cleanup), but still keyed by the UID.
    assert home.output_dir == f"{ROOT}/namespaces/team-a/outputs/{home.name}/{UID}"
    assert not home.output_dir.startswith(prefix)


def test_same_name_in_another_namespace_or_with_another_uid_shares_nothing() -> None:
    a = layout.job_home(ROOT, "team-a", "train", UID)
    b = layout.job_home(ROOT, "team-b", "train", UID)
    c = layout.job_home(ROOT, "team-a", "train", "0" + UID[1:])
    for x, y in [(a, b), (a, c), (b, c)]:
        assert not x.prefix.startswith(y.prefix) and not y.prefix.startswith(x.prefix)
        assert x.result_uri != y.result_uri


@pytest.mark.parametrize(
    "namespace, name, uid",
    [
        ("..", "n", UID),
        ("a/b", "n", UID),
        ("ns", "../other", UID),
        ("ns", "n/x", UID),
        ("ns", "", UID),
        ("ns", "n", "../x"),
        ("ns", "n", ""),
        ("NS", "n", UID),
    ],
)
def test_names_that_could_escape_their_folder_are_refused(namespace, name, uid) -> None:
    with pytest.raises(ValueError, match="cannot be used in a storage path"):
        layout.job_home(ROOT, namespace, name, uid)


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "."])
def test_pod_names_and_indexes_cannot_escape_either(bad: str) -> None:
    home = homes()[0]
    with pytest.raises(ValueError):
        home.log_uri(bad)
    with pytest.raises(ValueError):
        home.input_result_uri(-1)


@pytest.mark.parametrize(
    "uri",
    [
        f"{ROOT}/namespaces/team-a/uploads/x-0123456789abcdef/payload.pkl",
        f"{ROOT}/namespaces/team-a/jobs/other/{UID}/result.pkl",
    ],
)
def test_uris_inside_the_namespace_prefix_are_accepted(uri: str) -> None:
    assert layout.outside_namespace(ROOT, "team-a", uri, "spec.function.payloadURI") is None


@pytest.mark.parametrize(
    "uri",
    [
        "gs://bucket/result.pkl",  # the parent of the root
        f"{ROOT}/jobs/train/result.pkl",  # the old, name-keyed layout
        f"{ROOT}/namespaces/team-b/uploads/x/payload.pkl",  # another tenant
        f"{ROOT}/namespaces/team-ab/uploads/x/payload.pkl",  # a longer name is not inside
        f"{ROOT}/namespaces/team-a/../team-b/x.pkl",
        f"{ROOT}/namespaces/team-a/./x.pkl",
        f"{ROOT}/namespaces/team-a//x.pkl",
        f"{ROOT}/namespaces/team-a/",  # the prefix itself is not a file
        "file:///home/me/result.pkl",
        "gs://other-bucket/kinetic/namespaces/team-a/x.pkl",
    ],
)
def test_uris_outside_the_namespace_prefix_are_refused_naming_field_and_prefix(uri: str) -> None:
    why = layout.outside_namespace(ROOT, "team-a", uri, "spec.inputs.uriPrefix")
    assert why is not None
    assert why.startswith(f"spec.inputs.uriPrefix: {uri} is outside")
    assert f"{ROOT}/namespaces/team-a/" in why


def test_uploads_are_fresh_and_only_the_objects_own_upload_folder_is_ever_cleaned_up() -> None:
    first = layout.new_upload_dir(ROOT, "team-a", "train-1")
    second = layout.new_upload_dir(ROOT, "team-a", "train-1")
    assert first != second and first.startswith(f"{ROOT}/namespaces/team-a/uploads/train-1-")
    payload = layout.job_payload_uri(first)
    assert layout.upload_dir_of(ROOT, "team-a", "train-1", payload) == first
    # Another object's upload, a foreign URI, or an escape: nothing to delete.
    assert layout.upload_dir_of(ROOT, "team-a", "train-2", payload) is None
    assert layout.upload_dir_of(ROOT, "team-b", "train-1", payload) is None
    assert layout.upload_dir_of(ROOT, "team-a", "train-1", "gs://bucket/result.pkl") is None
    assert layout.upload_dir_of(ROOT, "team-a", "train-1", first + "../x") is None
    assert layout.upload_dir_of(ROOT, "team-a", "train-1", first) is None  # no file in it
    assert layout.upload_dir_of(ROOT, "team-a", "train-1", None) is None


def test_current_json_is_beside_the_uid_folders_of_a_name() -> None:
    home = homes()[1]
    assert home.current_uri == layout.current_uri(ROOT, "team-a", "batches", "grp-1")
    assert not home.current_uri.startswith(home.prefix)
