"""The one place the operator reaches into Kopf's private modules: its JSON decoding.

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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from types import ModuleType, SimpleNamespace
from typing import Any

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
