"""The one place the operator reaches into Kopf's internals: its JSON decoding, and the
empty JSON patch of an admission answer.

What it replaces, in ``kopf._cogs.clients.api`` only (nothing else of Kopf's):

* the module's ``json`` name, through which ``api.stream`` decodes every
  line of a watch stream (``json.loads(line.decode('utf-8'))``): it becomes a
  namespace whose ``loads`` is `deepjson.loads` (``dumps`` and
  ``JSONDecodeError`` stay the standard library's);
* ``api.get``, which decodes every GET answer — the list pages a watch
  starts from — with aiohttp's ``response.json()``, i.e. ``json.loads``: it
  becomes the same request (through ``api.request``) decoded with
  `deepjson.loads`.

Why: the standard library's decoder recurses once per level of nesting and
gives up with `RecursionError` at about 1,500 levels, while the API server
stores objects nested up to 10,000 deep. Inside Kopf that error stops the
watcher of the whole resource, in every namespace, on every start, until
someone deletes the object by hand (see `deepjson`). Kopf offers no setting
for its decoder, so the only way in is its private module.

What would let it go: a Kopf release whose API client takes the JSON decoder
from its settings (or decodes without recursing, or survives a
`RecursionError` per event). As of Kopf 1.45.2, installed here, and Kopf's
main branch of June 2026, ``api.stream`` and ``api.get`` still call
``json.loads`` and ``response.json()`` directly. Until then `install` checks
that the names it replaces exist and raises otherwise, so a Kopf upgrade that
moves them stops the operator at start instead of silently dropping the
protection; `tests/unit/test_deepjson.py` decodes a deep watch line through
the patched module.

**The admission answer's patch.** Kopf answers every admission review with
``kopf.Patch.as_json_patch()``, which deep-copies the whole object under review
before it looks whether there is anything to patch. Our webhooks only validate:
there never is. For a review of 3 MiB of ``[[],[],…]`` that copy took 6 s and
250 MiB, on the event loop, in Python's ``copy.deepcopy``: long enough for a
replica to miss its Lease renewal and exit. `install` makes an empty patch
answer ``[]`` before copying anything (what Kopf returns for it anyway, after
the copy); a patch with changes is built by Kopf's own code, unchanged. As of
Kopf 1.45.2 and its main branch of June 2026 the copy comes first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from types import ModuleType, SimpleNamespace
from typing import Any

import kopf

from kinetic_operator.deepjson import loads

_MARKER = "_kinetic_deepjson"


def install() -> None:
    """Make Kopf decode watch streams and GET answers (lists) with `deepjson.loads`.

    Idempotent. Raises RuntimeError if a Kopf release moved what is replaced.
    """
    from kopf._cogs.clients import api

    if getattr(api, _MARKER, False):
        return
    _require_replaceable(api)
    # Replacing a module attribute of Kopf's is the point here.
    api.json = SimpleNamespace(  # type: ignore[assignment]
        loads=loads, dumps=json.dumps, JSONDecodeError=json.JSONDecodeError
    )
    api.get = _safe_get(api)
    setattr(api, _MARKER, True)
    _answer_empty_patches_without_a_copy()


def _answer_empty_patches_without_a_copy() -> None:
    """``kopf.Patch.as_json_patch``, returning ``[]`` for an empty patch before it copies
    the object (see the module's note)."""
    original = kopf.Patch.as_json_patch
    if getattr(original, _MARKER, False):
        return

    def as_json_patch(self: kopf.Patch, body: Any = None) -> Any:
        if not self:
            return []
        return original(self, body)

    setattr(as_json_patch, _MARKER, True)
    kopf.Patch.as_json_patch = as_json_patch  # type: ignore[method-assign]


def _require_replaceable(api: ModuleType) -> None:
    """Refuse to run on a Kopf whose client module no longer has what `install` replaces."""
    if not (hasattr(api, "json") and hasattr(api, "get") and hasattr(api, "request")):
        raise RuntimeError(
            "kopf._cogs.clients.api no longer has json/get/request: the operator cannot "
            "protect Kopf's watch decoding from deeply nested objects; pin a known Kopf release"
        )


def _safe_get(api: ModuleType) -> Callable[..., Coroutine[Any, Any, Any]]:
    """Kopf's ``api.get`` (same signature, same request), decoding the answer with `loads`."""

    async def get(
        url: str,
        *,
        settings: Any,
        payload: object | None = None,
        headers: dict[str, str] | None = None,
        timeout: Any = None,
        logger: Any,
    ) -> Any:
        response = await api.request(
            method="get",
            url=url,
            payload=payload,
            headers=headers,
            timeout=timeout,
            settings=settings,
            logger=logger,
        )
        async with response:
            return await response.json(loads=loads)

    return get
