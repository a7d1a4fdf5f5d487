"""kinetic.Data(fuse=True) in the model: what GCS FUSE can mount, and the shared sentences.

Pure: no cluster, no storage. The client's and the operator's decisions are
tested in tests/unit/api/test_fuse.py and tests/unit/operator/test_datavolumes_fuse.py.
"""

from __future__ import annotations

import pytest
from kinetic.api.data import Data, call_data, inputs_data
from kinetic.model.data import (
    GCSFUSE_DRIVER,
    DataError,
    FuseSource,
    fuse_driver_missing,
    fuse_problem,
    fuse_source,
    volume_problems,
)
from kinetic.model.resources import DataVolume


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("gs://bkt/", FuseSource("bkt", "", None)),
        ("gs://bkt/datasets/imagenet/", FuseSource("bkt", "datasets/imagenet", None)),
        ("gs://bkt/a/weights.h5", FuseSource("bkt", "a", "weights.h5")),
        ("gs://bkt/weights.h5", FuseSource("bkt", "", "weights.h5")),
        ("gs://bkt/a/b,c.txt", FuseSource("bkt", "a", "b,c.txt")),  # a comma in a name is fine
    ],
)
def test_a_gs_uri_is_mounted_by_its_folder(uri: str, expected: FuseSource) -> None:
    assert fuse_source(uri) == expected
    assert fuse_problem(uri) is None


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("hf://imdb", "only Cloud Storage (gs://) data can be mounted"),
        ("file:///shared/ds/", "only Cloud Storage (gs://) data can be mounted"),
        ("gs://bkt/a,b/", "has a ',' and cannot be mounted"),  # only-dir=a,b would split
        ("gs://bkt/a//b/", "empty, '.' or '..' path segment"),
        ("gs://bkt/a/../b/", "empty, '.' or '..' path segment"),
        ("gs://bkt/a/..", "empty, '.' or '..' path segment"),
    ],
)
def test_what_gcs_fuse_cannot_show_is_refused_with_the_reason(uri: str, words: str) -> None:
    with pytest.raises(DataError, match=words.replace("(", r"\(").replace(")", r"\)")):
        fuse_source(uri)
    assert words in (fuse_problem(uri) or "")


def test_data_refuses_fuse_it_can_never_mount_when_made() -> None:
    with pytest.raises(DataError, match=r"Hugging Face dataset is always downloaded.*fuse=True"):
        Data("hf://imdb?split=train", fuse=True)
    with pytest.raises(DataError, match=r"Data\('gs://bkt/a,b/', fuse=True\): .*','"):
        Data("gs://bkt/a,b/", fuse=True)
    assert Data("gs://bkt/a,b/").path == "gs://bkt/a,b/"  # downloaded: any name will do
    assert Data("gs://bkt/ds/", fuse=True).fuse


def test_the_missing_driver_sentence_names_what_asked_the_driver_and_both_fixes() -> None:
    text = fuse_driver_missing("argument 'ds' Data('gs://b/x/', fuse=True)")
    assert text.startswith("argument 'ds' Data('gs://b/x/', fuse=True) asks for a GCS FUSE mount")
    assert GCSFUSE_DRIVER in text and "CSIDriver" in text
    assert "GcsFuseCsiDriver=ENABLED" in text  # the GKE add-on
    assert text.endswith("or drop fuse=True to have the data downloaded into the pod instead.")
    yaml = fuse_driver_missing("spec.volumes[0].fuse (gs://b/x/)", drop="set fuse to false")
    assert "set fuse to false to have the data downloaded" in yaml


def test_the_operator_refuses_fuse_volumes_gcs_fuse_cannot_show_by_field() -> None:
    vols = [
        DataVolume(mount_path="/ok", uri="gs://public/ds/", fuse=True),
        DataVolume(mount_path="/hf", uri="hf://imdb", fuse=True),
        DataVolume(mount_path="/comma", uri="gs://public/a,b/", fuse=True),
        DataVolume(mount_path="/plain", uri="gs://public/a,b/"),
    ]
    problems = volume_problems("gs://kinetic/root", "ns", vols, "spec.template")
    assert [p.split(":", 1)[0] for p in problems] == [
        "spec.template.volumes[1].fuse",
        "spec.template.volumes[2].fuse",
    ]


def test_every_data_of_a_call_or_a_batch_is_found_with_where_it_is() -> None:
    a, b = Data("gs://b/a/", fuse=True), Data("gs://b/b/")
    found = call_data((1, [a, {"k": b}]), {"ds": a, "n": 3})
    assert found == [("argument 1[0]", a), ("argument 1[1]['k']", b), ("argument 'ds'", a)]
    assert inputs_data([{"ds": a}, 2, (b,)]) == [("input 0['ds']", a), ("input 2[0]", b)]
