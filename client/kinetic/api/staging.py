"""Staging a user's local `Data`: uploading it once into the namespace's content-addressed cache.

Client side only (the pod never uploads data): every `Data` of a submission
becomes a `kinetic.model.data.DataRef` here before anything is pickled or any
resource is created. An entry is keyed by its content hash, so the same bytes
submitted twice cost one existence check and no upload.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kinetic import storage
from kinetic.model import layout
from kinetic.model.data import (
    Data,
    DataRef,
    LocalFile,
    content_hash_of,
    manifest_bytes,
    substitute,
    volume_spec,
)

if TYPE_CHECKING:
    from kinetic.model import resources as r

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
    if not storage.exists(manifest_uri):

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


class Stager:
    """Stages each distinct `Data` of one submission once (a batch may repeat it per input)."""

    def __init__(self, root: str, namespace: str) -> None:
        self.root = root
        self.namespace = namespace
        self._cache: dict[Data, DataRef] = {}

    def __call__(self, d: Data) -> DataRef:
        if d not in self._cache:
            self._cache[d] = stage(d, self.root, self.namespace)
        return self._cache[d]

    def value(self, value: Any) -> Any:
        """``value`` with each `Data` inside (lists, tuples, dicts) replaced by its ref."""
        return substitute(value, self, Data)

    def call(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A call's arguments with each `Data` staged and replaced by its `DataRef`."""
        return self.value(tuple(args)), self.value(dict(kwargs))

    def volumes(self, volumes: Mapping[str, Data]) -> list[r.DataVolume] | None:
        """``spec.volumes`` for checked ``volumes=`` (see `check_volumes`); None when empty."""
        if not volumes:
            return None
        return [volume_spec(path, self(d)) for path, d in volumes.items()]
