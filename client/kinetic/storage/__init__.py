"""Object storage for Kinetic: ``gs://bucket/path`` and ``file:///abs/path``.

Client, operator and runner exchange payloads, inputs, results and the batch
manifest through object storage rather than through the API server, so large
values never touch etcd. Everything here is a function over a URI; the scheme
picks the backend:

* ``gs://`` goes through google-cloud-storage. When ``STORAGE_EMULATOR_HOST``
  is set (the local cluster sets it for fake-gcs-server) the client is
  anonymous; otherwise it uses Application Default Credentials. The library
  is imported on first use, so file:// users never load it.
* ``file://`` is for the local cluster and for clusters with a shared volume.
  Writes are atomic (temp file + ``os.replace``) and conditional writes take an
  ``fcntl`` lock so two writers can never both win.

Conditional writes use *generations*: every write of an object yields a new
positive integer, ``stat`` returns the current one (``None`` when absent), and
``write_if_generation(uri, data, 0)`` means "only if the object is absent".
This is what lets a runner record a result without ever overwriting a
SUCCEEDED one.

Object paths are used literally (no percent-encoding), and ``..`` segments
are rejected so an id taken from a resource can never escape the root.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from stat import S_ISREG
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from kinetic.storage.base import RETRY_TIMEOUT_ENV as RETRY_TIMEOUT_ENV
from kinetic.storage.base import (
    SUPPORTED_SCHEMES,
    BucketNotFound,
    NotFound,
    PreconditionFailed,
    StorageError,
    StoragePermissionError,
    StorageUnavailable,
    TooLarge,
    bucket_missing,
    describe_error,
    permission_denied,
    precondition_message,
    request_failed,
    require_object_key,
    retry_timeout,
    says_bucket_missing,
    too_large,
    unavailable,
)
from kinetic.storage.base import Parsed as _Parsed
from kinetic.storage.base import emulator_hint as emulator_hint
from kinetic.storage.base import parse_uri as _parse

if TYPE_CHECKING:  # pragma: no cover - typing only; the import is heavy
    from google.cloud.storage import Client

__all__ = [
    "SUPPORTED_SCHEMES",
    "StorageError",
    "NotFound",
    "BucketNotFound",
    "PreconditionFailed",
    "StoragePermissionError",
    "StorageUnavailable",
    "TooLarge",
    "read_bytes",
    "read_at_most",
    "read_if_exists",
    "write_bytes",
    "write_if_generation",
    "stat",
    "exists",
    "delete",
    "delete_prefix",
    "list_prefix",
    "join",
    "validate_uri",
]


# Names the file backend uses for its own bookkeeping; never listed as objects.
_FILE_INTERNAL_PREFIX = ".kinetic-"
_FILE_LOCK_NAME = ".kinetic-lock"

# --------------------------------------------------------------------------- URIs


def validate_uri(uri: str) -> str:
    """Return ``uri`` unchanged if it is a supported storage URI, else raise ValueError.

    Lets configuration code reject a bad root (``s3://...``, a relative
    ``file:`` path) at startup instead of at the first upload.
    """
    _parse(uri)
    return uri


def join(root: str, *parts: str) -> str:
    """Join path parts onto a storage root with single slashes.

    ``join("gs://b/kinetic", "jobs", job_id, "payload.pkl")``. A trailing
    slash on the last part is kept so callers can build directory-like
    prefixes (``join(root, "batches", gid, "inputs/")``). Empty, ``.`` and
    ``..`` parts raise ValueError: they almost always mean a missing id.
    """
    _parse(root)
    pieces = [root.rstrip("/") if root.rstrip("/") not in ("gs:", "file:") else root]
    for i, part in enumerate(parts):
        if not isinstance(part, str):
            raise TypeError(f"join() part {i} must be a str, got {type(part).__name__}")
        stripped = part.strip("/")
        if not stripped or any(seg in ("", ".", "..") for seg in stripped.split("/")):
            raise ValueError(f"invalid path part {part!r} for storage root {root!r}")
        pieces.append(stripped)
    joined = "/".join(pieces)
    if parts and parts[-1].endswith("/"):
        joined += "/"
    return joined


# --------------------------------------------------------------------------- backends


class _Backend(Protocol):
    def read(self, p: _Parsed, uri: str) -> bytes: ...
    def read_if_exists(self, p: _Parsed, uri: str) -> tuple[bytes, int] | None: ...
    def read_at_most(self, p: _Parsed, uri: str, limit: int) -> bytes: ...
    def write(self, p: _Parsed, uri: str, data: bytes, generation: int | None) -> int: ...
    def stat(self, p: _Parsed, uri: str) -> int | None: ...
    def delete(self, p: _Parsed, uri: str) -> bool: ...
    def list(self, p: _Parsed, uri: str) -> list[str]: ...


class _FileBackend:
    """Local filesystem. Generations are mtimes in ns, forced to increase per write."""

    def read(self, p: _Parsed, uri: str) -> bytes:
        try:
            with open(p.key, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"no object at {uri}", uri) from None
        except IsADirectoryError:
            raise NotFound(f"no object at {uri} (it is a directory)", uri) from None
        except PermissionError as e:
            raise _file_permission(uri, "read", e) from None

    def read_if_exists(self, p: _Parsed, uri: str) -> tuple[bytes, int] | None:
        # fstat of the open file: writes replace the file, so bytes and generation match.
        try:
            with open(p.key, "rb") as f:
                st = os.fstat(f.fileno())
                if not S_ISREG(st.st_mode):
                    return None
                return f.read(), max(st.st_mtime_ns, 1)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except PermissionError as e:
            raise _file_permission(uri, "read", e) from None

    def read_at_most(self, p: _Parsed, uri: str, limit: int) -> bytes:
        # The size is judged on the open file, so a file swapped in meanwhile is judged too.
        try:
            f = open(p.key, "rb")  # noqa: SIM115 — closed below
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(f"no object at {uri}", uri) from None
        except PermissionError as e:
            raise _file_permission(uri, "read", e) from None
        with f:
            st = os.fstat(f.fileno())
            if not S_ISREG(st.st_mode):
                raise TooLarge(f"{uri} is not a regular file")
            if st.st_size > limit:
                raise too_large(uri, limit, st.st_size)
            return f.read(limit + 1)

    def write(self, p: _Parsed, uri: str, data: bytes, generation: int | None) -> int:
        if p.key.endswith("/"):
            raise ValueError(f"cannot write an object at {uri}: the URI ends with '/'")
        path = p.key
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
        except PermissionError as e:
            raise _file_permission(uri, "create the directory for", e) from None
        except (NotADirectoryError, FileExistsError):
            raise StorageError(
                f"cannot write {uri}: a parent path is a file, not a directory", uri
            ) from None
        with _dir_lock(directory, uri):
            current = _file_generation(path)
            if generation is not None and (current or 0) != generation:
                raise PreconditionFailed(precondition_message(uri, generation, current), uri)
            return _atomic_write(path, data, current, uri)

    def stat(self, p: _Parsed, uri: str) -> int | None:
        return _file_generation(p.key)

    def delete(self, p: _Parsed, uri: str) -> bool:
        try:
            os.unlink(p.key)
            return True
        except FileNotFoundError:
            return False
        except IsADirectoryError:
            return False
        except PermissionError as e:
            raise _file_permission(uri, "delete", e) from None

    def list(self, p: _Parsed, uri: str) -> list[str]:
        prefix = p.key
        base = prefix if prefix.endswith("/") else os.path.dirname(prefix) or "/"
        if not os.path.isdir(base):
            return []
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            # Only descend where the prefix can still match.
            dirnames[:] = sorted(
                d
                for d in dirnames
                if (os.path.join(dirpath, d) + "/").startswith(prefix)
                or prefix.startswith(os.path.join(dirpath, d) + "/")
            )
            for name in sorted(filenames):
                if name.startswith(_FILE_INTERNAL_PREFIX):
                    continue
                full = os.path.join(dirpath, name)
                if full.startswith(prefix):
                    found.append("file://" + full)
        return sorted(found)


def _file_generation(path: str) -> int | None:
    """The object's generation (mtime in ns), or None when absent."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not S_ISREG(st.st_mode):
        return None
    return max(st.st_mtime_ns, 1)


