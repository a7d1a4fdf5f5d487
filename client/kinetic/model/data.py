"""`kinetic.Data`: data a remote function needs, from the laptop, a bucket or Hugging Face.

A `Data` names a local file or directory, a ``gs://`` object (no trailing
slash) or prefix (trailing slash), or a ``hf://`` dataset. The user passes it
as a function argument (the function receives a plain local path in the pod)
or mounts it with ``@kinetic.run(volumes={"/data": Data(...)})`` (present at
that path before the call).

Client side, every `Data` becomes a `DataRef` before anything is pickled or
any resource is created (`kinetic.api.staging`):

* local data is uploaded once into the namespace's content-addressed cache
  (`kinetic.model.layout.data_cache_prefix`), keyed by `Data.content_hash`; the
  manifest (each file's path, size, sha256 and digest) is written last and
  marks the entry complete, so a second submission of the same bytes finds
  it and uploads nothing, and the pod verifies every file it downloads
  against it. Anyone who may write the namespace's storage may rewrite a
  manifest, so it is trusted only once it matches its own name
  (`read_data_manifest`): the content hash is made of the files' digests,
  which the manifest lists, so a reader recomputes it from them and refuses
  a manifest whose hash is not the one in its name, and then each file whose
  digest is not the one listed;
* ``gs://`` and ``hf://`` data is referred to where it is. The pod reads it
  with its own credentials (the runner's service account); the operator
  never reads, copies or deletes it. A ``gs://`` URI under the storage
  root must lie in the namespace's own prefix (`volume_problems`), so one
  tenant cannot name another's uploads; anything else in a bucket is the
  bucket owner's IAM decision.

Pod side, `kinetic.runtime.datafetch` turns each `DataRef` (and each volume of
``spec.volumes``) into files. This module imports only the standard
library at load, so the runner can unpickle a `DataRef` cheaply.

``fuse=True`` (GCS FUSE) is not downloaded: the operator mounts the data read-only
with the GCS FUSE CSI driver (`GCSFUSE_DRIVER`) where a download would have
put it. Only Cloud Storage can be mounted: a ``gs://`` URI, or local data when
the storage root it is uploaded to is ``gs://``. A fuse argument becomes a
``spec.volumes`` entry under `FUSE_ARGUMENTS_ROOT` (the operator sees every
mount) and the function receives that path. Where the cluster has no driver,
the client refuses the submission before uploading anything, and the
operator's webhook (or, for what got in without it, the operator) refuses a
spec that asks for one, naming ``spec.volumes[i].fuse`` (`fuse_driver_missing`).

Nothing here is imported by the runner unless a job has data.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat as stat_module
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinetic.model import resources as r

__all__ = [
    "Data",
    "DataRef",
    "DataError",
    "FuseSource",
    "GCSFUSE_DRIVER",
    "volume_problems",
    "check_volumes",
    "fuse_source",
    "fuse_driver_missing",
]

GCS = "gs://"
HF = "hf://"
# The GKE Cloud Storage FUSE CSI driver: its CSIDriver object's name and the driver a
# Pod's csi volume names. Its presence is what decides between mounting and refusing.
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ENABLE = (
    "on GKE, enable the Cloud Storage FUSE CSI driver add-on: gcloud container clusters "
    "update CLUSTER --update-addons GcsFuseCsiDriver=ENABLED"
)
# A fuse=True argument is mounted at <this>/<n> (n: its order among the call's or the
# batch's fuse arguments); the function receives that folder, or the file inside it.
FUSE_ARGUMENTS_ROOT = "/mnt/kinetic-fuse"
_MAX_WALK_DEPTH = 32  # containers searched for Data inside a call's arguments
_HASH_WORKERS = 8


class DataError(ValueError):
    """A `Data` or a ``volumes=`` entry that cannot be used; the message names the fix."""


# --------------------------------------------------------------------------- Data


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


# --------------------------------------------------------------------------- hashing


@dataclass(frozen=True)
class LocalFile:
    """One file of local data: path relative to the Data (``/``-separated) and its hashes."""

    rel: str
    path: str
    digest: str  # sha256(rel + "\0" + contents): the content_hash ingredient
    sha256: str  # sha256(contents): what the pod verifies after download
    size: int


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


def file_digest(rel: str) -> Any:
    """The running hash of one file's digest: SHA-256 of its relative path, a NUL, then
    its bytes (feed them with ``update``)."""
    return hashlib.sha256(rel.encode() + b"\0")


def combined_hash(is_dir: bool, digests: Iterable[str]) -> str:
    """The content hash of data whose files have ``digests`` (hex, in walk order): SHA-256
    of ``dir:`` or ``file:`` and the digests' bytes."""
    total = hashlib.sha256(b"dir:" if is_dir else b"file:")
    for digest in digests:
        total.update(bytes.fromhex(digest))
    return total.hexdigest()


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
    from concurrent.futures import ThreadPoolExecutor  # client side only: the pod never hashes

    with ThreadPoolExecutor(max_workers=_HASH_WORKERS) as pool:
        files = list(pool.map(lambda e: _hash_file(*e), entries))
    return combined_hash(is_dir, (f.digest for f in files)), files


