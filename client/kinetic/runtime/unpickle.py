"""The runner's side of the payload envelope: reading what the client uploaded.

`kinetic.model.payload` defines the envelope and writes it (the client's
`build_job_payload`, `build_function_payload`, `build_input_payload`); only
the Pod reads it back, so the reading lives here: the project entry first
(requirements and source to prepare before anything else is unpickled),
then the call itself, whose shipped sources are installed into
``linecache`` so remote tracebacks show the user's lines, and per-input
payloads. Every failure is a `PayloadError` whose message names the likely
cause and the fix. Call these only on bytes whose sha256 was checked.
"""

from __future__ import annotations

import linecache
import os
import pickle
import platform
from collections.abc import Mapping
from typing import Any

from kinetic.model.payload import PAYLOAD_FORMAT, CallPayload, PayloadError

__all__ = ["load_call_payload", "load_input_payload", "payload_project"]


def payload_project(data: bytes) -> dict[str, Any] | None:
    """The envelope's ``project`` entry (None without one); the body is not unpickled.

    The runner reads it first, to install requirements and unpack the source
    that unpickling the body may need. Only call this after checking the sha256.
    """
    try:
        envelope = pickle.loads(data)
    except Exception as e:
        raise PayloadError(f"not a Kinetic payload (cannot unpickle: {e})") from e
    project = envelope.get("project") if isinstance(envelope, dict) else None
    if project is not None and not isinstance(project, dict):
        raise PayloadError(f"the payload's project entry is a {type(project).__name__}, not a dict")
    return project


def load_call_payload(data: bytes) -> CallPayload:
    """Unpickle a job or function payload. Only call this after checking its sha256.

    Raises PayloadError whose message names the likely cause and the fix.
    """
    try:
        envelope = pickle.loads(data)
    except Exception as e:
        raise PayloadError(f"not a Kinetic payload (cannot unpickle: {e})") from e
    if not isinstance(envelope, dict) or "kinetic_payload" not in envelope:
        raise PayloadError("not a Kinetic payload (no kinetic_payload marker)")
    fmt = envelope["kinetic_payload"]
    if not isinstance(fmt, int) or fmt > PAYLOAD_FORMAT:
        raise PayloadError(
            f"payload format {fmt} is newer than this runner understands ({PAYLOAD_FORMAT}): "
            "use an image with the same kinetic version as the client"
        )
    try:
        body = pickle.loads(envelope["body"])
    except Exception as e:
        raise PayloadError(_unpickle_hint(e, str(envelope.get("python", "")), "payload")) from e
    _install_sources(envelope.get("sources") or {})
    return CallPayload(
        fn=body["fn"],
        args=tuple(body.get("args", ())),
        kwargs=dict(body.get("kwargs", {})),
        env=dict(envelope.get("env", {})),
        name=str(envelope.get("name", "")),
        python_version=str(envelope.get("python", "")),
    )


def load_input_payload(data: bytes) -> Any:
    """Unpickle one batch input. Only call this after checking its sha256."""
    try:
        return pickle.loads(data)
    except Exception as e:
        raise PayloadError(_unpickle_hint(e, "", "input payload")) from e


def _unpickle_hint(e: Exception, pickled_with: str, what: str) -> str:
    """Explain an unpickling failure in terms of what the user can change."""
    here = platform.python_version()
    msg = f"cannot unpickle the {what}: {type(e).__name__}: {e}"
    if isinstance(e, ModuleNotFoundError):
        msg += (
            f" — module {e.name!r} is not installed in this image; add it to the image "
            "(pip install) or import it inside the function"
        )
    if pickled_with and pickled_with.rsplit(".", 1)[0] != here.rsplit(".", 1)[0]:
        msg += (
            f" — the client pickled it with Python {pickled_with} but this image has "
            f"Python {here}; functions pickled by value need the same Python minor version"
        )
    return msg


def _install_sources(sources: Mapping[str, str]) -> None:
    """Make shipped sources visible to ``traceback`` without touching the disk.

    linecache entries with no mtime are never invalidated, and files that
    exist here are left to linecache's own loading.
    """
    for filename, text in sources.items():
        if not os.path.exists(filename):
            lines = text.splitlines(keepends=True)
            linecache.cache[filename] = (len(text), None, lines, filename)
