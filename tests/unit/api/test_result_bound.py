"""A stored result is read no further than the size its runner reported beside its hash.

Anyone who may write the namespace's storage can swap ``result.pkl`` for a
huge object; the client used to read it whole before the hash check refused
it. The size the runner reported (through the API server, where storage
writers cannot reach) bounds the read now.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kinetic import storage
from kinetic.api.handle import read_stored, reported_in
from kinetic.model import digest, payload

GENUINE = payload.dump_result(payload.success("genuine"))


@pytest.fixture
def uri(tmp_path: Path) -> str:
    where = f"file://{tmp_path}/store/result.pkl"
    storage.write_bytes(where, GENUINE)
    return where


def test_the_genuine_result_reads_whole(uri: str) -> None:
    reported = digest.Reported(digest.sha256(GENUINE), len(GENUINE))
    assert read_stored(uri, reported) == GENUINE


def test_a_larger_object_in_its_place_is_refused_naming_the_reported_size(uri: str) -> None:
    storage.write_bytes(uri, GENUINE + b"\0" * (1 << 20))
    reported = digest.Reported(digest.sha256(GENUINE), len(GENUINE))
    with pytest.raises(digest.ResultMismatch) as err:
        read_stored(uri, reported)
    text = str(err.value)
    assert uri in text and reported.sha256 in text and f"{len(GENUINE)} bytes" in text


def test_a_smaller_or_equal_forgery_is_read_and_left_to_the_hash_check(uri: str) -> None:
    forged = payload.dump_result(payload.success("forged"))
    storage.write_bytes(uri, forged)
    reported = digest.Reported(digest.sha256(GENUINE), len(GENUINE))
    data = read_stored(uri, reported)
    with pytest.raises(digest.ResultMismatch, match=digest.sha256(forged)):
        digest.verify(data, reported.sha256, uri)


def test_a_result_from_a_runner_that_predates_sizes_reads_whole(uri: str) -> None:
    storage.write_bytes(uri, GENUINE + b"more")
    assert read_stored(uri, digest.Reported("a" * 64)) == GENUINE + b"more"


@pytest.mark.parametrize(
    "record, found",
    [
        ({"resultSHA256": "a" * 64, "resultBytes": 9}, digest.Reported("a" * 64, 9)),
        ({"resultSHA256": "a" * 64}, digest.Reported("a" * 64)),
        ({"resultSHA256": "a" * 64, "resultBytes": -1}, digest.Reported("a" * 64)),
        ({"resultSHA256": "a" * 64, "resultBytes": True}, digest.Reported("a" * 64)),
        ({"resultBytes": 9}, None),
        ({}, None),
    ],
)
def test_what_a_status_records_is_read_as_hash_and_size(record: dict, found: object) -> None:
    assert reported_in(record) == found
