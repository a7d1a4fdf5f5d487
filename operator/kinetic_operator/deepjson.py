"""Decode JSON from the API server without letting a deeply nested object crash anything.

The API server stores objects nested up to 10,000 levels deep; Python's
`json` gives up with `RecursionError` at about 1,500 (a C limit that
`sys.setrecursionlimit` does not raise in 3.12), and deep Python recursion
in libraries that walk a body fails earlier still. Kopf decodes every watch
event and list answer with `json.loads`: one such object in any namespace
used to stop the watcher for that resource in every namespace, on every
start, until someone deleted it by hand.

`loads` decodes as `json.loads` does; only when that fails for depth does
it decode a copy of the text in which every list or object deeper than
`CUT_DEPTH` is replaced by ``null``. Metadata (name, namespace, uid,
resourceVersion) is shallow, so the object can still be identified and
handled: the spec checks (`kinetic.model.limits`) see a value still far deeper
than they allow and fail the object with a message. Raising limits instead
would only move the crash into the C stack.

`kopf_patch.install()` puts `loads` where Kopf decodes watch streams and list
answers; `WebhookServer` (in `webhook`) uses `loads_bounded` for admission
reviews; `kube` decodes custom objects with `loads`. This module is pure: it
knows nothing of Kopf.

`loads_bounded` is for bodies anyone may send (the webhook's port): it decodes
in one pass, cutting as it goes, with the standard library's pure-Python
scanner (`json.scanner.py_make_scanner`) instead of its C one. The C decoder
holds the GIL from the first byte to the last: 3 MiB of ``[[],[],…]`` kept
every other thread (the event loop among them) waiting for 230 ms, measured.
Python code gives the GIL up every few milliseconds (``sys.getswitchinterval``),
so run in a worker thread the pure-Python scanner costs the loop almost
nothing, at about fifteen times the CPU; strings are still read by the C
``scanstring``, so ordinary objects, mostly strings, decode nearly as fast.
"""

from __future__ import annotations

import json
import logging
import re
from json.decoder import JSONArray, JSONObject  # type: ignore[attr-defined]
from json.scanner import py_make_scanner  # type: ignore[attr-defined]
from typing import Any

log = logging.getLogger("kinetic.operator")

# Deeper than any Kubernetes object we handle needs (specs allow MAX_DEPTH = 32 inside
# spec.inputs...), shallow enough for any Python code that walks a body recursively.
CUT_DEPTH = 100

# A JSON string (escapes included, unrolled so long strings cost no backtracking), or a bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def cut_deep(text: str, max_depth: int = CUT_DEPTH) -> str:
    """``text`` with every list/object nested deeper than ``max_depth`` replaced by ``null``.

    Iterative and linear; brackets inside strings are skipped. Valid JSON in
    gives valid JSON out.
    """
    out: list[str] = []
    depth = 0
    last = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        if token in "[{":
            depth += 1
            if depth == max_depth + 1:
                out.append(text[last : match.start()])
                out.append("null")
        else:
            if depth == max_depth + 1:
                last = match.end()
            depth -= 1
    out.append(text[last:])
    return "".join(out)


def _text(data: str | bytes | bytearray) -> str:
    return data.decode("utf-8") if isinstance(data, bytes | bytearray) else data


def loads(data: str | bytes | bytearray, **kwargs: Any) -> Any:
    """`json.loads`, except that a document too deep to decode comes back cut at `CUT_DEPTH`."""
    try:
        return json.loads(data, **kwargs)
    except RecursionError:
        text = _text(data)
        doc = json.loads(cut_deep(text), **kwargs)
        log.warning(
            "Decoded a JSON document nested deeper than Python can (%s): lists and objects "
            "below depth %d were replaced by null",
            _describe(doc),
            CUT_DEPTH,
        )
        return doc


def loads_bounded(data: str | bytes | bytearray, max_depth: int = CUT_DEPTH) -> Any:
    """Decode ``data`` in one pass, every list or object deeper than ``max_depth`` read as None.

    For code that walks the result recursively, and for bodies from anyone:
    a worker thread running it leaves the GIL to other threads every few
    milliseconds (see the module's note). Raises `json.JSONDecodeError`
    (or `ValueError`, for an integer too long to convert) on what is not JSON.
    """
    return _BoundedDecoder(max_depth).decode(_text(data))


class _BoundedDecoder(json.JSONDecoder):
    """`json.JSONDecoder` on the pure-Python scanner, cutting containers past ``max_depth``.

    The scanner calls ``parse_object`` / ``parse_array`` for each ``{`` / ``[``;
    these count the depth, and past the bound skip the container's text
    (`_skip`) instead of building it. One decoder per document: the depth is
    its state.
    """

    def __init__(self, max_depth: int) -> None:
        super().__init__()
        self.max_depth = max_depth
        self.depth = 0
        self.parse_object = self._object
        self.parse_array = self._array
        self.scan_once = py_make_scanner(self)

    def _object(self, state: tuple[str, int], *args: Any) -> tuple[Any, int]:
        return self._nested(state, lambda: JSONObject(state, *args))

    def _array(self, state: tuple[str, int], scan_once: Any) -> tuple[Any, int]:
        return self._nested(state, lambda: JSONArray(state, scan_once))

    def _nested(self, state: tuple[str, int], build: Any) -> tuple[Any, int]:
        text, end = state  # end: just past the opening bracket
        if self.depth >= self.max_depth:
            return None, _skip(text, end - 1)
        self.depth += 1
        try:
            return build()
        finally:
            self.depth -= 1


def _skip(text: str, start: int) -> int:
    """The index just past the list or object opening at ``start`` (brackets in strings
    do not count); its content is not decoded."""
    depth = 0
    for match in _TOKEN.finditer(text, start):
        token = match.group()
        if token[0] == '"':
            continue
        depth += 1 if token in "[{" else -1
        if depth == 0:
            return match.end()
    raise json.JSONDecodeError("Unterminated list or object", text, start)


def _describe(doc: Any) -> str:
    """Which object a decoded document is about, for the log (watch event, list or object)."""
    if isinstance(doc, dict):
        obj: dict[str, Any] = doc["object"] if isinstance(doc.get("object"), dict) else doc
        meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
        kind = obj.get("kind") or "object"
        name = "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)
        return f"{kind} {name}".strip()
    return type(doc).__name__
