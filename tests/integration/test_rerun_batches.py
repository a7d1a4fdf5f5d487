"""Reruns on the real operator: `kinetic batches rerun`, `BatchHandle.rerun`, `fromBatch`.

The source batches fail some inputs by design: odd inputs fail while they
run under the source batch's name (``KINETIC_JOB_NAME`` is ``<batch>-<i>``)
and succeed under any other, so a rerun of the same definition succeeds.
What runs is counted from the rerun's manifest (every attempt it made) and
each input reports the ``KINETIC_INDEX`` it saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kinetic
import pytest
from kinetic.api.batches import attach_batch
from kinetic.api.inputs import read_manifest, read_shard
from kinetic.model import layout
from kinetic.model import resources as r
from kinetic.model.manifest import ManifestHeader
from kube_helpers import Kube, local_env, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

TERM_LOG = "/dev/termination-log"
# Odd inputs fail under the batch named "first"; everything else reports "<index>:<input>".
FLAKY = (
    'if [ "${KINETIC_JOB_NAME%-*}" = first ] && [ $((KINETIC_INDEX % 2)) -eq 1 ]; then '
    'echo "input $KINETIC_INDEX fails by design" >&2; exit 3; fi; '
    f'printf "%s:%s" "$KINETIC_INDEX" "$KINETIC_INPUT" > {TERM_LOG}'
)


def apply(kube: Kube, ns: str, name: str, spec: dict[str, Any]) -> None:
    kube.apply(
        ns,
        {
            "apiVersion": r.API_VERSION,
            "kind": r.BATCH_KIND,
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def get(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return client.CustomObjectsApi(kube.api).get_namespaced_custom_object(
            r.GROUP, r.VERSION, ns, r.BATCH_PLURAL, name
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def wait_done(kube: Kube, ns: str, name: str, timeout: float = 240) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        st = (get(kube, ns, name) or {}).get("status") or {}
        return st if r.Phase(st.get("phase", "PENDING")).terminal else None

    return wait_for(done, timeout=timeout, interval=0.5, what=f"batch {name} to finish")  # type: ignore[return-value]


def final_manifest(kube: Kube, ns: str, name: str) -> tuple[layout.Home, ManifestHeader]:
    obj = get(kube, ns, name)
    assert obj is not None
    home = layout.batch_home(local_env()["KINETIC_STORAGE_ROOT"], ns, name, obj["metadata"]["uid"])
    header = wait_for(
        lambda: (h := read_manifest(home)) and r.Phase(h.phase).terminal and h,
        timeout=60,
        what=f"the final manifest of {name}",
    )
    return home, header  # type: ignore[return-value]


def executions(home: layout.Home, header: ManifestHeader) -> dict[int, tuple[int, str | None]]:
    """Per input of a batch: how many attempts ran and what the last one reported."""
    found: dict[int, tuple[int, str | None]] = {}
    for shard in header.shards:
        doc = read_shard(home, shard)
        assert doc is not None
        for index, record in doc.inputs.items():
            found[int(index)] = (len(record.attempts), record.result)
    return found


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    kinetic_cli = str(Path(sys.executable).with_name("kinetic"))
    return subprocess.run(
        [kinetic_cli, "batches", *args], env=env, capture_output=True, text=True, timeout=120
    )


def first_batch(kube: Kube, ns: str) -> dict[str, Any]:
    """The source: six items, odd ones fail; it ends FAILED with 1,3,5 failed."""
    apply(
        kube,
        ns,
        "first",
        {
            "template": {"container": {"command": ["sh", "-c", FLAKY]}},
            "inputs": {"items": ["a", "b", "c", "d", "e", "f"]},
            "maxConcurrent": 6,
        },
    )
    st = wait_done(kube, ns, "first")
    assert (st["phase"], st.get("failedIndexes"), st.get("succeededIndexes")) == (
        "FAILED",
        "1,3,5",
        "0,2,4",
    ), st
    return st


def test_rerun_failed_runs_exactly_those_with_their_original_index(
    kube: Kube, ns: str, client_env: dict[str, str]
) -> None:
    first_batch(kube, ns)
    source_uid = get(kube, ns, "first")["metadata"]["uid"]  # type: ignore[index]
    out = cli(client_env, "rerun", "first", "--failed", "-n", ns)
    assert out.returncode == 0, out.stderr
    new = out.stdout.strip()
    assert new.startswith("grp-"), out.stdout

    st = wait_done(kube, ns, new)
    assert (st["phase"], st["total"], st.get("succeededIndexes")) == ("SUCCEEDED", 3, "0-2"), st
    home, header = final_manifest(kube, ns, new)
    assert header.rerun_of is not None
    assert (header.rerun_of.name, header.rerun_of.uid) == ("first", source_uid)
    assert header.original_indexes == "1,3,5"
    # Exactly the three failed inputs ran, once each, with their original index and input.
    assert executions(home, header) == {0: (1, "1:b"), 1: (1, "3:d"), 2: (1, "5:f")}

    shown = cli(client_env, "status", new, "-n", ns, "--inputs", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["rerunOf"]["name"] == "first" and doc["rerunOf"]["originalIndexes"] == "1,3,5"
    assert [(i["index"], i["original index"]) for i in doc["inputs"]] == [(0, 1), (1, 3), (2, 5)]

    # Nothing failed any more: a second --failed rerun of the rerun is refused, and says why.
    again = cli(client_env, "rerun", new, "--failed", "-n", ns)
    said = " ".join(again.stderr.split())  # the terminal may wrap it
    assert again.returncode == 1 and "has no failed inputs to rerun" in said, said


def test_rerun_all_from_python_keeps_the_definition(kube: Kube, ns: str) -> None:
    first_batch(kube, ns)
    handle = attach_batch("first", namespace=ns).rerun(failed=False, name="second")
    assert (handle.group_id, handle.total) == ("second", 6)
    st = wait_done(kube, ns, "second")
    assert (st["phase"], st.get("succeededIndexes")) == ("SUCCEEDED", "0-5"), st
    home, header = final_manifest(kube, ns, "second")
    assert header.original_indexes == "0-5"
    assert executions(home, header) == {i: (1, f"{i}:{'abcdef'[i]}") for i in range(6)}
    assert [j.result() for j in handle.jobs] == [f"{i}:{'abcdef'[i]}" for i in range(6)]


def test_a_deleted_source_batch_is_not_rerun(
    kube: Kube, ns: str, client_env: dict[str, str]
) -> None:
    """Once a batch is deleted nothing vouches for its records (any Pod or bucket writer can
    rewrite its template in storage), so neither the CLI nor fromBatch reruns it (they did)."""
    first_batch(kube, ns)
    kube.kubectl("delete", "kb", "first", "-n", ns, "--wait=true")
    assert get(kube, ns, "first") is None
    out = cli(client_env, "rerun", "first", "--failed", "-n", ns, "--name", "from-records")
    assert out.returncode != 0
    assert "a deleted batch cannot be rerun" in " ".join(out.stderr.split()), out.stderr
    assert get(kube, ns, "from-records") is None
    apply(kube, ns, "by-hand", {"inputs": {"fromBatch": {"name": "first"}}})
    st = wait_done(kube, ns, "by-hand")
    assert st["phase"] == "FAILED", st
    assert "there is no batch first in namespace" in st["message"]
    assert "rerun a batch before deleting it" in st["message"]


def test_pickled_function_inputs_rerun_with_their_original_index(ns: str) -> None:
    @kinetic.run(namespace=ns)
    def square(x: int) -> tuple[int, str]:
        if x % 2 and not os.environ["KINETIC_JOB_NAME"].startswith("again-"):
            raise ValueError(f"{x} is odd")
        return x * x, os.environ["KINETIC_INDEX"]

    batch = square.run_async_map([10, 11, 12, 13])
    batch.wait(timeout=240)
    assert batch.status()["failedIndexes"] == "1,3"
    again = batch.rerun(name=f"again-{batch.group_id}")
    again.wait(timeout=240)
    assert again.status()["phase"] == "SUCCEEDED"
    assert again.results() == [(121, "1"), (169, "3")]


def test_from_batch_declared_with_kubectl(kube: Kube, ns: str) -> None:
    first_batch(kube, ns)
    # Explicit ranges of the source and the source's template (none given here).
    apply(kube, ns, "picked", {"inputs": {"fromBatch": {"name": "first", "indexes": "0,3"}}})
    st = wait_done(kube, ns, "picked")
    assert (st["phase"], st["total"]) == ("SUCCEEDED", 2), st
    home, header = final_manifest(kube, ns, "picked")
    assert executions(home, header) == {0: (1, "0:a"), 1: (1, "3:d")}


def test_from_batch_with_inputs_of_its_own_is_refused_at_apply(kube: Kube, ns: str) -> None:
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {"name": "both", "namespace": ns},
        "spec": {"inputs": {"fromBatch": {"name": "first"}, "indexes": "0-2"}},
    }
    out = subprocess.run(
        ["kubectl", "--kubeconfig", kube.kubeconfig, "apply", "-f", "-"],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "spec.inputs.indexes cannot be set with spec.inputs.fromBatch" in out.stderr


def test_from_batch_of_a_missing_or_foreign_batch_fails_naming_the_field(
    kube: Kube, ns: str
) -> None:
    apply(kube, ns, "orphan", {"inputs": {"fromBatch": {"name": "never-was"}}})
    st = wait_done(kube, ns, "orphan", timeout=60)
    assert st["phase"] == "FAILED"
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert (
        f"spec.inputs.fromBatch.name: there is no batch never-was in namespace {ns}"
        in (st["message"])
    )


def test_from_batch_never_reads_another_namespace(kube: Kube, ns: str) -> None:
    first_batch(kube, ns)
    other = f"{ns}-b"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    try:
        uid = get(kube, ns, "first")["metadata"]["uid"]  # type: ignore[index]
        # Same name, even the right UID: the other namespace's storage prefix has no such batch.
        kube.apply(
            other,
            {
                "apiVersion": r.API_VERSION,
                "kind": r.BATCH_KIND,
                "metadata": {"name": "steal"},
                "spec": {"inputs": {"fromBatch": {"name": "first", "uid": uid, "indexes": "all"}}},
            },
        )
        st = wait_done(kube, other, "steal", timeout=60)
        assert st["phase"] == "FAILED", st
        assert f"there is no batch first in namespace {other}" in st["message"], st
        assert not kube.core.list_namespaced_pod(other).items
    finally:
        kube.core.delete_namespace(other, propagation_policy="Background")
