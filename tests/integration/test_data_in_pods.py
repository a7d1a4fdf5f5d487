"""kinetic.Data end to end: arguments, volumes, the upload cache, container jobs from YAML.

The functions run in pods on the cluster (on the local cluster: processes in
their own mount namespace, where each volume's emptyDir is bound at its
mount path), so what they return is what the pod saw.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import kinetic
import pytest
from kinetic import storage
from kinetic.api.config import resolve
from kinetic.api.jobs import JobFailed, JobStatus
from kinetic.model import layout, payload
from kinetic.model.data import DataError
from kube_helpers import Kube

pytestmark = pytest.mark.integration
TIMEOUT = 180


def tree(root: Path) -> Path:
    files = {
        "train/a.csv": b"x,y\n1,2\n",
        "train/deep/b.bin": os.urandom(70_000),
        "README": b"hello\n",
        "empty.txt": b"",
    }
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    return root


def digests(path: str) -> dict[str, str]:
    """Every file under ``path`` with its sha256 (also the function the pods run)."""
    import hashlib as h
    import os as o

    out = {}
    for dirpath, _dirs, files in o.walk(path):
        for name in files:
            full = o.path.join(dirpath, name)
            with open(full, "rb") as f:
                out[o.path.relpath(full, path)] = h.sha256(f.read()).hexdigest()
    return out


def data_objects(ns: str) -> dict[str, int | None]:
    """The namespace's data cache: each object and its generation (a rewrite changes it)."""
    prefix = f"{layout.namespace_prefix(resolve().storage_root, ns)}data/"
    return {uri: storage.stat(uri) for uri in storage.list_prefix(prefix)}


def test_a_local_folder_arrives_byte_identical_and_is_uploaded_once(ns: str, tmp_path) -> None:
    src = tree(tmp_path / "ds")
    remote_digests = kinetic.run(namespace=ns)(digests)

    first = remote_digests.run_async(kinetic.Data(str(src)))
    assert first.result(timeout=TIMEOUT) == digests(str(src))
    stored = data_objects(ns)
    assert len(stored) == 5  # four files and the manifest

    second = remote_digests.run_async(kinetic.Data(str(src)))
    assert second.result(timeout=TIMEOUT) == digests(str(src))
    assert data_objects(ns) == stored  # nothing uploaded or rewritten the second time


def test_a_gs_prefix_arrives_as_a_folder_and_an_object_as_a_file(ns: str) -> None:
    root = resolve().storage_root
    if not root.startswith("gs://"):
        pytest.skip(f"the cluster's storage root {root} is not gs://")
    prefix = f"{layout.namespace_prefix(root, ns)}datasets/mnist/"
    storage.write_bytes(prefix + "train/0.txt", b"zero")
    storage.write_bytes(prefix + "labels.json", b"[0]")

    @kinetic.run(namespace=ns)
    def look(folder: str, single: str) -> tuple[bool, dict[str, str], str, bytes]:
        import os as o

        with open(single, "rb") as f:
            return o.path.isdir(folder), digests(folder), o.path.basename(single), f.read()

    is_dir, got, name, content = look(kinetic.Data(prefix), kinetic.Data(prefix + "labels.json"))
    assert is_dir
    assert got == {
        "train/0.txt": hashlib.sha256(b"zero").hexdigest(),
        "labels.json": hashlib.sha256(b"[0]").hexdigest(),
    }
    assert (name, content) == ("labels.json", b"[0]")


def test_volumes_are_at_their_paths_before_the_call(ns: str, tmp_path) -> None:
    src = tree(tmp_path / "ds")
    (tmp_path / "config.json").write_text('{"lr": 0.1}')

    @kinetic.run(
        namespace=ns,
        volumes={
            "/data": kinetic.Data(str(src)),
            "/config": kinetic.Data(str(tmp_path / "config.json")),
        },
    )
    def mounted() -> tuple[dict[str, str], str]:
        with open("/config/config.json") as f:
            return digests("/data"), f.read()

    assert mounted() == (digests(str(src)), '{"lr": 0.1}')

    batch = mounted.run_async_map([(), ()], input_mode="args")  # every input sees them too
    assert batch.results(timeout=TIMEOUT) == [(digests(str(src)), '{"lr": 0.1}')] * 2


def test_data_inside_batch_inputs_becomes_a_path(ns: str, tmp_path) -> None:
    src = tree(tmp_path / "ds")

    @kinetic.run(namespace=ns)
    def count(item: dict) -> int:
        return len(digests(item["data"])) * item["k"]

    data = kinetic.Data(str(src))
    inputs = [{"data": data, "k": 1}, {"data": data, "k": 2}, {"data": data, "k": 3}]
    batch = count.run_async_map(inputs, input_mode="single")
    assert batch.results(timeout=TIMEOUT) == [4, 8, 12]
    chunked = count.run_async_map(inputs, input_mode="single", chunk_size=3)  # one Pod, one fetch
    assert chunked.results(timeout=TIMEOUT) == [4, 8, 12]
    fetched = [job.logs().count("downloaded and verified 4 file(s)") for job in chunked.jobs]
    assert fetched == [1, 0, 0]  # each input's own part of the Pod's log: the first fetched


