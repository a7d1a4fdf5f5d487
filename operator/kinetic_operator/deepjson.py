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
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from kinetic.model.limits import json_depth

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
    """Like `loads`, but always cut at ``max_depth``: for code that walks the result recursively."""
    doc = loads(data)
    if json_depth(doc, max_depth) > max_depth:
        doc = json.loads(cut_deep(_text(data), max_depth))
    return doc


def _describe(doc: Any) -> str:
    """Which object a decoded document is about, for the log (watch event, list or object)."""
    if isinstance(doc, dict):
        obj: dict[str, Any] = doc["object"] if isinstance(doc.get("object"), dict) else doc
        meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
        kind = obj.get("kind") or "object"
        name = "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)
        return f"{kind} {name}".strip()
    return type(doc).__name__
