"""`kinetic.Data` on the laptop: checking what it names, hashing local files, finding it in
a call's arguments and in ``volumes=``.

Only the submitting process uses these: the Pod receives a `kinetic.model.data.DataRef`
instead (`kinetic.api.staging` makes one of each `Data`), and what both sides
must agree on (the content hash's definition, the data manifest, the volume
rules) stays in `kinetic.model.data`. Walking a local folder to hash it is
here; the Pod checks each file it downloads with the same `file_digest`.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat as stat_module
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kinetic.model import limits
from kinetic.model.data import (
    GCS,
    HF,
    MAX_WALK_DEPTH,
    DataError,
    LocalFile,
    combined_hash,
    file_digest,
    fuse_problem,
)

__all__ = ["Data", "call_data", "check_volumes", "content_hash_of", "inputs_data", "walk_data"]

_HASH_WORKERS = 8


class Data:
    """A reference to data that must be on the pod: local path, ``gs://`` URI or ``hf://``.

    ``gs://bucket/prefix/`` (trailing slash) is a directory, ``gs://bucket/obj``
    one object. ``fuse=True`` asks for a lazy, read-only GCS FUSE mount instead
    of a download (Cloud Storage only: refused here for ``hf://``; local data
    needs a ``gs://`` storage root, checked at submission with the driver);
    ``hf_trust_remote_code`` lets a Hugging Face dataset run its loading script.
    """

    def __init__(self, path: str, fuse: bool = False, hf_trust_remote_code: bool = False) -> None:
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str) or not path.strip():
            raise DataError(f"Data(path): expected a local path, gs:// or hf:// URI, got {path!r}")
        if not isinstance(fuse, bool) or not isinstance(hf_trust_remote_code, bool):
            raise DataError("Data(fuse=..., hf_trust_remote_code=...) take True or False")
        self._fuse = fuse
        self._hf_trust_remote_code = hf_trust_remote_code
        if path.startswith(GCS):
            bucket, _, _key = path[len(GCS) :].partition("/")
            if not bucket:
                raise DataError(f"Data({path!r}): a gs:// URI needs a bucket, gs://BUCKET/path")
            if fuse and (why := fuse_problem(path)) is not None:
                raise DataError(f"Data({path!r}, fuse=True): {why}")
            self._path = path
        elif path.startswith(HF):
            if not path[len(HF) :].split("?", 1)[0].strip("/"):
                raise DataError(f"Data({path!r}): name the dataset, e.g. hf://imdb?split=train")
            if fuse:
                raise DataError(
                    f"Data({path!r}, fuse=True): a Hugging Face dataset is always downloaded "
                    "into the pod; fuse=True mounts Cloud Storage (gs://) only. Drop fuse=True."
                )
            self._path = path
        elif "://" in path:
            scheme = path.split("://", 1)[0]
            raise DataError(
                f"Data({path!r}): scheme {scheme}:// is not supported; use a local path, "
                "gs://bucket/path or hf://dataset"
            )
        else:
            local = os.path.abspath(os.path.expanduser(path))
            if not os.path.exists(local):
                raise DataError(f"Data({path!r}): no such file or directory ({local})")
            self._path = local

    path = property(lambda self: self._path, doc="The local absolute path or the URI.")
    fuse = property(lambda self: self._fuse, doc="Mount lazily through GCS FUSE.")
    hf_trust_remote_code = property(
        lambda self: self._hf_trust_remote_code, doc="Let a hf:// dataset run its own code."
    )

    @property
    def is_gcs(self) -> bool:
        return self._path.startswith(GCS)

    @property
    def is_hf(self) -> bool:
        return self._path.startswith(HF)

    @property
    def is_local(self) -> bool:
        return not (self.is_gcs or self.is_hf)

    @property
    def is_dir(self) -> bool:
        """A directory (local), a prefix (gs:// with a trailing slash) or a saved dataset (hf)."""
        if self.is_gcs:
            return self._path.endswith("/")
        if self.is_hf:
            return True
        return os.path.isdir(self._path)

    def content_hash(self) -> str:
        """SHA-256 of the local data (see `content_hash_of`); refused for gs:// and hf://."""
        if not self.is_local:
            raise DataError(f"Data({self._path!r}).content_hash(): only local data is hashed")
        return content_hash_of(self._path)[0]

    def __repr__(self) -> str:
        extra = ", fuse=True" if self._fuse else ""
        extra += ", hf_trust_remote_code=True" if self._hf_trust_remote_code else ""
        return f"Data({self._path!r}{extra})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Data) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[str, bool, bool]:
        return (self._path, self._fuse, self._hf_trust_remote_code)


# --------------------------------------------------------------------------- hashing local files


def _walk_files(root: str) -> Iterator[tuple[str, str]]:
    """(relpath, path) of every file under ``root`` in sorted depth-first order.

    Symlinked directories are not entered (a cycle cannot loop); symlinked
    files are followed, so the hash is of the bytes the pod will see.
    """
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            yield rel, path
        # Symlinks to directories show up in dirnames and are skipped by followlinks=False.


def _hash_file(rel: str, path: str) -> LocalFile:
    per_file = file_digest(rel)
    contents = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                per_file.update(chunk)
                contents.update(chunk)
                size += len(chunk)
    except OSError as e:
        raise DataError(f"cannot read {path} for Data: {e.strerror or e}") from e
    return LocalFile(rel, path, per_file.hexdigest(), contents.hexdigest(), size)


def content_hash_of(path: str) -> tuple[str, list[LocalFile]]:
    """The content hash of a local file or directory, and its files.

    Each file is hashed on its own (SHA-256 of its relative path, a NUL and
    its bytes), in parallel; the digests are then combined in sorted walk
    order after a ``dir:`` or ``file:`` prefix, so a file and a directory
    holding only that file never collide. Non-regular files (sockets, FIFOs)
    are refused rather than hashed.
    """
    is_dir = os.path.isdir(path)
    if is_dir:
        entries = list(_walk_files(path))
    else:
        entries = [(os.path.basename(path), path)]
    for _rel, p in entries:
        try:
            mode = os.stat(p).st_mode
        except OSError as e:
            raise DataError(f"cannot read {p} for Data: {e.strerror or e}") from e
        if not stat_module.S_ISREG(mode):
            raise DataError(f"{p} is not a regular file; Data can only ship files and folders")
    with ThreadPoolExecutor(max_workers=_HASH_WORKERS) as pool:
        files = list(pool.map(lambda e: _hash_file(*e), entries))
    return combined_hash(is_dir, (f.digest for f in files)), files


# --------------------------------------------------------------------------- finding Data


def walk_data(value: Any, label: str, depth: int = 0) -> Iterator[tuple[str, Data]]:
    """Each `Data` inside ``value`` (plain lists, tuples and dicts, as `substitute` sees
    them), with where it is: ``label``, then ``[i]`` or ``[key]`` per level."""
    if isinstance(value, Data):
        yield label, value
        return
    if depth >= MAX_WALK_DEPTH:
        return
    t = type(value)
    if t is list or t is tuple:
        for i, v in enumerate(value):
            yield from walk_data(v, f"{label}[{i}]", depth + 1)
    elif t is dict:
        for k, v in value.items():
            yield from walk_data(v, f"{label}[{k!r}]", depth + 1)


def call_data(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[str, Data]]:
    """The `Data` among a call's arguments, each named: ``argument 0``, ``argument 'ds'``."""
    found = [d for i, a in enumerate(args) for d in walk_data(a, f"argument {i}")]
    return found + [d for k, a in kwargs.items() for d in walk_data(a, f"argument {k!r}")]


def inputs_data(items: Sequence[Any]) -> list[tuple[str, Data]]:
    """The `Data` among a batch's inputs, each named: ``input 3``, ``input 3['ds']``."""
    return [d for i, item in enumerate(items) for d in walk_data(item, f"input {i}")]


def check_volumes(volumes: Any) -> dict[str, Data]:
    """``volumes=`` as given to `kinetic.run`, checked before anything is uploaded.

    Keys are absolute, normalised mount paths (not ``/``, no ``..``, no two
    nested in each other); values are `Data`. Raises `DataError` naming the
    entry and the fix.
    """
    if volumes is None:
        return {}
    if not isinstance(volumes, Mapping):
        raise DataError(
            f"volumes must be a dict of mount path -> kinetic.Data, got {type(volumes).__name__}"
        )
    if len(volumes) > limits.MAX_VOLUMES:
        raise DataError(f"volumes: {len(volumes)} entries, at most {limits.MAX_VOLUMES} allowed")
    checked: dict[str, Data] = {}
    for path, value in volumes.items():
        problem = limits.mount_path_problem(path)
        if problem is not None:
            raise DataError(f"volumes[{path!r}]: {problem}")
        if not isinstance(value, Data):
            raise DataError(
                f"volumes[{path!r}]: expected a kinetic.Data, got {type(value).__name__}; "
                f"wrap it: volumes={{{path!r}: kinetic.Data(...)}}"
            )
        checked[posixpath.normpath(path)] = value
    nested = limits.nested_mount_paths(list(checked))
    if nested:
        raise DataError(f"volumes: {nested}")
    return checked
