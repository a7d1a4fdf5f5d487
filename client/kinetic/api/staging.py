"""Staging a user's local `Data`: uploading it once into the namespace's content-addressed cache.

Client side only (the pod never uploads data): every `Data` of a submission
becomes a `kinetic.model.data.DataRef` here before anything is pickled or any
resource is created. An entry is keyed by its content hash, so the same bytes
submitted twice cost one read of the manifest and no upload; a manifest that
does not match its name (`kinetic.model.data.read_data_manifest`) is
uploaded again with its files.

``fuse=True`` data is mounted by the operator rather than downloaded by the
pod, so the operator must see it: a fuse argument becomes a ``spec.volumes``
entry at ``FUSE_ARGUMENTS_ROOT/<n>`` and the function receives that path
(the file inside it for a single object). `Stager.check` refuses, before
the first upload, fuse data this cluster cannot mount (`kinetic.api.fuse`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kinetic import storage
from kinetic.api import fuse
from kinetic.api.data import Data, content_hash_of
from kinetic.model import layout
from kinetic.model.data import (
    FUSE_ARGUMENTS_ROOT,
    DataError,
    DataRef,
    LocalFile,
    fuse_source,
    manifest_bytes,
    read_data_manifest,
    substitute,
    volume_spec,
)
from kinetic.model.limits import MAX_DATA_MANIFEST_BYTES

if TYPE_CHECKING:
    from kinetic.model import resources as r

log = logging.getLogger("kinetic")

_UPLOAD_WORKERS = 8


def stage(data: Data, root: str, namespace: str) -> DataRef:
    """Upload local data into the namespace's cache unless it is there; return its ref.

    An entry is complete once its manifest exists (written after every file),
    so an interrupted upload is simply redone, and a second submission of the
    same bytes costs one existence check and no upload.
    """

    if not data.is_local:
        return DataRef(
            uri=data.path,
            is_dir=data.is_dir,
            fuse=data.fuse,
            hf_trust_remote_code=data.hf_trust_remote_code,
        )
    content_hash, files = content_hash_of(data.path)
    prefix = layout.data_cache_prefix(root, namespace, content_hash)
    manifest_uri = layout.data_manifest_uri(root, namespace, content_hash)
    if not _complete(manifest_uri):

        def upload(f: LocalFile) -> None:
            with open(f.path, "rb") as fh:
                storage.write_bytes(prefix + f.rel, fh.read())

        with ThreadPoolExecutor(max_workers=_UPLOAD_WORKERS) as pool:
            list(pool.map(upload, files))
        storage.write_bytes(manifest_uri, manifest_bytes(data.is_dir, files))
    is_dir = os.path.isdir(data.path)
    return DataRef(
        uri=prefix,
        is_dir=is_dir,
        manifest_uri=manifest_uri,
        name=None if is_dir else os.path.basename(data.path),
        fuse=data.fuse,
        hf_trust_remote_code=data.hf_trust_remote_code,
    )


def _complete(manifest_uri: str) -> bool:
    """Whether the cache entry is there, as its name says: its manifest exists and matches
    the content hash in its name. One that does not (changed in storage, or written by an
    older client without digests) is uploaded again: the pod would refuse it."""
    try:
        read_data_manifest(
            storage.read_at_most(manifest_uri, MAX_DATA_MANIFEST_BYTES), manifest_uri
        )
    except storage.NotFound:
        return False
    except (DataError, storage.TooLarge) as exc:
        log.warning("%s; uploading the data again", exc)
        return False
    return True


def fuse_path(mount_path: str, ref: DataRef) -> str:
    """Where a mounted `Data` is in the pod: the mount, or the single file inside it."""
    name = ref.name if ref.manifest_uri else fuse_source(ref.uri).file_name
    return f"{mount_path}/{name}" if name else mount_path


class Stager:
    """Stages each distinct `Data` of one submission once (a batch may repeat it per input).

    ``driver`` tells whether the cluster has the GCS FUSE CSI driver (None:
    cannot tell); it is asked only by `check`, and only for fuse data.
    """

    def __init__(
        self,
        root: str,
        namespace: str,
        context: str | None = None,
        driver: Callable[[str | None], bool | None] | None = None,
    ) -> None:
        self.root = root
        self.namespace = namespace
        self.context = context
        self._driver = driver
        self._driver_asked = False
        self._driver_answer: bool | None = None
        self._cache: dict[Data, DataRef] = {}
        self._mounted: dict[Data, tuple[r.DataVolume, str]] = {}  # fuse arguments

    def check(self, volumes: Mapping[str, Data], arguments: Sequence[tuple[str, Data]]) -> None:
        """Refuse, before anything is uploaded, fuse data this cluster cannot mount.

        ``arguments`` are the call's (or the batch inputs') `Data`, each with
        where it is (`kinetic.api.data.call_data`, `inputs_data`). Raises
        `kinetic.api.fuse.FuseUnavailable`.
        """
        if not any(d.fuse for d in (*volumes.values(), *(d for _w, d in arguments))):
            return
        problem = fuse.refusal(volumes, arguments, self.root, self._driver_present())
        if problem is not None:
            raise fuse.FuseUnavailable(problem)

    def _driver_present(self) -> bool | None:
        """Whether the cluster has the GCS FUSE driver, asked once per submission (a batch
        checks its inputs one by one)."""
        if not self._driver_asked:
            self._driver_answer = (self._driver or fuse.driver_present)(self.context)
            self._driver_asked = True
        return self._driver_answer

    def __call__(self, d: Data) -> DataRef:
        if d not in self._cache:
            self._cache[d] = stage(d, self.root, self.namespace)
        return self._cache[d]

    def argument(self, d: Data) -> DataRef | str:
        """An argument's `Data` as the pod gets it: a ref to fetch, or a fuse mount's path."""
        ref = self(d)
        if not d.fuse:
            return ref
        if d not in self._mounted:
            mount_path = f"{FUSE_ARGUMENTS_ROOT}/{len(self._mounted)}"
            self._mounted[d] = (volume_spec(mount_path, ref), fuse_path(mount_path, ref))
        return self._mounted[d][1]

    def value(self, value: Any) -> Any:
        """``value`` with each `Data` inside (lists, tuples, dicts) replaced by its ref
        (or, for fuse data, by the path the operator mounts it at)."""
        return substitute(value, self.argument, Data)

    def call(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A call's arguments with each `Data` staged and replaced by its `DataRef`."""
        return self.value(tuple(args)), self.value(dict(kwargs))

    def volumes(self, volumes: Mapping[str, Data]) -> list[r.DataVolume] | None:
        """``spec.volumes`` for checked ``volumes=`` (see `check_volumes`), then one per fuse
        argument staged so far (call it after the arguments); None when empty."""
        specs = [volume_spec(path, self(d)) for path, d in volumes.items()]
        specs += [spec for spec, _path in self._mounted.values()]
        return specs or None
