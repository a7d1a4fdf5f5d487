"""Decoding what the API server may hold: a document too deep for `json` is cut, not fatal."""

from __future__ import annotations

import json
import re
import time

import pytest
from kinetic.model.limits import json_depth
from kinetic_operator import deepjson, kopf_patch


def deep_event(levels: int, name: str = "deep") -> str:
    item = "[" * levels + "1" + "]" * levels
    meta = json.dumps({"name": name, "namespace": "ns", "uid": "u1", "resourceVersion": "7"})
    return (
        '{"type":"ADDED","object":{"kind":"KineticBatch","metadata":' + meta + ","
        '"spec":{"inputs":{"items":[' + item + ', "a ] [ { string"]}}}}'
    )


def test_json_itself_fails_on_such_a_document():
    with pytest.raises(RecursionError):
        json.loads(deep_event(3000))


@pytest.mark.parametrize("levels", [3000, 9999, 50_000])
def test_a_deep_document_is_cut_and_keeps_its_identity(levels: int):
    doc = deepjson.loads(deep_event(levels))
    obj = doc["object"]
    assert obj["metadata"] == {
        "name": "deep",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "7",
    }
    items = obj["spec"]["inputs"]["items"]
    assert items[1] == "a ] [ { string"  # brackets inside strings do not count
    assert 32 < json_depth(items[0], 10_000) <= deepjson.CUT_DEPTH


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, {"b": "c\\"]"}], "d": null}',
        "[]",
        '"just a string with [ and {"',
        '{"k": "\\\\", "l": [[], {}]}',
    ],
)
def test_shallow_documents_decode_exactly_as_json_does(text: str):
    assert deepjson.loads(text) == json.loads(text)
    assert deepjson.cut_deep(text) == text


def test_cut_deep_replaces_each_too_deep_value_with_null():
    assert deepjson.cut_deep('[[[1]],[2],{"a":{"b":[]}}]', 2) == '[[null],[2],{"a":null}]'
    assert json.loads(deepjson.cut_deep("[" * 5 + "]" * 5, 3)) == [[[None]]]


def test_bytes_are_accepted():
    assert deepjson.loads(deep_event(2000).encode())["object"]["metadata"]["name"] == "deep"


def test_bounded_cuts_what_json_could_decode_but_python_code_could_not_walk():
    text = "[" * 1200 + "]" * 1200  # json decodes it; a recursive walk would fail
    assert json_depth(deepjson.loads_bounded(text), 10_000) == deepjson.CUT_DEPTH


def test_install_puts_the_safe_decoder_where_kopf_reads_watch_streams():
    from kopf._cogs.clients import api

    kopf_patch.install()
    assert api.json.loads is deepjson.loads
    assert api.get.__module__ == kopf_patch.__name__

    # What Kopf's watch stream does with each line (kopf._cogs.clients.api.stream).
    line = deep_event(3000).encode() + b"\n"
    assert api.json.loads(line.decode("utf-8"))["object"]["metadata"]["uid"] == "u1"


# --------------------------------------------------------------------------- loads_bounded


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, {"b": "c\\"]"}], "d": null, "e": true, "f": false}',
        "[]",
        "{}",
        '  {"x": -1.5e3, "y": 12345678901234567890}  ',
        '"a ] [ { string"',
        '{"k": "\\u00e9\\\\", "l": [[], {}]}',
        "[NaN, Infinity]",
    ],
)
def test_the_bounded_decoder_reads_shallow_documents_exactly_as_json_does(text: str) -> None:
    assert repr(deepjson.loads_bounded(text)) == repr(json.loads(text))


def test_the_bounded_decoder_cuts_in_one_pass_whatever_the_depth() -> None:
    assert deepjson.loads_bounded('[[[1]],[2],{"a":{"b":[]}}]', 2) == [[None], [2], {"a": None}]
    deep = "[" * 50_000 + "]" * 50_000  # past what json's C decoder can descend
    assert json_depth(deepjson.loads_bounded(deep), 100_000) == deepjson.CUT_DEPTH
    doc = deepjson.loads_bounded(deep_event(20_000))
    assert doc["object"]["spec"]["inputs"]["items"][1] == "a ] [ { string"


@pytest.mark.parametrize(
    "text,says",
    [
        ("", "Expecting value"),
        ("[1,", "Expecting value"),
        ("[1] x", "Extra data"),
        ("[" * 200, "Unterminated list or object"),  # unterminated below the cut
        ('{"a": 1', "Expecting ',' delimiter"),
    ],
)
def test_the_bounded_decoder_refuses_what_is_not_json(text: str, says: str) -> None:
    with pytest.raises(json.JSONDecodeError, match=re.escape(says)):
        deepjson.loads_bounded(text)


def test_the_bounded_decoder_leaves_the_gil_to_other_threads() -> None:
    """It runs as Python code, which a waiting thread interrupts every switch interval:
    another thread gets to run many times while it decodes, where json's C decoder would
    hold the GIL from start to end."""
    import threading

    body = "[" + "[]," * 300_000 + "[]]"
    done = threading.Event()
    turns = 0

    def other() -> None:
        nonlocal turns
        while not done.is_set():
            turns += 1
            time.sleep(0)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert len(deepjson.loads_bounded(body)) == 300_001
    finally:
        done.set()
        thread.join()
    assert turns > 10
