"""Pod side of `kinetic.Data`: bring data from storage into the pod's filesystem.

Used two ways:

* by the runner (function jobs), before the call: each ``spec.volumes``
  entry (``KINETIC_VOLUMES``) is downloaded into its mount path, an emptyDir
  the operator mounted there, and each `kinetic.model.data.DataRef` among the
  call's arguments is downloaded under ``KINETIC_DATA_DIR`` and replaced by
  the local path;
* as an init container (``python -m kinetic.runtime.datafetch``, the runner image)
  for container jobs: it fills the same emptyDirs, which the job's own
  container then mounts at the same paths.

Uploaded data (with a manifest) is verified file by file against the
digest the client recorded, once the manifest itself matches the content
hash in its name, so the function sees exactly the bytes that were on the
laptop, whoever else may write the namespace's storage. What the cluster
cannot provide (a GCS FUSE mount, the ``datasets`` package for ``hf://``)
ends the job with `FetchError`'s sentence, never a traceback.
"""

from __future__ import annotations

import json
import os
import posixpath
import sys
import tempfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from kinetic import storage
from kinetic.model.data import HF, DataError, DataRef, file_digest, read_data_manifest, volume_ref
from kinetic.model.limits import MAX_DATA_MANIFEST_BYTES
from kinetic.runtime.termination import termination_log_path, write_termination_log

VOLUMES_ENV = "KINETIC_VOLUMES"
DATA_DIR_ENV = "KINETIC_DATA_DIR"
EXIT_FAILED = 2

FUSE_UNAVAILABLE = (
    "fuse=True needs a GCS FUSE mount (the GCS FUSE CSI driver, gcsfuse.csi.storage.gke.io), "
    "and this cluster's kinetic operator does not provide one; use kinetic.Data(..., fuse=False) "
    "to download the data into the pod instead"
)
DATASETS_MISSING = (
    "hf:// data needs the Hugging Face `datasets` package in the job's image, and it is not "
    "installed there; use an image that has it (image=...) or add `datasets` to the project's "
    "requirements"
)


class FetchError(Exception):
    """The data could not be brought into the pod; the message says why and what to do."""


def log(message: str) -> None:
    print(f"kinetic data: {message}", flush=True)


# --------------------------------------------------------------------------- one ref


def fetch(ref: DataRef, dest: str) -> str:
    """Put ``ref``'s data in folder ``dest``; return the path the user's code gets.

    A directory's files land under ``dest`` itself; a single file lands as
    ``dest/<name>`` and that file's path is returned.
    """
    if ref.fuse:
        raise FetchError(f"{ref.uri}: {FUSE_UNAVAILABLE}")
    os.makedirs(dest, exist_ok=True)
    if ref.uri.startswith(HF):
        return _fetch_hf(ref, dest)
    try:
        if ref.manifest_uri:
            return _fetch_manifest(ref, dest)
        if ref.is_dir:
            return _fetch_prefix(ref.uri, dest)
        name = ref.name or posixpath.basename(ref.uri.rstrip("/"))
        target = _inside(dest, name, ref.uri)
        _write(target, storage.read_bytes(ref.uri))
        log(f"downloaded {ref.uri} to {target}")
        return target
    except storage.StorageError as e:
        raise FetchError(f"cannot download {ref.uri}: {e}") from e


