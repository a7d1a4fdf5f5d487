"""Tests as a hostile user: nothing a Pod or a bucket writer can change is trusted.

Each scenario is one the issue tried on the operator as it was, done the
way a tenant with a broad bucket account, or a Pod of theirs, would do it:

* a policy bypass through an object too large for the webhook to read;
* a result swapped in storage, on a batch and on a job;
* a tampered accepted spec, then an operator restart;
* a Pod that prints 300 MB, and a chunk Pod that writes an oversized report;
* a Pod's identity and an outputDir pointing into another tenant's storage.

Each asserts what a user sees (refusals, status, errors, results), that
nothing forged is returned, and that the operator goes on serving another
namespace. Witnesses are in storage or in return values, never on the host.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import kinetic
import pytest
from kinetic import storage
from kinetic.api.batches import BatchError
from kinetic.api.config import resolve
from kinetic.api.jobs import JobStatus
from kinetic.api.kube import KubeClient
from kinetic.model import digest, layout
from kinetic.model import resources as r
from kinetic_testing.cluster import job_json as job
from kinetic_testing.cluster import kubectl_in, scrape, webhook_off
from kube_helpers import Kube, fresh_namespace, leader_pod_name, local_up, operator_pod, wait_for

pytestmark = pytest.mark.integration

kinetic_kube = KubeClient()  # the client's own calls, through the current context

TIMEOUT = 300
OPERATOR_NS = "kinetic-system"
ALLOWED = "busybox"


def status_of(kube: Kube, kind: str, ns: str, name: str) -> dict[str, Any]:
    out = kube.kubectl("get", kind, name, "-n", ns, "-o", "jsonpath={.status}", check=False)
    return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}


def ended(kube: Kube, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    status = status_of(kube, kind, ns, name)
    return status if status.get("phase") in ("SUCCEEDED", "FAILED", "CANCELLED") else None


def failed_reason(status: dict[str, Any]) -> str | None:
    return next((c["reason"] for c in status["conditions"] if c["type"] == "Failed"), None)


def still_serves_another_namespace(kube: Kube) -> None:
    """A small job in a namespace of its own still runs to the end: the operator is up."""
    with fresh_namespace(kube) as other:
        text = job("bystander", other, container={"command": ["sh", "-c", "true"]})
        assert kubectl_in(kube, text, "create").returncode == 0
        status = wait_for(
            lambda: ended(kube, "kineticjobs", other, "bystander"),
            timeout=120,
            what="a job in another namespace to end",
        )
        assert status["phase"] == "SUCCEEDED", status


def vouched_shard(home: layout.Home, status: dict[str, Any], shard: int) -> tuple[str, str]:
    """(URI, SHA-256) of the shard the status vouches for, through the header it names."""
    header = json.loads(storage.read_bytes(status["manifestURI"]))
    assert digest.sha256(storage.read_bytes(status["manifestURI"])) == status["manifestSHA256"]
    ref = header["shardRefs"][str(shard)]
    return home.manifest_shard_uri(shard, ref["slot"]), ref["sha256"]


def final_status(ns: str, group: str) -> dict[str, Any]:
    """The batch's status once it vouches for the manifest that records its end."""

    def settled() -> dict[str, Any] | None:
        obj = kinetic_kube.get(r.BATCH_PLURAL, ns, group)
        status = (obj or {}).get("status") or {}
        if not r.Phase(status.get("phase", "PENDING")).terminal or not status.get("manifestURI"):
            return None
        header = json.loads(storage.read_bytes(status["manifestURI"]))
        return status if r.Phase(header["phase"]).terminal else None

    return wait_for(settled, timeout=60, what=f"the final manifest of {group}")  # type: ignore[return-value]


def restart_operator(kube: Kube) -> None:
    """Delete the leader's Pod, as a node drain would: another replica leads, and the
    Deployment makes a new Pod."""
    old = wait_for(lambda: operator_pod(kube), 60, what="the leader's operator Pod")
    kube.kubectl("delete", "pod", "-n", OPERATOR_NS, old["metadata"]["name"], "--wait=false")
    wait_for(
        lambda: leader_pod_name(kube) not in ("", old["metadata"]["name"]),
        120,
        what="another replica to lead",
    )
    local_up()  # both replicas Ready again; `kinetic local up` keeps a pid file others use


