"""Multi-host jobs on the real cluster: gangs of Pods that find rank 0, and fail together.

The local cluster has no cluster DNS, so its operator runs with
``rendezvous: podIP``: rank 0 is created first and the other ranks get its
Pod IP as MASTER_ADDR. Witnesses from inside the Pods come back as results,
termination messages or objects in the storage emulator the Pods were given.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import kinetic
import pytest
from kinetic import storage
from kinetic.api.config import resolve
from kinetic.api.inputs import read_manifest, read_shard
from kinetic.model import layout
from kinetic.model.resources import GROUP, VERSION
from kube_helpers import Kube, ended_status, wait_for

pytestmark = pytest.mark.integration

TERM_LOG = "/dev/termination-log"
BUSYBOX = "busybox:1.36"


@pytest.fixture
def ns(client_env: dict[str, str], namespace: str) -> str:
    return namespace


def job(kube: Kube, ns: str, name: str, spec: dict[str, Any]) -> None:
    """`kubectl apply` a KineticJob, as a user would."""
    kube.apply(
        ns,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "KineticJob",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def sh(script: str, **extra: Any) -> dict[str, Any]:
    """A busybox container job running a shell script."""
    command = ["sh", "-c", textwrap.dedent(script).strip()]
    return {"container": {"image": BUSYBOX, "command": command}, **extra}


def pods(kube: Kube, ns: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in kube.core.list_namespaced_pod(ns).items}


def live(kube: Kube, ns: str) -> list[str]:
    """Pods still running or about to (not ended, not being deleted)."""
    return sorted(
        name
        for name, p in pods(kube, ns).items()
        if p.status.phase in ("Pending", "Running") and not p.metadata.deletion_timestamp
    )


def env_of(pod: Any) -> dict[str, Any]:
    return {e.name: e.value for e in pod.spec.containers[0].env}


def members(status: dict[str, Any], attempt: int = -1) -> dict[int, tuple[str, str]]:
    """rank -> (pod, outcome) of one attempt, as the status records it."""
    record = status["attempts"][attempt]
    return {m["rank"]: (m["pod"], m["outcome"]) for m in record["members"]}


# --------------------------------------------------------------------------- rendezvous


def test_two_host_function_ranks_exchange_hostnames_over_tcp(ns: str, kube: Kube) -> None:
    @kinetic.run(namespace=ns, hosts=2)
    def meet() -> dict[str, Any]:
        import os
        import socket
        import time

        rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
        addr, me = os.environ["MASTER_ADDR"], socket.gethostname()
        if rank == 0:
            with socket.create_server(("", port)) as server:
                server.settimeout(180)
                conn, _ = server.accept()
                with conn:
                    peer, dialled = conn.recv(256).decode().split()
                    conn.sendall(me.encode())
            return {
                "me": me,
                "peer": peer,
                "addr": addr,
                "dialled": dialled,
                "world": os.environ["WORLD_SIZE"],
                "coordinator": os.environ["KINETIC_COORDINATOR_ADDRESS"],
            }
        deadline = time.monotonic() + 180
        while True:
            try:
                conn = socket.create_connection((addr, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with conn:
            conn.sendall(f"{me} {addr}".encode())
            return {"me": me, "peer": conn.recv(256).decode()}

    handle = meet.run_async()
    out = handle.result(timeout=300, cleanup=False)
    name = handle.job_id
    assert (out["me"], out["peer"], out["world"]) == (f"{name}-1-0", f"{name}-1-1", "2")

    status = handle.describe()
    assert status["phase"] == "SUCCEEDED" and status["attempt"] == 1
    record = status["attempts"][-1]
    assert record["pod"] == f"{name}-1" and record["outcome"] == "success"
    ranks = members(status)
    assert ranks[0] == (f"{name}-1-0", "succeeded")
    assert ranks[1][0] == f"{name}-1-1" and ranks[1][1] in ("succeeded", "stopped")

    # No cluster DNS here: rank 1 dialled rank 0's Pod IP, which rank 0 was told as its own.
    rank0 = kube.core.read_namespaced_pod(f"{name}-1-0", ns)
    assert out["dialled"] == out["addr"] == rank0.status.pod_ip
    assert out["coordinator"] == f"{rank0.status.pod_ip}:29500"
    assert rank0.metadata.labels["kinetic.dev/rank"] == "0"
    assert (rank0.spec.hostname, rank0.spec.subdomain) == (f"{name}-1-0", f"{name}-gang")
    # The headless Service that would name the members is made only where there is DNS:
    # here it would name nobody, and its endpoints would follow every member for nothing.
    assert not kube.core.list_namespaced_service(ns).items
    handle.cleanup()


def test_three_host_container_job_from_kubectl(kube: Kube, ns: str) -> None:
    script = f"""
        echo "rank $RANK of $WORLD_SIZE dials $MASTER_ADDR:$MASTER_PORT"
        printf 'rank=%s world=%s process=%s of %s' "$RANK" "$WORLD_SIZE" \\
            "$KINETIC_PROCESS_ID" "$KINETIC_NUM_PROCESSES" > {TERM_LOG}
        [ "$RANK" = 0 ] && sleep 3
        exit 0
    """
    job(kube, ns, "trio", sh(script, hosts=3))
    status = ended_status(kube, "kj", ns, "trio", timeout=240)
    assert status["phase"] == "SUCCEEDED", status["message"]
    assert status["result"] == "rank=0 world=3 process=0 of 3"  # rank 0's is the job's
    assert [(r, p) for r, (p, _) in sorted(members(status).items())] == [
        (0, "trio-1-0"),
        (1, "trio-1-1"),
        (2, "trio-1-2"),
    ]
    assert members(status)[0][1] == "succeeded"

    seen = pods(kube, ns)
    ip = seen["trio-1-0"].status.pod_ip
    for rank in (1, 2):
        env = env_of(seen[f"trio-1-{rank}"])
        assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == (str(rank), "3", ip)
        assert env["KINETIC_COORDINATOR_ADDRESS"] == f"{ip}:29500"
        assert env["LOCAL_RANK"] == "0"
    logs = kube.core.read_namespaced_pod_log("trio-1-2", ns)
    assert f"rank 2 of 3 dials {ip}:29500" in logs
    # kubectl shows the gang by its rank label.
    table = kube.kubectl("get", "pods", "-n", ns, "-L", "kinetic.dev/rank").stdout
    assert "RANK" in table.splitlines()[0]


# --------------------------------------------------------------------------- failing together


def test_rank_one_fails_and_the_whole_gang_stops(
    kube: Kube, ns: str, client_env: dict[str, str]
) -> None:
    script = f"""
        echo "rank $RANK of attempt $KINETIC_ATTEMPT starts"
        if [ "$RANK" = 1 ]; then sleep 2; echo 'shard 7 is corrupt' > {TERM_LOG}; exit 3; fi
        sleep 600
    """
    job(kube, ns, "split", sh(script, hosts=2, retries=1))
    status = ended_status(kube, "kj", ns, "split", timeout=240)
    assert status["phase"] == "FAILED"
    # One retry spent by the whole gang, not one per member.
    assert (status["attempt"], status["failures"], status["disruptions"]) == (2, 2, 0)
    for attempt in (0, 1):
        record = status["attempts"][attempt]
        assert (record["outcome"], record["exitCode"]) == ("failure", 3)
        assert "rank 1 failed" in record["message"] and "shard 7 is corrupt" in record["message"]
        assert {r: o for r, (_, o) in members(status, attempt).items()} == {
            0: "stopped",
            1: "failed",
        }
    assert "shard 7 is corrupt" in status["message"]
    # Rank 0 of each attempt was deleted with its gang: nothing is left running.
    wait_for(lambda: not live(kube, ns), timeout=60, what="no live Pod in the namespace")
    # The failed member keeps its Pod: its log, by rank, from the CLI.
    cli = [str(Path(sys.executable).with_name("kinetic")), "jobs", "logs", "split", "-n", ns]
    logs = subprocess.run(
        [*cli, "--rank", "1"], env=client_env, capture_output=True, text=True, timeout=120
    )
    assert logs.returncode == 0, logs.stderr
    assert "rank 1 of attempt 2 starts" in logs.stdout
    # Rank 0 ran until it was stopped with its gang: its log was archived before that.
    uid = json.loads(kube.kubectl("get", "kj", "split", "-n", ns, "-o", "json").stdout)
    home = layout.job_home(resolve().storage_root, ns, "split", uid["metadata"]["uid"])
    for attempt in (1, 2):
        archived = storage.read_bytes(home.log_uri(f"split-{attempt}-0")).decode()
        assert f"rank 0 of attempt {attempt} starts" in archived, archived
    wrong = subprocess.run(
        [*cli, "--rank", "2"], env=client_env, capture_output=True, text=True, timeout=120
    )
    assert wrong.returncode != 0 and "2 hosts" in wrong.stdout + wrong.stderr


def test_member_deleted_mid_run_is_a_disruption_and_the_gang_reruns(kube: Kube, ns: str) -> None:
    script = f"""
        [ "$KINETIC_ATTEMPT" = 1 ] && sleep 600
        printf 'attempt %s rank %s' "$KINETIC_ATTEMPT" "$RANK" > {TERM_LOG}
    """
    job(kube, ns, "lose", sh(script, hosts=2, retries=0))

    def both_running() -> bool:
        seen = pods(kube, ns)
        return all(
            (p := seen.get(f"lose-1-{r}")) is not None and p.status.phase == "Running"
            for r in (0, 1)
        )

    wait_for(both_running, timeout=180, what="both members of attempt 1 running")
    kube.core.delete_namespaced_pod("lose-1-1", ns)
    status = ended_status(kube, "kj", ns, "lose", timeout=240)
    assert status["phase"] == "SUCCEEDED", status["message"]
    assert status["result"] == "attempt 2 rank 0"
    # Free: retries was 0, and the gang re-ran whole.
    assert (status["attempt"], status["failures"], status["disruptions"]) == (2, 0, 1)
    first = status["attempts"][0]
    assert first["outcome"] == "disruption"
    assert {r: o for r, (_, o) in members(status, 0).items()} == {0: "stopped", 1: "gone"}
    wait_for(lambda: "lose-1-0" not in live(kube, ns), timeout=60, what="rank 0 of attempt 1 gone")


# --------------------------------------------------------------------------- batches


def test_batch_of_gangs_runs_one_gang_at_a_time(kube: Kube, ns: str, runs: str) -> None:
    assert runs.startswith("gs://")
    bucket, _, path = runs[len("gs://") :].partition("/")
    upload = (
        f"$STORAGE_EMULATOR_HOST/upload/storage/v1/b/{bucket}/o?uploadType=media"
        f"&name={path}/$KINETIC_INDEX/$RANK"
    )
    # Each member records when it started and ended, by the node's uptime (one node, one
    # clock, to the hundredth). Rank 0 outlives rank 1, so both end on their own; with
    # maxConcurrent 1 the next gang starts only after both ended.
    script = f"""
        start=$(cut -d' ' -f1 /proc/uptime)
        if [ "$RANK" = 0 ]; then sleep 4; else sleep 2; fi
        wget -q -O /dev/null --post-data "$start $(cut -d' ' -f1 /proc/uptime)" "{upload}"
    """
    kube.apply(
        ns,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "KineticBatch",
            "metadata": {"name": "gangs"},
            "spec": {
                "template": sh(script, hosts=2),
                "inputs": {"items": [0, 1, 2]},
                "maxConcurrent": 1,
            },
        },
    )
    status = ended_status(kube, "kb", ns, "gangs", timeout=300)
    assert status["phase"] == "SUCCEEDED", status.get("message")
    assert status["counts"]["succeeded"] == 3

    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for uri in storage.list_prefix(runs + "/"):
        index, rank = (int(x) for x in uri[len(runs) + 1 :].split("/"))
        start, end = (float(x) for x in storage.read_bytes(uri).split())
        spans[index].append((start, end))
    assert {i: len(s) for i, s in spans.items()} == {0: 2, 1: 2, 2: 2}  # each rank ran once
    windows = sorted((min(s for s, _ in v), max(e for _, e in v)) for v in spans.values())
    for (_, end), (start, _) in itertools.pairwise(windows):
        assert end <= start, f"two gangs ran at once: {json.dumps(windows)}"

    # The manifest records every member of each input's attempt.
    uid = kube.kubectl("get", "kb", "gangs", "-n", ns, "-o", "jsonpath={.metadata.uid}").stdout
    home = layout.batch_home(resolve().storage_root, ns, "gangs", uid)
    wait_for(
        lambda: (h := read_manifest(home)) and h.phase == "SUCCEEDED",
        timeout=30,
        what="the final manifest",
    )
    shard = read_shard(home, 0)
    assert shard is not None
    for index in ("0", "1", "2"):
        (attempt,) = shard.inputs[index].attempts
        assert attempt.pod == f"gangs-{index}-1" and attempt.outcome == "success"
        assert [(m.rank, m.pod) for m in attempt.members or []] == [
            (0, f"gangs-{index}-1-0"),
            (1, f"gangs-{index}-1-1"),
        ]
        assert (attempt.members or [])[0].outcome == "succeeded"


# --------------------------------------------------------------------------- bad input


def refusal(kube: Kube, ns: str, kind: str, name: str, spec: dict[str, Any]) -> str:
    """What `kubectl apply` says when the API server refuses the object (asserts it did)."""
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}}
    applied = subprocess.run(
        ["kubectl", "--kubeconfig", kube.kubeconfig, "apply", "-n", ns, "-f", "-"],
        input=json.dumps({**body, "spec": spec}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert applied.returncode != 0, f"{kind} {name} was admitted"
    return applied.stderr


def test_bad_hosts_are_refused_at_admission_naming_the_field(kube: Kube, ns: str) -> None:
    said = refusal(kube, ns, "KineticJob", "none", sh("true", hosts=0))
    assert "spec.hosts" in said and "1" in said
    # A multi-host slice fixes its own host count (tpu-v5e-16 is 4 hosts of 4 chips).
    said = refusal(kube, ns, "KineticJob", "slice", sh("true", hosts=2, accelerator="tpu-v5e-16"))
    assert "spec.hosts is 2" in said and "tpu-v5e-16" in said and "set spec.hosts to 4" in said
    batch = {
        "template": {"function": {"payloadURI": "gs://kinetic/x", "sha256": "0" * 64}, "hosts": 2},
        "inputs": {"count": 4},
        "chunkSize": 2,
    }
    said = refusal(kube, ns, "KineticBatch", "chunks", batch)
    assert "spec.chunkSize" in said and "set spec.chunkSize to 1" in said
    assert not kube.kubectl("get", "kj,kb", "-n", ns, "-o", "name").stdout.strip()


def test_a_member_name_taken_by_another_jobs_pod_fails_this_job_not_that_one(
    kube: Kube, ns: str
) -> None:
    # Job "clash" attempt 1 rank 1 and job "clash-1" attempt 1 are both Pod clash-1-1.
    job(kube, ns, "clash-1", sh(f"sleep 8; printf mine > {TERM_LOG}"))
    wait_for(lambda: "clash-1-1" in pods(kube, ns), timeout=60, what="clash-1's Pod")
    job(kube, ns, "clash", sh("sleep 600", hosts=2))
    status = ended_status(kube, "kj", ns, "clash", timeout=120)
    assert status["phase"] == "FAILED"
    assert "Pod clash-1-1 already exists and belongs to KineticJob clash-1" in status["message"]
    assert "rename" in status["message"]
    other = ended_status(kube, "kj", ns, "clash-1", timeout=120)
    assert (other["phase"], other["result"]) == ("SUCCEEDED", "mine")
    wait_for(lambda: not live(kube, ns), timeout=60, what="no live Pod in the namespace")
