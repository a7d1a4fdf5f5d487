"""What every storage backend shares: URIs, errors, and the gs:// backends' helpers.

`kinetic.storage` picks a backend by a URI's scheme; its two gs:// backends
(google-cloud-storage there, the standard library's HTTP client in
`kinetic.storage.gcs_http`) must parse URIs, fail with the same errors and
say the same sentences call for call. All of that lives here, below both:
``kinetic.storage`` re-exports it, and ``gcs_http`` imports only this
module, so neither backend imports the other and nothing imports its parent
package back. Only the standard library is imported: the runner pays for it
at start-up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "SUPPORTED_SCHEMES",
    "RETRY_TIMEOUT_ENV",
    "StorageError",
    "NotFound",
    "BucketNotFound",
    "PreconditionFailed",
    "StoragePermissionError",
    "StorageUnavailable",
    "TooLarge",
    "Parsed",
    "parse_uri",
    "too_large",
    "precondition_message",
    "require_object_key",
    "says_bucket_missing",
    "permission_denied",
    "unavailable",
    "request_failed",
    "bucket_missing",
    "retry_timeout",
    "emulator_hint",
    "describe_error",
]

SUPPORTED_SCHEMES = ("gs://", "file://")

# Env var that bounds how long gs:// calls retry transient errors (seconds).
RETRY_TIMEOUT_ENV = "KINETIC_STORAGE_RETRY_TIMEOUT"
_DEFAULT_RETRY_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------- errors


class StorageError(Exception):
    """Base class for every storage failure; ``uri`` names the object involved."""

    def __init__(self, message: str, uri: str = "") -> None:
        super().__init__(message)
        self.uri = uri


class NotFound(StorageError):
    """The object does not exist."""


class BucketNotFound(StorageError):
    """The gs:// bucket does not exist (file:// roots are created on first write)."""


class PreconditionFailed(StorageError):
    """A conditional write lost: the object's generation was not the expected one."""


class StoragePermissionError(StorageError):
    """The caller's credentials may not perform the operation."""


class TooLarge(ValueError):
    """The object holds more bytes than the caller will read (or is not a regular file).

    A ValueError, not a StorageError: retrying cannot help, the object is refused.
    """


def too_large(uri: str, limit: int, size: int | None = None) -> TooLarge:
    """The refusal of ``uri``, with its size when known."""
    held = f" ({size:,} bytes)" if size is not None else ""
    return TooLarge(f"{uri}{held} is larger than {limit:,} bytes, the most it may hold here")


class StorageUnavailable(StorageError):
    """Storage could not be reached or answered with a server error."""


def precondition_message(uri: str, expected: int, current: int | None) -> str:
    want = "absent" if expected == 0 else f"at generation {expected}"
    have = "absent" if current is None else f"at generation {current}"
    return f"conditional write to {uri} lost: expected the object {want}, but it is {have}"


# Public as ``kinetic.storage.<Name>``: the name tracebacks, result messages and
# pickles (by reference) have always carried, which older readers can import.
for _error in (
    StorageError,
    NotFound,
    BucketNotFound,
    PreconditionFailed,
    StoragePermissionError,
    StorageUnavailable,
    TooLarge,
):
    _error.__module__ = "kinetic.storage"
del _error


# --------------------------------------------------------------------------- URIs


@dataclass(frozen=True)
class Parsed:
    """A URI split into scheme, container (bucket; empty for file://) and key."""

    scheme: str
    bucket: str
    key: str


def parse_uri(uri: str) -> Parsed:
    """Split and validate ``uri``; raise ValueError naming what is accepted."""
    if not isinstance(uri, str):
        raise TypeError(f"storage URI must be a str, got {type(uri).__name__}")
    if uri.startswith("gs://"):
        rest = uri[len("gs://") :]
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise ValueError(f"invalid storage URI {uri!r}: expected gs://<bucket>/<path>")
        _check_segments(uri, key)
        return Parsed("gs", bucket, key)
    if uri.startswith("file://"):
        rest = uri[len("file://") :]
        if rest.startswith("localhost/"):
            rest = rest[len("localhost") :]
        if not rest.startswith("/"):
            raise ValueError(
                f"invalid storage URI {uri!r}: file URIs must hold an absolute path, "
                "like file:///data/kinetic"
            )
        _check_segments(uri, rest)
        return Parsed("file", "", rest)
    raise ValueError(
        f"unsupported storage URI {uri!r}: use one of {', '.join(SUPPORTED_SCHEMES)} "
        "(for example gs://my-bucket/kinetic or file:///shared/kinetic)"
    )


def _check_segments(uri: str, path: str) -> None:
    """Reject ``.`` and ``..`` segments, which would let a name escape its root."""
    if any(seg in (".", "..") for seg in path.split("/")):
        raise ValueError(f"invalid storage URI {uri!r}: '.' and '..' path segments are not allowed")


# --------------------------------------------------------------------------- gs:// helpers


def require_object_key(p: Parsed, uri: str) -> None:
    if not p.key or p.key.endswith("/"):
        raise ValueError(f"{uri!r} names a bucket or folder, not an object")


def says_bucket_missing(error_text: str) -> bool:
    """Whether a 404's text names the bucket, not the object, as missing.

    GCS says so ("The specified bucket does not exist."); fake-gcs-server
    answers a bare "Not Found" either way, so there the answer is False.
    """
    return "specified bucket does not exist" in error_text.lower()


def permission_denied(uri: str, bucket: str, detail: str) -> StoragePermissionError:
    return StoragePermissionError(
        f"permission denied for {uri}: {detail} — grant this identity "
        f"roles/storage.objectAdmin on gs://{bucket}",
        uri,
    )


def unavailable(uri: str, detail: str, *, retried: bool) -> StorageUnavailable:
    """Storage did not answer usably: after retrying transient errors, or not at all."""
    if retried:
        text = f"gave up reaching storage for {uri} after retrying ({detail}) — check the network"
    else:
        text = f"cannot reach storage for {uri}: {detail}"
    return StorageUnavailable(text + emulator_hint(), uri)


def request_failed(uri: str, detail: str) -> StorageError:
    return StorageError(f"storage request for {uri} failed: {detail}", uri)


def bucket_missing(uri: str, bucket: str) -> BucketNotFound:
    return BucketNotFound(
        f"bucket {bucket!r} does not exist (needed for {uri}) — create it "
        f"(gcloud storage buckets create gs://{bucket}) or set KINETIC_STORAGE_ROOT "
        "to a bucket that exists",
        uri,
    )


def retry_timeout() -> float:
    """How long gs:// calls retry transient errors, in seconds (``RETRY_TIMEOUT_ENV``)."""
    raw = os.environ.get(RETRY_TIMEOUT_ENV, "")
    try:
        return float(raw) if raw else _DEFAULT_RETRY_TIMEOUT_S
    except ValueError:
        raise ValueError(f"{RETRY_TIMEOUT_ENV}={raw!r} is not a number of seconds") from None


def emulator_hint() -> str:
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if host:
        return f"; STORAGE_EMULATOR_HOST={host} — is fake-gcs-server running there?"
    return ""


def describe_error(e: BaseException) -> str:
    """An error's first line (or its type), cut to fit a one-line message."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:300]