# --------------------------------------------------------------------------- policy


def _big_job(name: str, ns: str) -> str:
    """A KineticJob with 640 KB of env (an UPDATE's review carries it twice: 1.3 MB)."""
    env = [{"name": f"PAD_{i}", "value": "x" * 32_000} for i in range(20)]
    return job(name, ns, container={"command": ["sh", "-c", "sleep 600"]}, env=env, retries=3)


def test_a_large_object_cannot_slip_a_forbidden_image_past_the_webhook(
    kube: Kube,
    namespace: str,
    policy: Callable[[dict[str, str]], None],
) -> None:
    policy({"allowedImages": ALLOWED})
    wait_for(
        lambda: (
            "is not an allowed image"
            in kubectl_in(
                kube, job("probe", namespace, image="alpine:3.20"), "create", "--dry-run=server"
            ).stderr
        ),
        timeout=20,
        what="the policy to hold",
    )
    assert kubectl_in(kube, _big_job("big", namespace), "create").returncode == 0
    patched = kube.kubectl(
        "patch", "kineticjob", "big", "-n", namespace, "--type=merge",
        "-p", '{"spec": {"image": "alpine:3.20"}}', check=False,
    )  # fmt: skip
    assert patched.returncode != 0, "the patch of a 1.3 MB review was admitted"
    assert "denied the request" in patched.stderr
    assert "spec.image 'alpine:3.20' is not an allowed image" in patched.stderr
    for pod in kube.core.list_namespaced_pod(namespace).items:
        assert all(c.image != "alpine:3.20" for c in pod.spec.containers)
    still_serves_another_namespace(kube)


def test_a_forbidden_change_the_webhook_never_saw_fails_the_job_before_it_runs(
    kube: Kube,
    namespace: str,
    policy: Callable[[dict[str, str]], None],
) -> None:
    if not kube.is_local:
        pytest.skip("deletes and restores the webhook configuration of the local cluster")
    policy({"allowedImages": ALLOWED})
    assert kubectl_in(kube, _big_job("edited", namespace), "create").returncode == 0
    wait_for(
        lambda: status_of(kube, "kineticjobs", namespace, "edited").get("phase") == "RUNNING",
        timeout=120,
        what="the job to run",
    )
    with webhook_off(kube, (namespace, namespace)):
        patched = kube.kubectl(
            "patch", "kineticjob", "edited", "-n", namespace, "--type=merge",
            "-p", '{"spec": {"image": "alpine:3.20"}}', check=False,
        )  # fmt: skip
        assert patched.returncode == 0, patched.stderr
        status = wait_for(
            lambda: ended(kube, "kineticjobs", namespace, "edited"),
            timeout=60,
            what="the operator to judge the new generation",
        )
    assert status["phase"] == "FAILED" and failed_reason(status) == "PolicyDenied", status
    assert "spec.image 'alpine:3.20' is not an allowed image" in status["message"]
    assert status["observedGeneration"] == 2
    pods = kube.core.list_namespaced_pod(namespace).items
    assert all(c.image != "alpine:3.20" for p in pods for c in p.spec.containers)
    assert {p.metadata.name for p in pods} <= {"edited-a1"}  # no attempt of the new generation
    still_serves_another_namespace(kube)


# --------------------------------------------------------------------------- swapped results


def value_of(i: int) -> str:
    return f"value-of-{i}"