def test_bad_volumes_are_refused_before_anything_is_uploaded(ns: str, tmp_path) -> None:
    tree(tmp_path / "ds")
    with pytest.raises(DataError, match="'data' is relative; use an absolute path such as '/data'"):
        kinetic.run(namespace=ns, volumes={"data": kinetic.Data(str(tmp_path / "ds"))})
    with pytest.raises(DataError, match="expected a kinetic.Data, got str"):
        kinetic.run(namespace=ns, volumes={"/data": str(tmp_path / "ds")})
    assert storage.list_prefix(layout.namespace_prefix(resolve().storage_root, ns)) == []


def test_what_the_cluster_lacks_fails_the_job_with_a_sentence(ns: str, tmp_path) -> None:
    # fuse=True without the GCS FUSE CSI driver is refused at submission: test_data_fuse.py.
    @kinetic.run(namespace=ns)
    def touch(path: str) -> str:
        return path

    try:
        import datasets  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:  # the local cluster's pods share this environment
        hf = touch.run_async(kinetic.Data("hf://imdb?split=train"))
        with pytest.raises(
            payload.RunnerError, match="needs the Hugging Face `datasets` package"
        ) as e:
            hf.result(timeout=TIMEOUT)
        assert "Traceback" not in str(e.value)
        assert hf.status() is JobStatus.FAILED


def test_a_container_job_from_yaml_sees_its_volume(ns: str, kube: Kube) -> None:
    root = resolve().storage_root
    prefix = f"{layout.namespace_prefix(root, ns)}shared/words/"
    storage.write_bytes(prefix + "hello.txt", b"hello from storage")
    body = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticJob",
        "metadata": {"name": "reader"},
        "spec": {
            "container": {"command": ["sh", "-c", "cat /words/hello.txt > /dev/termination-log"]},
            "volumes": [{"mountPath": "/words", "uri": prefix}],
        },
    }
    kube.apply(ns, body)
    assert kinetic.attach("reader", namespace=ns).result(timeout=TIMEOUT) == "hello from storage"

    missing = {
        **body,
        "metadata": {"name": "reader-missing"},
        "spec": {**body["spec"], "volumes": [{"mountPath": "/words", "uri": prefix + "nope/"}]},
    }
    kube.apply(ns, missing)
    job = kinetic.attach("reader-missing", namespace=ns)
    with pytest.raises(JobFailed, match="holds no objects"):
        job.result(timeout=TIMEOUT)


def test_a_container_batch_from_yaml_mounts_its_volume_in_every_input(ns: str, kube: Kube) -> None:
    root = resolve().storage_root
    prefix = f"{layout.namespace_prefix(root, ns)}shared/greetings/"
    storage.write_bytes(prefix + "en.txt", b"hello")
    storage.write_bytes(prefix + "fr.txt", b"bonjour")
    body = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticBatch",
        "metadata": {"name": "greet"},
        "spec": {
            "template": {
                "container": {
                    "command": [
                        "sh",
                        "-c",
                        'cat "/greetings/$KINETIC_INPUT.txt" > /dev/termination-log',
                    ]
                },
                "volumes": [{"mountPath": "/greetings", "uri": prefix}],
            },
            "inputs": {"items": ["en", "fr"]},
        },
    }
    kube.apply(ns, body)
    batch = kinetic.attach_batch("greet", namespace=ns)
    batch.wait(timeout=TIMEOUT)
    assert batch.results(timeout=30) == ["hello", "bonjour"]


def test_a_data_manifest_forged_in_storage_fails_the_job_naming_it(
    ns: str, kube: Kube, tmp_path
) -> None:
    """A namespace-mate shares the namespace's storage identity: it can rewrite an uploaded
    entry's files and its manifest, consistently with each other. The manifest must still
    match the content hash in its own name, so the Pod refuses it (in the init container
    that fills the volume) and the job fails naming the manifest and both hashes: the
    job's container never sees the forged bytes."""
    from kinetic.api.staging import stage
    from kinetic.model.data import LocalFile, combined_hash, manifest_bytes

    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "a.txt").write_bytes(b"genuine")
    ref = stage(kinetic.Data(str(tmp_path / "ds")), resolve().storage_root, ns)
    assert ref.manifest_uri is not None
    genuine = layout.data_manifest_hash(ref.manifest_uri)

    forged = b"FORGED"
    storage.write_bytes(ref.uri + "a.txt", forged)
    digest = hashlib.sha256(b"a.txt\0" + forged).hexdigest()
    listed = [LocalFile("a.txt", "", digest, hashlib.sha256(forged).hexdigest(), len(forged))]
    storage.write_bytes(ref.manifest_uri, manifest_bytes(True, listed))
    forged_hash = combined_hash(True, [digest])

    body = {
        "apiVersion": "kinetic.dev/v1alpha1",
        "kind": "KineticJob",
        "metadata": {"name": "forged-data"},
        "spec": {
            "container": {"command": ["sh", "-c", "cat /data/a.txt > /dev/termination-log"]},
            "volumes": [{"mountPath": "/data", "uri": ref.uri, "manifestURI": ref.manifest_uri}],
        },
    }
    kube.apply(ns, body)
    job = kinetic.attach("forged-data", namespace=ns)
    try:
        got = job.result(timeout=TIMEOUT)
    except JobFailed as failed:
        message = str(failed)
    else:
        pytest.fail(f"the job ran on the forged data: its container read {got!r}")
    assert f"data manifest {ref.manifest_uri} does not match its name" in message
    assert f"content hash {forged_hash}, its name says {genuine}" in message
