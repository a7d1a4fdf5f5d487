"""Read an object the operator did not write, never more than a known number of bytes.

The operator reads a batch's input hash list (`inputs.sha256URI`) with its
own credentials. Its size follows from the input count, so anything larger
(``file:///dev/zero``, a multi-gigabyte upload) is refused by size before
it is read, instead of being read until the operator runs out of memory.

This uses `kinetic.storage`'s URI parsing and GCS client; a size-capped
read belongs in that module, and this one can go once it has one.
"""

from __future__ import annotations

import os
import stat

from kinetic import storage


class TooLarge(ValueError):
    """The object is larger than the caller will read (or is not a regular file)."""


def read_at_most(uri: str, limit: int) -> bytes:
    """The object's bytes if it holds at most ``limit`` of them; else `TooLarge`.

    Raises `storage.NotFound` when it does not exist, like `storage.read_bytes`.
    """
    parsed = storage._parse(uri)
    if parsed.scheme == "file":
        data = _read_file(uri, parsed.key, limit)
    else:
        data = _read_gcs(uri, parsed.bucket, parsed.key, limit)
    if len(data) > limit:
        raise _too_large(uri, limit)
    return data


def _too_large(uri: str, limit: int) -> TooLarge:
    return TooLarge(f"{uri} is larger than {limit:,} bytes, the most it may hold here")


def _read_file(uri: str, path: str, limit: int) -> bytes:
    try:
        f = open(path, "rb")  # noqa: SIM115 — closed below
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise storage.NotFound(f"no object at {uri}", uri) from None
    with f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TooLarge(f"{uri} is not a regular file")
        if info.st_size > limit:
            raise _too_large(uri, limit)
        return f.read(limit + 1)


def _read_gcs(uri: str, bucket: str, key: str, limit: int) -> bytes:
    client = storage._gcs_client()
    with storage._gcs_errors(uri, bucket):
        blob = client.bucket(bucket).get_blob(key, retry=storage._retry())
        if blob is None:
            raise storage.NotFound(f"no object at {uri}", uri)
        if blob.size is not None and blob.size > limit:
            raise _too_large(uri, limit)
        # The range ends one byte past the limit, so an object that grew meanwhile shows it.
        return blob.download_as_bytes(start=0, end=limit, retry=storage._retry())
