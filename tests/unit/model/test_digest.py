"""Result hashes: what the runner reports, what the operator parses, what the client checks."""

from __future__ import annotations

import json

import pytest
from kinetic.model import digest

HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "message, found",
    [
        (f"ok sha256={HEX}", HEX),
        (f"ValueError: bad lr 0.1 sha256={HEX}", HEX),
        (f"sha256={HEX}", HEX),
        ("ok", None),
        (None, None),
        (f"ok sha256={HEX[:-1]}", None),  # too short
        (f"ok sha256={HEX.upper()}", None),  # not how the runner writes it
        (f"said sha256={HEX} and more", None),  # only a trailing hash counts
        (f"okxsha256={HEX}", None),
    ],
)
def test_the_reported_hash_is_the_trailing_sha256_field(message, found) -> None:
    assert digest.reported_sha256(message) == found


def test_a_long_summary_is_cut_so_the_hash_always_fits_the_termination_message() -> None:
    line = digest.with_sha256("é" * 5000, HEX)
    assert len(line.encode()) <= digest.MAX_MESSAGE
    assert digest.reported_sha256(line) == HEX
    assert digest.with_sha256("multi\nline  text", HEX) == f"multi line text sha256={HEX}"


def test_a_chunk_report_is_used_only_when_it_matches_the_hash_its_pod_reported() -> None:
    data = json.dumps({"4": HEX, "5": "f" * 64, "x": HEX, "6": "short"}).encode()
    message = json.dumps({"succeeded": "4-5", "failed": "", "report": digest.sha256(data)})
    assert digest.parse_report(data, digest.chunk_report(message)) == {
        4: digest.Reported(HEX),
        5: digest.Reported("f" * 64),
    }
    with pytest.raises(ValueError, match="report hash mismatch"):
        digest.parse_report(data + b" ", digest.sha256(data))
    assert digest.chunk_report('{"succeeded":"1","failed":""}') is None
    assert digest.chunk_report("ok") is None


@pytest.mark.parametrize(
    "message, found",
    [
        (f"ok bytes=1234 sha256={HEX}", digest.Reported(HEX, 1234)),
        (f"ok bytes=0 sha256={HEX}", digest.Reported(HEX, 0)),
        (f"ok sha256={HEX}", digest.Reported(HEX, None)),  # a runner that predates sizes
        (f"ok bytes=12 and sha256={HEX}", digest.Reported(HEX, None)),  # not beside it
        (f"ok bytes=-1 sha256={HEX}", digest.Reported(HEX, None)),
        (f"ok sha256={HEX} bytes=12", None),  # the hash must come last
    ],
)
def test_the_reported_size_is_the_field_just_before_the_hash(message, found) -> None:
    assert digest.reported_result(message) == found
    assert digest.reported_sha256(message) == (found.sha256 if found else None)


def test_the_size_survives_a_summary_cut_to_fit() -> None:
    line = digest.with_sha256("é" * 5000, HEX, size=2**40)
    assert len(line.encode()) <= digest.MAX_MESSAGE
    assert digest.reported_result(line) == digest.Reported(HEX, 2**40)


def test_a_chunk_report_carries_each_inputs_size_and_older_reports_read_as_before() -> None:
    hashes = {4: digest.Reported(HEX, 10), 5: digest.Reported("f" * 64, None)}
    data = digest.chunk_report_bytes(hashes)
    assert digest.parse_report(data, digest.sha256(data)) == hashes
    hostile = json.dumps({"4": HEX, "bytes": {"4": -5, "5": "7"}, "5": HEX}).encode()
    assert digest.parse_report(hostile, digest.sha256(hostile)) == {
        4: digest.Reported(HEX),
        5: digest.Reported(HEX),
    }
    odd = json.dumps({"4": HEX, "bytes": [1]}).encode()
    assert digest.parse_report(odd, digest.sha256(odd)) == {4: digest.Reported(HEX)}


def test_verify_names_the_uri_and_both_hashes() -> None:
    data = b"result bytes"
    digest.verify(data, digest.sha256(data), "gs://b/r.pkl")
    with pytest.raises(digest.ResultMismatch) as err:
        digest.verify(b"tampered", digest.sha256(data), "gs://b/r.pkl")
    text = str(err.value)
    assert "gs://b/r.pkl" in text and digest.sha256(data) in text
    assert digest.sha256(b"tampered") in text
    with pytest.raises(digest.ResultMismatch, match="no sha256 was recorded"):
        digest.verify(data, None, "gs://b/r.pkl")