@contextmanager
def _dir_lock(directory: str, uri: str) -> Iterator[None]:
    """Hold an exclusive fcntl lock on ``directory`` for one read-check-write.

    A lock file (rather than the directory itself) keeps this working on NFS,
    where flock is emulated with POSIX locks that need a writable descriptor.
    """
    lock_path = os.path.join(directory, _FILE_LOCK_NAME)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError as e:
        raise _file_permission(uri, "lock the directory of", e) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _atomic_write(path: str, data: bytes, previous: int | None, uri: str) -> int:
    """Write via temp file + fsync + os.replace; return the new generation.

    Readers see either the old or the new bytes, never a torn file. If the
    clock did not move since the previous write, the mtime is bumped so the
    generation still changes; that is what conditional writes rely on.
    """
    import tempfile  # only writers need it; the runner's reads should not pay for it

    fd, tmp = tempfile.mkstemp(prefix=_FILE_INTERNAL_PREFIX + "tmp-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        new_gen = os.stat(tmp).st_mtime_ns
        if previous is not None and new_gen <= previous:
            new_gen = previous + 1
            os.utime(tmp, ns=(new_gen, new_gen))
        os.replace(tmp, path)
    except PermissionError as e:
        _remove_quietly(tmp)
        raise _file_permission(uri, "write", e) from None
    except OSError as e:
        _remove_quietly(tmp)
        if e.errno == errno.ENOSPC:
            raise StorageError(f"cannot write {uri}: no space left on device", uri) from None
        raise StorageError(f"cannot write {uri}: {e.strerror or e}", uri) from None
    return max(new_gen, 1)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _file_permission(uri: str, action: str, e: OSError) -> StoragePermissionError:
    return StoragePermissionError(
        f"permission denied to {action} {uri} ({e.filename}): make the directory writable "
        "by this user or choose another root with KINETIC_STORAGE_ROOT",
        uri,
    )


class _GcsBackend:
    """Google Cloud Storage (or fake-gcs-server via STORAGE_EMULATOR_HOST)."""

    def read(self, p: _Parsed, uri: str) -> bytes:
        require_object_key(p, uri)
        client = _gcs_client()
        with _gcs_errors(uri, p.bucket):
            try:
                return client.bucket(p.bucket).blob(p.key).download_as_bytes(retry=_retry())
            except _google_not_found():
                pass
        self._raise_missing(p, uri)

    def read_if_exists(self, p: _Parsed, uri: str) -> tuple[bytes, int] | None:
        # One request: the download's x-goog-generation header fills blob.generation.
        require_object_key(p, uri)
        blob = _gcs_client().bucket(p.bucket).blob(p.key)
        with _gcs_errors(uri, p.bucket):
            try:
                data = blob.download_as_bytes(retry=_retry())
            except _google_not_found() as e:
                if says_bucket_missing(str(e)):
                    raise bucket_missing(uri, p.bucket) from None
                return None
        if blob.generation is None:  # would make a conditional write on it unsafe
            raise StorageError(
                f"storage answered {uri} without the object's generation "
                "(no x-goog-generation header)",
                uri,
            )
        return data, int(blob.generation)

    def read_at_most(self, p: _Parsed, uri: str, limit: int) -> bytes:
        require_object_key(p, uri)
        with _gcs_errors(uri, p.bucket):
            blob = _gcs_client().bucket(p.bucket).get_blob(p.key, retry=_retry())
            if blob is None:
                self._raise_missing(p, uri)
            if blob.size is not None and blob.size > limit:
                raise too_large(uri, limit, blob.size)
            if blob.size == 0:
                return b""
            # A range one byte past the limit: an object that grew since is seen to.
            return blob.download_as_bytes(start=0, end=limit, retry=_retry())

    def write(self, p: _Parsed, uri: str, data: bytes, generation: int | None) -> int:
        require_object_key(p, uri)
        blob = _gcs_client().bucket(p.bucket).blob(p.key)
        from google.api_core import exceptions as gexc

        with _gcs_errors(uri, p.bucket):
            try:
                blob.upload_from_string(
                    data,
                    content_type="application/octet-stream",
                    if_generation_match=generation,
                    retry=_retry(),
                )
            except gexc.PreconditionFailed:
                current = self.stat(p, uri)
                raise PreconditionFailed(
                    precondition_message(uri, generation or 0, current), uri
                ) from None
            except gexc.NotFound:
                raise bucket_missing(uri, p.bucket) from None
        return int(blob.generation or 0)

    def stat(self, p: _Parsed, uri: str) -> int | None:
        require_object_key(p, uri)
        with _gcs_errors(uri, p.bucket):
            blob = _gcs_client().bucket(p.bucket).get_blob(p.key, retry=_retry())
        return None if blob is None else int(blob.generation)

    def delete(self, p: _Parsed, uri: str) -> bool:
        require_object_key(p, uri)
        with _gcs_errors(uri, p.bucket):
            try:
                _gcs_client().bucket(p.bucket).blob(p.key).delete(retry=_retry())
                return True
            except _google_not_found():
                return False

    def list(self, p: _Parsed, uri: str) -> list[str]:
        with _gcs_errors(uri, p.bucket):
            try:
                blobs = _gcs_client().list_blobs(p.bucket, prefix=p.key or None, retry=_retry())
                return sorted(f"gs://{p.bucket}/{b.name}" for b in blobs)
            except _google_not_found():
                pass
        raise bucket_missing(uri, p.bucket)

    def _raise_missing(self, p: _Parsed, uri: str) -> NoReturn:
        """Tell a missing object from a missing bucket: the fixes differ."""
        with _gcs_errors(uri, p.bucket):
            bucket_exists = _gcs_client().lookup_bucket(p.bucket, retry=_retry()) is not None
        if not bucket_exists:
            raise bucket_missing(uri, p.bucket)
        raise NotFound(f"no object at {uri}", uri)


def _google_not_found() -> type[Exception]:
    from google.api_core.exceptions import NotFound as GoogleNotFound

    return GoogleNotFound


def _retry() -> Any:
    """The library's default retry for transient errors, bounded by our timeout."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_timeout(retry_timeout())


@contextmanager
def _gcs_errors(uri: str, bucket: str) -> Iterator[None]:
    """Translate google/requests exceptions into StorageError with a fix in the message."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    try:
        yield
    except StorageError:
        raise
    except (gexc.Forbidden, gexc.Unauthorized) as e:
        raise permission_denied(uri, bucket, describe_error(e)) from None
    except auth_exc.DefaultCredentialsError:
        raise StoragePermissionError(
            f"no Google Cloud credentials to access {uri} — run "
            "`gcloud auth application-default login`, or set STORAGE_EMULATOR_HOST "
            "to use a local fake-gcs-server",
            uri,
        ) from None
    except gexc.RetryError as e:
        raise unavailable(uri, describe_error(e.cause or e), retried=True) from None
    except gexc.GoogleAPICallError as e:
        if isinstance(e, gexc.ServerError):
            raise StorageUnavailable(f"storage error for {uri}: {describe_error(e)}", uri) from None
        raise request_failed(uri, describe_error(e)) from None
    except (OSError, auth_exc.TransportError) as e:
        # requests' ConnectionError is an OSError.
        raise unavailable(uri, describe_error(e), retried=False) from None


def _gcs_client() -> Client:
    """The cached storage client for the current emulator/project settings."""
    return _cached_gcs_client(
        os.environ.get("STORAGE_EMULATOR_HOST") or None,
        os.environ.get("KINETIC_GCS_PROJECT") or os.environ.get("GOOGLE_CLOUD_PROJECT") or None,
    )


@functools.lru_cache(maxsize=4)
def _cached_gcs_client(emulator_host: str | None, project: str | None) -> Client:
    """Build a client once per (emulator, project): creating one is slow.

    Keyed on the settings so a process that changes STORAGE_EMULATOR_HOST
    (tests, the local cluster) never talks to a stale endpoint.
    """
    from google.cloud import storage as gcs

    if emulator_host:
        from google.auth.credentials import AnonymousCredentials

        return gcs.Client(project=project or "kinetic-local", credentials=AnonymousCredentials())
    from google.auth import exceptions as auth_exc

    try:
        # project=None means "no project": object reads and writes don't need one.
        return gcs.Client(project=project)
    except auth_exc.DefaultCredentialsError:
        raise StoragePermissionError(
            "no Google Cloud credentials for gs:// storage — run "
            "`gcloud auth application-default login`, or set STORAGE_EMULATOR_HOST "
            "to use a local fake-gcs-server"
        ) from None


_BACKENDS: dict[str, _Backend] = {"gs": _GcsBackend(), "file": _FileBackend()}


class _LeanOnFirstUse:
    """Stands in for the gs:// backend until the first gs:// call, then picks it.

    So a Pod whose storage is file:// never imports the HTTP client at all.
    """

    def resolve(self) -> _Backend:
        # Lazy: only a process that asked for it (use_lean_gcs) and then touched gs://
        # pays for importing http.client and the lean backend; file:// never does.
        from kinetic.storage.gcs_http import lean_backend

        lean = lean_backend(os.environ)
        chosen: _Backend = lean if lean is not None and lean.has_credentials() else _GcsBackend()
        _BACKENDS["gs"] = chosen
        return chosen

    def __getattr__(self, name: str) -> Any:
        return getattr(self.resolve(), name)


def use_lean_gcs() -> None:
    """Route gs:// through `kinetic.storage.gcs_http` in this process where its credentials allow.

    For Pods, where importing google-cloud-storage is most of the cost of a
    short function, and for the operator, which writes a log archive per
    finished Pod. The choice is made at the first gs:// call.
    """
    _BACKENDS["gs"] = _LeanOnFirstUse()


# Called before every write and delete (`fence_writes`); process-wide, as the backend is.
_WRITE_FENCES: list[Callable[[], None]] = []


def fence_writes(fence: Callable[[], None] | None) -> None:
    """Call ``fence`` before every write and delete this process makes; it raises (or
    exits) to stop one. None removes it.

    The operator's elected reconciler passes the leader Lease's check
    (`Elector.require`), so a replica that may have been replaced writes no
    more to storage (manifests, accepted specs, stop orders, log archives)
    than it writes to the API server.
    """
    _WRITE_FENCES[:] = [] if fence is None else [fence]


def _before_write() -> None:
    for fence in _WRITE_FENCES:
        fence()


def _dispatch(uri: str) -> tuple[_Backend, _Parsed]:
    p = _parse(uri)
    return _BACKENDS[p.scheme], p


# --------------------------------------------------------------------------- public API


def read_bytes(uri: str) -> bytes:
    """Return the object's bytes; raise NotFound (or BucketNotFound) when missing."""
    backend, p = _dispatch(uri)
    return backend.read(p, uri)


def read_if_exists(uri: str) -> tuple[bytes, int] | None:
    """The object's bytes and their generation, or None when it does not exist.

    One round trip, for callers that expect "absent" as a normal answer (the
    runner checking for an earlier result): unlike `read_bytes` it does not
    spend a second call telling a missing bucket from a missing object. On
    gs:// a missing bucket still raises BucketNotFound when the 404 says so
    (GCS does; fake-gcs-server does not, and there the answer is None).
    Pass the generation to `write_if_generation` to replace exactly what was read.
    """
    backend, p = _dispatch(uri)
    return backend.read_if_exists(p, uri)


def read_at_most(uri: str, limit: int) -> bytes:
    """The object's bytes if it holds at most ``limit`` of them; else `TooLarge`.

    For whatever a Pod or a bucket writer can write (reports, manifests,
    specs): never more than ``limit + 1`` bytes are held, whatever the object
    holds, so a 2 GB object costs a refusal, not the reader's memory. Raises
    NotFound when it does not exist, like `read_bytes`.
    """
    backend, p = _dispatch(uri)
    data = backend.read_at_most(p, uri, limit)
    if len(data) > limit:
        raise too_large(uri, limit)
    return data


def write_bytes(uri: str, data: bytes) -> int:
    """Write (create or replace) the object unconditionally; return its new generation."""
    return write_if_generation(uri, data, None)


def write_if_generation(uri: str, data: bytes, generation: int | None) -> int:
    """Write only if the object is at ``generation``; return the new generation.

    ``generation=0`` means "only if absent", ``None`` means unconditional.
    Raises PreconditionFailed when another writer got there first, so exactly
    one of several racing writers wins.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"write data for {uri} must be bytes, got {type(data).__name__}")
    if generation is not None and (not isinstance(generation, int) or generation < 0):
        raise ValueError(f"generation must be a non-negative int or None, got {generation!r}")
    backend, p = _dispatch(uri)
    _before_write()
    return backend.write(p, uri, bytes(data), generation)


def stat(uri: str) -> int | None:
    """The object's current generation, or None when it does not exist."""
    backend, p = _dispatch(uri)
    return backend.stat(p, uri)


def exists(uri: str) -> bool:
    """Whether the object exists."""
    return stat(uri) is not None


def delete(uri: str) -> bool:
    """Delete the object; a missing one is fine. Returns whether something was deleted."""
    backend, p = _dispatch(uri)
    _before_write()
    return backend.delete(p, uri)


def list_prefix(uri_prefix: str) -> list[str]:
    """Full URIs of all objects whose path starts with ``uri_prefix``, sorted.

    The prefix is a string prefix, as in GCS: end it with ``/`` to mean a
    folder (``.../jobs/abc/`` does not match ``.../jobs/abcd/x``).
    """
    backend, p = _dispatch(uri_prefix)
    return backend.list(p, uri_prefix)


def delete_prefix(uri_prefix: str) -> int:
    """Delete every object under ``uri_prefix``; return how many were deleted.

    For file:// roots, directories left empty under the prefix are removed too.
    An empty bucket prefix (``gs://bucket`` or ``gs://bucket/``) is refused so
    a missing id can never wipe a whole bucket.
    """
    backend, p = _dispatch(uri_prefix)
    if p.key.strip("/") == "":
        raise ValueError(f"refusing to delete everything under {uri_prefix!r}: give a sub-path")
    deleted = sum(1 for uri in backend.list(p, uri_prefix) if delete(uri))
    if p.scheme == "file":
        _prune_file_dirs(p.key)
    return deleted


def _prune_file_dirs(prefix: str) -> None:
    """Remove directories under a file:// prefix that hold only our bookkeeping files."""
    base = prefix if prefix.endswith("/") else os.path.dirname(prefix)
    if not os.path.isdir(base):
        return
    for dirpath, _dirnames, _filenames in os.walk(base, topdown=False):
        if not (dirpath + "/").startswith(prefix):
            continue
        try:
            entries = os.listdir(dirpath)
        except OSError:
            continue
        if all(e.startswith(_FILE_INTERNAL_PREFIX) for e in entries):
            for e in entries:
                _remove_quietly(os.path.join(dirpath, e))
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