def test_a_result_swapped_with_a_forged_digest_is_refused_on_a_batch(ns: str, kube: Kube) -> None:
    """The issue's attack: input 1's result replaced by input 0's (bytes the runner really
    wrote), and input 1's digest in the manifest rewritten to input 0's."""
    batch = kinetic.run(namespace=ns)(value_of).run_async_map([0, 1, 2])
    assert batch.results(timeout=TIMEOUT, cleanup=False) == [value_of(i) for i in range(3)]
    status = final_status(ns, batch.group_id)
    home = batch._home()
    assert home is not None
    first, second = home.input_result_uri(0), home.input_result_uri(1)
    storage.write_bytes(second, storage.read_bytes(first))
    shard_uri, vouched = vouched_shard(home, status, 0)
    genuine = storage.read_bytes(shard_uri)
    doc = json.loads(genuine)
    doc["inputs"]["1"]["resultSHA256"] = doc["inputs"]["0"]["resultSHA256"]
    forged = json.dumps(doc).encode()
    storage.write_bytes(shard_uri, forged)

    fresh = kinetic.attach_batch(batch.group_id, namespace=ns)
    with pytest.raises(digest.ResultMismatch) as err:
        fresh.results(timeout=60, cleanup=False)
    text = str(err.value)
    assert shard_uri in text and vouched in text and digest.sha256(forged) in text
    with pytest.raises(digest.ResultMismatch):
        fresh.jobs[1].result(timeout=60, cleanup=False)  # type: ignore[union-attr]

    # With the manifest put back, the swapped result alone is refused by its own digest.
    storage.write_bytes(shard_uri, genuine)
    values = kinetic.attach_batch(batch.group_id, namespace=ns).results(
        timeout=60, cleanup=False, return_exceptions=True
    )
    assert values[0] == value_of(0) and values[2] == value_of(2)
    assert isinstance(values[1], digest.ResultMismatch) and second in str(values[1])
    still_serves_another_namespace(kube)


def test_a_result_swapped_from_another_job_is_refused(ns: str, kube: Kube) -> None:
    fn = kinetic.run(namespace=ns)(value_of)
    mine, theirs = fn.run_async(1), fn.run_async(0)
    assert theirs.result(timeout=TIMEOUT, cleanup=False) == value_of(0)
    assert mine.wait(timeout=TIMEOUT) is JobStatus.SUCCEEDED
    assert mine.result_uri and theirs.result_uri
    planted = storage.read_bytes(theirs.result_uri)  # genuine runner bytes, another job's
    storage.write_bytes(mine.result_uri, planted)
    with pytest.raises(digest.ResultMismatch) as err:
        kinetic.attach(mine.job_id, namespace=ns).result(timeout=60, cleanup=False)
    text = str(err.value)
    recorded = mine.describe()["resultSHA256"]
    assert mine.result_uri in text and recorded in text and digest.sha256(planted) in text
    still_serves_another_namespace(kube)


def huge_forgery(genuine: bytes) -> bytes:
    """A stand-in for ``result.pkl`` far larger than the genuine one: 48 MiB."""
    return genuine + b"\0" * (48 << 20)


def refused_within(reading: Callable[[], object], limit: int) -> tuple[str, int]:
    """The ResultMismatch ``reading`` raises, and the most Python memory it held meanwhile."""
    tracemalloc.start()
    try:
        with pytest.raises(digest.ResultMismatch) as err:
            reading()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit, f"the refusal held {peak} bytes: the forgery was read"
    return str(err.value), peak


def test_a_result_swapped_for_a_huge_object_is_refused_without_being_read(ns: str) -> None:
    """Issue 29: the client read ``result.pkl`` whole before hashing it, so a namespace-mate
    who swaps it for a huge object costs the reader its memory. The runner reports the
    size beside the hash (a job's status, each input's manifest record: a one-input Pod's
    termination message, a unit's log marks and a chunk's report all carry it), and the
    client reads no further."""
    fn = kinetic.run(namespace=ns)(value_of)
    job = fn.run_async(1)
    units = fn.run_async_map([0, 1, 2])  # sized units: the sizes come from the log marks
    chunks = fn.run_async_map([0, 1, 2], chunk_size=2)  # from the chunk's report
    assert job.wait(timeout=TIMEOUT) is JobStatus.SUCCEEDED
    genuine = storage.read_bytes(job.result_uri)
    assert job.describe()["resultBytes"] == len(genuine)
    for batch in (units, chunks):
        assert batch.results(timeout=TIMEOUT, cleanup=False) == [value_of(i) for i in range(3)]
        home = batch._home()
        assert home is not None
        shard_uri, _ = vouched_shard(home, final_status(ns, batch.group_id), 0)
        records = json.loads(storage.read_bytes(shard_uri))["inputs"]
        sizes = {i: len(storage.read_bytes(home.input_result_uri(i))) for i in range(3)}
        assert {i: records[str(i)].get("resultBytes") for i in range(3)} == sizes

    storage.write_bytes(job.result_uri, huge_forgery(genuine))
    attached = kinetic.attach(job.job_id, namespace=ns)
    text, _ = refused_within(lambda: attached.result(timeout=60, cleanup=False), 16 << 20)
    assert job.result_uri in text and f"larger than the {len(genuine)} bytes" in text
    assert job.status() is JobStatus.SUCCEEDED  # nothing was cleaned up on the way

    home = units._home()
    assert home is not None
    uri = home.input_result_uri(1)
    storage.write_bytes(uri, huge_forgery(storage.read_bytes(uri)))
    again = kinetic.attach_batch(units.group_id, namespace=ns)
    text, _ = refused_within(lambda: again.jobs[1].result(timeout=60, cleanup=False), 16 << 20)
    assert uri in text and "larger than the" in text
    assert again.jobs[0].result(timeout=60, cleanup=False) == value_of(0)  # untouched