# --------------------------------------------------------------------------- references


@dataclass(frozen=True)
class DataRef:
    """What the pod gets instead of a `Data`: where the bytes are and how to bring them.

    ``uri`` is a gs:// or file:// object or prefix (ending in ``/`` for a
    directory) or a hf:// dataset; ``manifest_uri`` is set for data from the
    upload cache and lists every file's sha256, which the pod checks.
    ``name`` is the file name a single file keeps in the pod.
    """

    uri: str
    is_dir: bool
    manifest_uri: str | None = None
    name: str | None = None
    fuse: bool = False
    hf_trust_remote_code: bool = False


def manifest_bytes(is_dir: bool, files: list[LocalFile]) -> bytes:
    """The cache entry's manifest: kind and each file's path, sha256, digest and size, in
    walk order (the digests make its content hash: `read_data_manifest`)."""
    import json  # at use, like the rest: loading this module must stay cheap for the runner

    doc = {
        "kind": "dir" if is_dir else "file",
        "files": [
            {"path": f.rel, "sha256": f.sha256, "digest": f.digest, "size": f.size} for f in files
        ],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


class ManifestMismatch(DataError):
    """A data manifest that is not what its name says (or not a manifest); names the URI."""


@dataclass(frozen=True)
class ManifestFile:
    """One file a data manifest lists: where it is below the entry, and what it must be."""

    path: str
    size: int
    digest: str  # sha256(path + NUL + bytes): bound to the manifest's name


@dataclass(frozen=True)
class DataManifest:
    """A data manifest that matches its name: its kind and files, in walk order."""

    is_dir: bool
    files: tuple[ManifestFile, ...]


def read_data_manifest(raw: bytes, uri: str) -> DataManifest:
    """The manifest at ``uri`` (``…/data/<sha>.json``) from its bytes, once its files' digests
    make the content hash its name says; else `ManifestMismatch` naming the URI and both.

    A manifest an older client wrote lists no digests: it cannot be checked, so it is
    refused too (the client uploads such an entry again).
    """
    from kinetic.model import layout  # at use: the runner loads this module cheaply

    expected = layout.data_manifest_hash(uri)
    manifest = _parse_manifest(raw, uri)
    got = combined_hash(manifest.is_dir, (f.digest for f in manifest.files))
    if expected is None or got != expected:
        raise ManifestMismatch(
            f"data manifest {uri} does not match its name: its files make content hash "
            f"{got}, its name says {expected or '(no content hash)'}; it was changed in "
            "storage after it was uploaded (submitting the data again uploads it again)"
        )
    return manifest


_HEX64 = frozenset("0123456789abcdef")


def _parse_manifest(raw: bytes, uri: str) -> DataManifest:
    import json

    def refuse(why: str) -> ManifestMismatch:
        return ManifestMismatch(
            f"{uri} is not a kinetic data manifest that can be checked: {why} (submitting the "
            "data again with this client uploads it again)"
        )

    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise refuse(f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") not in ("dir", "file"):
        raise refuse('no "kind" of "dir" or "file"')
    entries = doc.get("files")
    if not isinstance(entries, list) or not entries:
        raise refuse("no files")
    files = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise refuse(f"files[{i}] is not an object")
        path, size, digest = entry.get("path"), entry.get("size"), entry.get("digest")
        if not isinstance(path, str) or not path:
            raise refuse(f"files[{i}] has no path")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise refuse(f"files[{i}] ({path}) has no size")
        if not isinstance(digest, str) or len(digest) != 64 or not _HEX64.issuperset(digest):
            raise refuse(f"files[{i}] ({path}) lists no digest")
        files.append(ManifestFile(path, size, digest))
    return DataManifest(doc["kind"] == "dir", tuple(files))


def substitute(value: Any, convert: Callable[[Any], Any], kind: type, depth: int = 0) -> Any:
    """``value`` with every ``kind`` inside plain lists, tuples and dicts replaced by
    ``convert(it)``; anything else (and anything deeper than 32 levels) is left as is."""
    if isinstance(value, kind):
        return convert(value)
    if depth >= _MAX_WALK_DEPTH:
        return value
    t = type(value)
    if t is list or t is tuple:
        items = [substitute(v, convert, kind, depth + 1) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if t is list else tuple(items)
    if t is dict:
        new = {k: substitute(v, convert, kind, depth + 1) for k, v in value.items()}
        return value if all(new[k] is value[k] for k in value) else new
    return value


def walk_data(value: Any, label: str, depth: int = 0) -> Iterator[tuple[str, Data]]:
    """Each `Data` inside ``value`` (plain lists, tuples and dicts, as `substitute` sees
    them), with where it is: ``label``, then ``[i]`` or ``[key]`` per level."""
    if isinstance(value, Data):
        yield label, value
        return
    if depth >= _MAX_WALK_DEPTH:
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


# --------------------------------------------------------------------------- GCS FUSE


@dataclass(frozen=True)
class FuseSource:
    """What a GCS FUSE mount of a ``gs://`` URI shows.

    A prefix (``gs://b/a/b/``) is mounted as the folder itself (``only-dir`` =
    ``a/b``); a single object (``gs://b/a/f.bin``) by its folder, the file then
    being ``<mount>/f.bin`` (where a download puts it too). ``folder`` is ``""``
    for the bucket's root.
    """

    bucket: str
    folder: str
    file_name: str | None


def fuse_source(uri: str) -> FuseSource:
    """The mount of ``uri``; `DataError` when GCS FUSE cannot show it (see `fuse_problem`)."""
    if not uri.startswith(GCS):
        raise DataError(
            "only Cloud Storage (gs://) data can be mounted through GCS FUSE; drop fuse "
            "to have it downloaded into the pod"
        )
    bucket, _, key = uri[len(GCS) :].partition("/")
    folder, _, name = key.rpartition("/")
    parts = folder.split("/") if folder else []
    if not bucket or any(p in ("", ".", "..") for p in parts) or name in (".", ".."):
        raise DataError(
            f"{uri} has an empty, '.' or '..' path segment, which a mounted folder cannot show"
        )
    if "," in folder:
        raise DataError(
            f"{uri}: the folder {folder!r} has a ',' and cannot be mounted (the driver's mount "
            "options are comma-separated); drop fuse to have it downloaded"
        )
    return FuseSource(bucket=bucket, folder=folder, file_name=name or None)


def fuse_problem(uri: str) -> str | None:
    """Why ``uri`` cannot be mounted through GCS FUSE whatever the cluster has, or None."""
    try:
        fuse_source(uri)
    except DataError as e:
        return str(e)
    return None


def fuse_driver_missing(what: str, drop: str = "drop fuse=True") -> str:
    """The refusal of a fuse mount on a cluster without the driver: what asked, the driver
    it needs and the two fixes. ``what`` names the Data (client) or the field (operator)."""
    return (
        f"{what} asks for a GCS FUSE mount, which needs the GCS FUSE CSI driver "
        f"(CSIDriver {GCSFUSE_DRIVER}), and this cluster does not have it. Install or "
        f"enable the driver ({GCSFUSE_ENABLE}), or {drop} to have the data downloaded "
        "into the pod instead."
    )


# --------------------------------------------------------------------------- volumes


def check_volumes(volumes: Any) -> dict[str, Data]:
    """``volumes=`` as given to `kinetic.run`, checked before anything is uploaded.

    Keys are absolute, normalised mount paths (not ``/``, no ``..``, no two
    nested in each other); values are `Data`. Raises `DataError` naming the
    entry and the fix.
    """
    from kinetic.model import limits  # at use: this module loads only the standard library

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


def volume_spec(mount_path: str, ref: DataRef) -> r.DataVolume:
    """The ``spec.volumes`` entry for a staged volume."""
    from kinetic.model import resources as r  # at use: it loads pydantic, which the runner skips

    return r.DataVolume(
        mount_path=mount_path,
        uri=ref.uri,
        manifest_uri=ref.manifest_uri,
        file_name=ref.name,
        fuse=ref.fuse,
        hf_trust_remote_code=ref.hf_trust_remote_code,
    )


def volume_ref(volume: Mapping[str, Any]) -> DataRef:
    """A ``spec.volumes`` entry (wire form) as the ref the pod fetches."""
    uri = str(volume["uri"])
    return DataRef(
        uri=uri,
        is_dir=uri.endswith("/") or uri.startswith(HF),
        manifest_uri=volume.get("manifestURI"),
        name=volume.get("fileName"),
        fuse=bool(volume.get("fuse")),
        hf_trust_remote_code=bool(volume.get("hfTrustRemoteCode")),
    )


def volume_problems(
    root: str | None, namespace: str, volumes: Sequence[r.DataVolume], at: str
) -> list[str]:
    """Why each volume URI of a spec is refused, if any (the operator's check).

    Storage under the root belongs to namespaces: a URI there, and any
    manifest or file:// URI (a shared filesystem has no per-tenant
    permissions), must be in this namespace's prefix. A gs:// URI outside
    the root is read with the pod's own credentials. A ``fuse`` volume must
    be one GCS FUSE can show (`fuse_problem`); whether the cluster has the
    driver is the operator's to judge when it builds the Pod.
    """
    from kinetic.model import layout  # at use: layout loads pydantic, which the runner skips

    problems: list[str] = []
    for i, v in enumerate(volumes):
        if v.fuse and (why := fuse_problem(v.uri)) is not None:
            problems.append(f"{at}.volumes[{i}].fuse: {why}")
        for key, uri in (("uri", v.uri), ("manifestURI", v.manifest_uri)):
            if not uri or uri.startswith(HF):
                continue
            field = f"{at}.volumes[{i}].{key}"
            why = layout.outside_own_storage(
                root, namespace, uri, field, always=key == "manifestURI"
            )
            if why is not None:
                problems.append(why)
    return problems
