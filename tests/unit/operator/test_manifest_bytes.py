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

# Pods are named <batch>-i<input>-<attempt> since names were made unable to clash: the
# shards' bytes changed with the names they record, and only with them.
EXPECTED = {
    "container": {
        "manifest": "83c9bc0e24000f80183a5928773ebb7e5c7314afb692b819dc1e5ad400be38cd",
        "shard-0": "c01bddac3721f00516a1cd580fe574afa774e90f9f0e87555a8d03df59da6644",
        "shard-1": "71fac91f6114514ccad2a31744ba7930527620b477b3dfaa0b0bce5a768c3471",
        "shard-2": "817cabd67dabb69e12744531d790ef811dc28e4c3f724720cd84cd22686f8151",
    },
    "function": {
        "manifest": "044b902785efc31ec80b94d2572883ef172d4799ecd38d20050c9e469bba5984",
        "shard-0": "2c94f76a231421de9e982fb58eca9608d6cf055222e6b03edc33555c1d017016",
        "shard-1": "15a405691dffbdf72dfbcfb412e2f507b0eef71409105a42d8adf43ea51dc5d9",
        "shard-2": "4bcd598b98ee637020ce1db0e6b44bf7671e86063b953809cc3a427135e9e7e0",
    },
    "chunked": {
        "manifest": "2d6e5ce3b6448fe3cec379afc41fdf24137f6c694b4492a9518fc835d735adda",
        "shard-0": "2e2a1f803297ad70b289300ef2053a77908c96cb2f52dfc51531a948ec08d2e9",
        "shard-1": "8305dc58173450c7c07e4370f59d5d11ce78b475d79e4e8b05c38dcf6930a08a",
        "shard-2": "498aef832843887c3a8b93a0a8eee48d404fed3a8ae0eef5836a617a4a668cad",
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