# --------------------------------------------------------------------------- accepted spec


def test_a_tampered_accepted_spec_stops_the_batch_after_an_operator_restart(
    kube: Kube,
    ns: str,
    installed: None,
) -> None:
    term = '"${KINETIC_TERMINATION_LOG:-/dev/termination-log}"'
    body = {
        "apiVersion": r.API_VERSION,
        "kind": r.BATCH_KIND,
        "metadata": {"name": "steady"},
        "spec": {
            "template": {
                "container": {"command": ["sh", "-c", f'sleep 20; printf "genuine" > {term}']}
            },
            "inputs": {"items": [0, 1, 2, 3]},
            "maxConcurrent": 1,
        },
    }
    assert kubectl_in(kube, json.dumps({**body, "metadata": {"name": "steady", "namespace": ns}}),
                      "create").returncode == 0  # fmt: skip
    wait_for(
        lambda: status_of(kube, "kineticbatches", ns, "steady").get("phase") == "RUNNING",
        timeout=120,
        what="the batch to run",
    )
    obj = kinetic_kube.get(r.BATCH_PLURAL, ns, "steady")
    assert obj is not None
    home = layout.batch_home(resolve().storage_root, ns, "steady", obj["metadata"]["uid"])
    doc = json.loads(storage.read_bytes(home.accepted_spec_uri))
    doc["spec"]["template"]["container"]["command"] = ["sh", "-c", f'printf "forged" > {term}']
    forged = json.dumps(doc).encode()
    storage.write_bytes(home.accepted_spec_uri, forged)
    restart_operator(kube)

    status = wait_for(
        lambda: ended(kube, "kineticbatches", ns, "steady"),
        timeout=120,
        what="the restarted operator to judge the stored spec",
    )
    assert status["phase"] == "FAILED" and failed_reason(status) == "InvalidSpec", status
    message = status["message"]
    assert home.accepted_spec_uri in message and digest.sha256(forged) in message
    assert status["acceptedSpecSHA256"] in message and "spec.template" in message
    for pod in kube.core.list_namespaced_pod(ns).items:
        for c in pod.spec.containers:
            assert "forged" not in " ".join(c.command or [])
    values = kinetic.attach_batch("steady", namespace=ns).results(
        timeout=60, return_exceptions=True
    )
    assert "forged" not in values
    still_serves_another_namespace(kube)


# --------------------------------------------------------------------------- bounded reads


def shout(megabytes: int) -> str:
    """Print ``megabytes`` MB of log lines, the last one numbered; return a small value.

    Then wait past the kubelet's next look at its log files (every 10 s): the file
    holding the end is rotated away while the container still runs, and the kubelet
    serves only the new, empty one. The end must survive all the same.
    """
    import sys
    import time

    line = "y" * 1023 + "\n"
    for _ in range(megabytes * 1024 - 1):
        sys.stdout.write(line)
    sys.stdout.write("the very last line\n")
    sys.stdout.flush()
    time.sleep(11)
    return "printed"


def test_a_pod_printing_300_mb_costs_the_operator_little_and_keeps_its_logs_end(
    ns: str, kube: Kube
) -> None:
    before = scrape(kube)[("process_resident_memory_bytes", ())]
    handle = kinetic.run(namespace=ns)(shout).run_async(300)
    assert handle.wait(timeout=TIMEOUT) is JobStatus.SUCCEEDED
    peak = [before]

    def archived() -> bool:
        peak.append(scrape(kube)[("process_resident_memory_bytes", ())])
        return not kinetic_kube.list_pods(ns, f"kinetic.dev/job={handle.job_id}")

    wait_for(archived, timeout=TIMEOUT, interval=1.0, what="the Pod to be archived and deleted")
    assert max(peak) - before < 100 * 2**20, f"operator RSS grew by {max(peak) - before} bytes"
    text = handle.logs() or ""
    assert text.startswith("[kinetic: this log was cut: the Pod wrote more than 2,097,152 bytes")
    # The end is kept: the function's last line, then only the runner's own closing lines.
    tail = text.rstrip().splitlines()[-5:]
    assert "the very last line" in tail, tail
    assert len(text.encode()) <= 2 << 20
    assert handle.result(timeout=60) == "printed"
    still_serves_another_namespace(kube)


