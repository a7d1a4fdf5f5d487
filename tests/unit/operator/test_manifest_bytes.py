"""The manifest files a batch history writes, pinned byte for byte.

What the operator keeps in memory between writes may change shape (to keep
it small at 100,000+ inputs); what it writes for the same history must not:
clients and reruns read these files. The digests were taken from the
operator before its in-memory records were made compact; a change here is
a change to the stored format and needs a new manifest version.

The header's digests changed once since, when the header started to carry
what vouches for each shard (``revision`` and ``shardRefs``: fields old
readers ignore); the shards' bytes did not.
"""

from __future__ import annotations

import hashlib

import pytest
from manifest_history import play, written

EXPECTED = {
    "container": {
        "manifest": "22cedc57f68405b92f0c474bb82dd7c6c780075a82df6f158bfa6e5a59a10922",
        "shard-0": "827ead9c9ce976beeeae7e75a8426ffb4e0c93c83db68884db0336a3f8e8ee43",
        "shard-1": "4775314abf3916cdcd3e934a264a4e84f504c1e00d0ba0974b6d4e3d0c91ab79",
        "shard-2": "2c9e282d1306dd4c6ca5abb9962d689ae9f50f146a5a7e4d8042eacb3c893b41",
    },
    "function": {
        "manifest": "0bf6679fcf76c46cf8bcbcc0cbee3aad47b70e318bf21494c00bd62038c008a8",
        "shard-0": "32c6f9ba28bfbe51bc31e6f8e17540ad26d7633ce8c7e19fa872a7781d6739d8",
        "shard-1": "a299b449ce3ae1e7043f8be7f0158a723633660eb28182f2ba7f355ad32cd6f5",
        "shard-2": "3ba4acecf877562308f2c0b7ee0f5c42a36d3a7d65c1381912f61f5b9df4f0e6",
    },
    "chunked": {
        "manifest": "711fd3e1ca847a9544db5a1696fef1c028239246b13ec9b4c137702047529384",
        "shard-0": "6973a7640ff5268b21621819c5aa2daf965a2e3d787de326584f64e652140782",
        "shard-1": "824c15e5e96d5c59f11424362014b4bec7d839f6fdcc7c4c5bb9f391161a03a9",
        "shard-2": "b272eb02bb4f735c9dc1b3021c8667e2acdae7e5d4b720f39bdb6ad198b7903b",
    },
}
HISTORIES = {
    "container": {"container": True},
    "function": {"container": False},
    "chunked": {"container": False, "chunk": 4},
}


@pytest.mark.parametrize("kind", sorted(HISTORIES))
def test_the_same_history_writes_the_same_bytes(tmp_path, kind):
    root = f"file://{tmp_path}/store"
    play(root, 2500, parallel=100, **HISTORIES[kind])
    got = {name: hashlib.sha256(data).hexdigest() for name, data in written(root).items()}
    assert got == EXPECTED[kind]
