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

The `Data` class itself, hashing a local file or folder (walking it) and
finding `Data` among a call's arguments are the laptop's alone:
`kinetic.api.data`. What both sides must agree on stays here: the content
hash's definition (`file_digest`, `combined_hash`), the manifest, `DataRef`,
and the volume and fuse rules the operator checks too.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinetic.model import resources as r

__all__ = [
    "DataRef",
    "DataError",
    "FuseSource",
    "GCSFUSE_DRIVER",
    "volume_problems",
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
MAX_WALK_DEPTH = 32  # containers searched for Data inside a call's arguments


class DataError(ValueError):
    """A `Data` or a ``volumes=`` entry that cannot be used; the message names the fix."""


# --------------------------------------------------------------------------- hashing


@dataclass(frozen=True)
class LocalFile:
    """One file of local data: path relative to the Data (``/``-separated) and its hashes."""

    rel: str
    path: str
    digest: str  # sha256(rel + "\0" + contents): the content_hash ingredient
    sha256: str  # sha256(contents): what the pod verifies after download
    size: int


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
        problem = _file_entry_problem(i, entry)
        if problem is not None:
            raise refuse(problem)
        files.append(ManifestFile(entry["path"], entry["size"], entry["digest"]))
    return DataManifest(doc["kind"] == "dir", tuple(files))


def _file_entry_problem(i: int, entry: Any) -> str | None:
    """What makes a manifest's ``files[i]`` unusable (no path, size or digest), or None."""
    if not isinstance(entry, dict):
        return f"files[{i}] is not an object"
    path, size, digest = entry.get("path"), entry.get("size"), entry.get("digest")
    if not isinstance(path, str) or not path:
        return f"files[{i}] has no path"
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return f"files[{i}] ({path}) has no size"
    if not isinstance(digest, str) or len(digest) != 64 or not _HEX64.issuperset(digest):
        return f"files[{i}] ({path}) lists no digest"
    return None


def substitute(value: Any, convert: Callable[[Any], Any], kind: type, depth: int = 0) -> Any:
    """``value`` with every ``kind`` inside plain lists, tuples and dicts replaced by
    ``convert(it)``; anything else (and anything deeper than 32 levels) is left as is."""
    if isinstance(value, kind):
        return convert(value)
    if depth >= MAX_WALK_DEPTH:
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