def oversized_report(x: int) -> int:
    """A hostile chunk: the code in its Pod makes the runner write an 8 MB report (with its
    true hash) instead of the few hundred bytes a chunk's report holds."""
    import importlib
    import sys

    from kinetic import storage as s
    from kinetic.model import digest as d

    def write_report(uri: str | None, hashes: dict[int, str]) -> str | None:
        data = b'{"pad":"' + b"p" * (8 << 20) + b'"}'
        s.write_bytes(str(uri), data)
        return d.sha256(data)

    main = sys.modules.get("__main__")  # `python -m kinetic.runtime.runner` runs it as __main__
    runner = (
        main
        if hasattr(main, "_write_report")
        else importlib.import_module("kinetic.runtime.runner")
    )
    runner._write_report = write_report  # type: ignore[union-attr]
    return x


def test_an_oversized_report_fails_its_chunk_with_a_reason(ns: str, kube: Kube) -> None:
    before = scrape(kube)[("process_resident_memory_bytes", ())]
    batch = kinetic.run(namespace=ns)(oversized_report).run_async_map([0, 1, 2, 3], chunk_size=2)
    with pytest.raises(BatchError) as err:
        batch.results(timeout=TIMEOUT)
    assert err.value.partial_results == [None] * 4  # nothing taken from an unchecked report
    messages = [f.message() or "" for f in err.value.failures]
    assert len(messages) == 4
    for message in messages:
        assert "its results cannot be checked" in message and "65,536 bytes" in message
    after = scrape(kube)[("process_resident_memory_bytes", ())]
    assert after - before < 100 * 2**20
    still_serves_another_namespace(kube)


# --------------------------------------------------------------------------- least privilege


def test_job_pods_run_as_the_runner_account_without_a_token(ns: str, kube: Kube) -> None:
    handle = kinetic.run(namespace=ns)(value_of).run_async(3)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == value_of(3)
    (pod,) = kube.core.list_namespaced_pod(
        ns, label_selector=f"kinetic.dev/job={handle.job_id}"
    ).items
    assert pod.spec.service_account_name == "kinetic-runner"
    assert pod.spec.automount_service_account_token is False
    account = kube.core.read_namespaced_service_account("kinetic-runner", ns)
    assert account.automount_service_account_token is False
    assert account.metadata.labels["app.kubernetes.io/managed-by"] == "kinetic-operator"
    identity = "system:serviceaccount:kinetic-system:kinetic-operator"
    for verb, what, allowed in (
        ("create", ["serviceaccounts"], "yes"),
        ("update", ["serviceaccounts"], "no"),
        ("create", ["serviceaccounts", "--subresource=token"], "no"),
    ):
        got = kube.kubectl("auth", "can-i", verb, *what, "-n", ns, "--as", identity, check=False)
        assert got.stdout.strip() == allowed, (verb, what, got.stdout, got.stderr)


def test_an_output_dir_in_another_tenants_storage_fails_naming_the_field(
    ns: str, kube: Kube
) -> None:
    root = resolve().storage_root
    theirs = layout.namespace_prefix(root, "someone-else") + "outputs/x"
    text = job("nosy", ns, container={"command": ["true"]}, outputDir=theirs)
    assert kubectl_in(kube, text, "create").returncode == 0
    status = wait_for(lambda: ended(kube, "kineticjobs", ns, "nosy"), timeout=60, what="nosy")
    assert status["phase"] == "FAILED" and failed_reason(status) == "InvalidSpec"
    assert status["message"].startswith(f"spec.outputDir: {theirs} is outside")
    assert layout.namespace_prefix(root, ns) in status["message"]
    assert kube.core.list_namespaced_pod(ns).items == []