def _inside(dest: str, rel: str, uri: str) -> str:
    """``dest/rel``, refused when ``rel`` would leave ``dest`` (an object named '../x')."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise FetchError(f"{uri}: object name {rel!r} cannot be a file inside {dest}")
    return os.path.join(dest, *parts)


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _fetch_manifest(ref: DataRef, dest: str) -> str:
    """Download exactly the manifest's files, once the manifest matches its own name, and
    check each file against the digest it lists (`kinetic.model.data.read_data_manifest`)."""
    assert ref.manifest_uri is not None
    try:
        raw = storage.read_at_most(ref.manifest_uri, MAX_DATA_MANIFEST_BYTES)
        manifest = read_data_manifest(raw, ref.manifest_uri)
    except storage.TooLarge as e:
        raise FetchError(
            f"{ref.manifest_uri} is not a kinetic data manifest: {e} (a manifest lists each "
            "file's path and sha256; upload fewer, larger files, e.g. an archive)"
        ) from e
    except DataError as e:
        raise FetchError(str(e)) from e
    prefix = ref.uri if ref.uri.endswith("/") else ref.uri + "/"
    total = 0
    for entry in manifest.files:
        uri = prefix + entry.path
        target = _inside(dest, entry.path, uri)
        data = _read_listed(uri, entry.size)
        digest = file_digest(entry.path)
        digest.update(data)
        if digest.hexdigest() != entry.digest:
            raise FetchError(
                f"{uri} changed in storage since it was uploaded: its digest is "
                f"{digest.hexdigest()}, the manifest {ref.manifest_uri} lists {entry.digest}"
            )
        _write(target, data)
        total += len(data)
    count = len(manifest.files)
    log(f"downloaded and verified {count} file(s), {total} bytes, from {prefix} to {dest}")
    if not manifest.is_dir:
        return os.path.join(dest, ref.name or manifest.files[0].path)
    return dest


def _read_listed(uri: str, size: int) -> bytes:
    """A file a verified manifest lists, read up to the size it lists (more is a change)."""
    try:
        return storage.read_at_most(uri, size)
    except storage.TooLarge:
        raise FetchError(
            f"{uri} changed in storage since it was uploaded: it holds more than the "
            f"{size:,} bytes its manifest lists"
        ) from None


def _fetch_prefix(prefix: str, dest: str) -> str:
    """Every object under a gs:// (or file://) prefix, as files under ``dest``."""
    uris = storage.list_prefix(prefix)
    count = 0
    for uri in uris:
        rel = uri[len(prefix) :]
        if not rel or rel.endswith("/"):
            continue  # a "folder" placeholder object
        _write(_inside(dest, rel, uri), storage.read_bytes(uri))
        count += 1
    if count == 0:
        raise FetchError(
            f"{prefix} holds no objects; check the URI (a prefix ends with '/', a single "
            "object does not)"
        )
    log(f"downloaded {count} object(s) from {prefix} to {dest}")
    return dest


def hf_source(uri: str) -> tuple[str, dict[str, str]]:
    """``hf://owner/name?split=train&config=x`` -> ("owner/name", {"split": "train", ...})."""
    body = uri[len(HF) :]
    name, _, query = body.partition("?")
    return name.strip("/"), dict(parse_qsl(query))


def _fetch_hf(ref: DataRef, dest: str) -> str:
    """Load a Hugging Face dataset and save it under ``dest`` (read it with load_from_disk)."""
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise FetchError(f"{ref.uri}: {DATASETS_MISSING}") from None
    name, params = hf_source(ref.uri)
    try:
        loaded = datasets.load_dataset(
            name,
            params.get("config") or params.get("name"),
            split=params.get("split"),
            trust_remote_code=ref.hf_trust_remote_code,
        )
        loaded.save_to_disk(dest)
    except Exception as e:
        raise FetchError(f"{ref.uri}: loading the dataset failed: {type(e).__name__}: {e}") from e
    log(f"saved Hugging Face dataset {name} to {dest}")
    return dest


# --------------------------------------------------------------------------- volumes and args


def volumes_from_env(environ: Mapping[str, str]) -> list[dict[str, Any]]:
    """``KINETIC_VOLUMES``: the job's ``spec.volumes`` as the operator wrote them."""
    text = environ.get(VOLUMES_ENV, "").strip()
    if not text:
        return []
    try:
        volumes = json.loads(text)
    except ValueError as e:
        raise FetchError(f"{VOLUMES_ENV} is not valid JSON: {e}") from e
    if not isinstance(volumes, list) or not all(
        isinstance(v, dict) and isinstance(v.get("mountPath"), str) and v.get("uri")
        for v in volumes
    ):
        raise FetchError(f"{VOLUMES_ENV} must be a list of {{mountPath, uri}} objects")
    return volumes


def fetch_volumes(volumes: list[dict[str, Any]]) -> None:
    """Fill each volume's mount path with its data, in order."""
    for v in volumes:
        path = fetch(volume_ref(v), v["mountPath"])
        log(f"volume {v['mountPath']} ready ({path})")


class ArgFetcher:
    """Turns the `DataRef` arguments of a call into local paths, each ref fetched once."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._base = environ.get(DATA_DIR_ENV, "").strip() or None
        self._done: dict[DataRef, str] = {}

    def __call__(self, ref: DataRef) -> str:
        if ref not in self._done:
            if self._base is None:
                self._base = tempfile.mkdtemp(prefix="kinetic-data-")
            dest = os.path.join(self._base, str(len(self._done)))
            self._done[ref] = fetch(ref, dest)
        return self._done[ref]


# --------------------------------------------------------------------------- init container


def main() -> int:
    """Entry point of the data init container of container jobs."""
    try:
        fetch_volumes(volumes_from_env(os.environ))
    except FetchError as e:
        log(f"failed: {e}")
        write_termination_log(termination_log_path(os.environ), f"kinetic data: {e}")
        return EXIT_FAILED
    except OSError as e:
        message = f"cannot write the data into the pod: {e}"
        log(f"failed: {message}")
        write_termination_log(termination_log_path(os.environ), f"kinetic data: {message}")
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
