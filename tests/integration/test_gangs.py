"""Multi-host jobs on the real cluster: gangs of Pods that find rank 0, and fail together.

The local cluster serves cluster DNS (dnsmasq fed from the API server), so its
operator runs with the chart's default ``rendezvous: dns``: every member gets
rank 0's fully qualified name under the owner's headless Service as
MASTER_ADDR. Witnesses from inside the Pods come back as results, termination
messages or objects in the storage emulator the Pods were given.
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
from kinetic.api.kube import KubeClient
from kinetic.model import layout, names
from kinetic.model.resources import GROUP, VERSION
from kinetic_testing.cluster import sh as cluster_sh
from kube_helpers import Kube, ended_status, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

TERM_LOG = "/dev/termination-log"
BUSYBOX = "busybox:1.36"


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
    return cluster_sh(script, image=BUSYBOX, **extra)


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


def member(job: str, attempt: int, rank: int) -> str:
    return names.gang_pod_name(names.job_pod_name(job, attempt), rank)


def fqdn(job: str, ns: str, service: str | None = None) -> str:
    """Rank 0 of attempt 1's fully qualified name under the job's gang Service."""
    return f"{member(job, 1, 0)}.{service or job + '-gang'}.{ns}.svc.cluster.local"


def meet() -> dict[str, Any]:
    """Rank 0 listens on MASTER_PORT; rank 1 resolves MASTER_ADDR (every answer it got,
    from its first try on) and dials it; each tells the other its hostname."""
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
                peer, dialled, answers = conn.recv(4096).decode().split(" ", 2)
                conn.sendall(me.encode())
        return {
            "me": me,
            "peer": peer,
            "addr": addr,
            "dialled": dialled,
            "answers": answers.split(),
            "world": os.environ["WORLD_SIZE"],
            "coordinator": os.environ["KINETIC_COORDINATOR_ADDRESS"],
        }
    answers: list[str] = []
    deadline = time.monotonic() + 180
    while True:
        try:
            ip = socket.gethostbyname(addr)
            answers.append(ip)
            conn = socket.create_connection((ip, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with conn:
        conn.sendall(f"{me} {ip} {' '.join(sorted(set(answers)))}".encode())
        return {"me": me, "peer": conn.recv(256).decode()}


def test_two_host_function_ranks_find_rank_0_by_its_fully_qualified_name(
    ns: str, kube: Kube
) -> None:
    handle = kinetic.run(namespace=ns, hosts=2)(meet).run_async()
    out = handle.result(timeout=300, cleanup=False)
    name = handle.job_id
    assert (out["me"], out["peer"], out["world"]) == (member(name, 1, 0), member(name, 1, 1), "2")

    status = handle.describe()
    assert status["phase"] == "SUCCEEDED" and status["attempt"] == 1
    record = status["attempts"][-1]
    assert record["pod"] == names.job_pod_name(name, 1) and record["outcome"] == "success"
    ranks = members(status)
    assert ranks[0] == (member(name, 1, 0), "succeeded")
    assert ranks[1][0] == member(name, 1, 1) and ranks[1][1] in ("succeeded", "stopped")

    # Rank 1 found rank 0 by its fully qualified name, and only ever got rank 0's address.
    rank0 = kube.core.read_namespaced_pod(member(name, 1, 0), ns)
    assert out["addr"] == fqdn(name, ns)
    assert out["dialled"] == rank0.status.pod_ip and out["answers"] == [rank0.status.pod_ip]
    assert out["coordinator"] == f"{fqdn(name, ns)}:29500"
    assert rank0.metadata.labels["kinetic.dev/rank"] == "0"
    assert (rank0.spec.hostname, rank0.spec.subdomain) == (member(name, 1, 0), f"{name}-gang")
    # The job's headless Service names its members: the operator's (sealed, owned by it).
    (svc,) = kube.core.list_namespaced_service(ns).items
    assert svc.metadata.name == f"{name}-gang" and svc.spec.cluster_ip == "None"
    assert names.ANNOTATION_SEAL in (svc.metadata.annotations or {})
    assert svc.metadata.owner_references[0].uid == status_uid(kube, ns, name)
    # Only Pods of this namespace may reach the members (what is created: this machine's
    # bridge does not enforce NetworkPolicy).
    listed = kube.kubectl("get", "networkpolicy", "-n", ns, "-o", "json").stdout
    (policy,) = json.loads(listed)["items"]
    assert policy["metadata"]["name"] == f"{name}-gang"
    assert policy["spec"]["podSelector"] == {"matchLabels": {"kinetic.dev/job": name}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    handle.cleanup()


PYTHON = f"python:{sys.version_info.major}.{sys.version_info.minor}-slim"


def python_gang(fn: Any, hosts: int = 2) -> dict[str, Any]:
    """A container gang running ``fn`` (source of a module-level function) in the python
    stand-in image; rank 0 writes what it returns, as JSON, to its termination message."""
    import inspect

    source = textwrap.dedent(inspect.getsource(fn))
    main = (
        f"from typing import Any\n{source}\nimport json, os\nout = {fn.__name__}()\n"
        f"if os.environ['RANK'] == '0':\n    open('{TERM_LOG}', 'w').write(json.dumps(out))\n"
    )
    return {
        "container": {"image": PYTHON, "command": ["python", "-c", main]},
        "hosts": hosts,
    }


def status_uid(kube: Kube, ns: str, name: str) -> str:
    got = kube.kubectl("get", "kj", name, "-n", ns, "-o", "jsonpath={.metadata.uid}")
    return got.stdout.strip()


def created_pod(kube: Kube, ns: str, name: str) -> client.V1Pod:
    """The Pod once the operator has created it."""

    def read() -> client.V1Pod | None:
        try:
            return kube.core.read_namespaced_pod(name, ns)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    return wait_for(read, timeout=120, what=f"Pod {name}")  # type: ignore[return-value]


def test_names_others_hold_are_never_dialled(kube: Kube, ns: str) -> None:
    """Two gangs beside two traps. For ``held``, someone made a Service under the name its
    own would have: it takes another name, and the squatter's is left as it was. For
    ``lure``, someone made a namespace named like its Service holding a Service named like
    its rank 0: what a relative name reaches through the resolver's search path while rank
    0 has no address yet. Both gangs meet, and rank 1 only ever resolves rank 0's address."""
    tag = ns[-5:]
    held, lure = f"held-{tag}", f"lure-{tag}"
    kube.apply(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"{held}-gang"},
            "spec": {"clusterIP": "None", "selector": {"app": "someone-else"}},
        },
    )
    trap = f"{lure}-gang"
    kube.kubectl("create", "namespace", trap)
    try:
        kube.apply(
            trap,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": member(lure, 1, 0)},
                "spec": {"ports": [{"port": 29500}], "selector": {"app": "decoy"}},
            },
        )
        decoy_ip = kube.core.read_namespaced_service(member(lure, 1, 0), trap).spec.cluster_ip
        # What a relative name would have reached: the decoy (this is the hole closed).
        job(kube, ns, held, python_gang(meet))
        job(kube, ns, lure, python_gang(meet))
        # rank 1's environment while its Pod exists (a gang's members go once it ends)
        rank1 = {name: env_of(created_pod(kube, ns, member(name, 1, 1))) for name in (held, lure)}
        for name in (held, lure):
            status = ended_status(kube, "kj", ns, name, timeout=240)
            assert status["phase"] == "SUCCEEDED", status["message"]
            rank0 = kube.core.read_namespaced_pod(member(name, 1, 0), ns)
            answers = json.loads(status["result"])["answers"]
            assert answers == [rank0.status.pod_ip] and decoy_ip not in answers, answers
        services = {s.metadata.name for s in kube.core.list_namespaced_service(ns).items}
        (ours,) = {s for s in services if s.startswith(held)} - {f"{held}-gang"}
        assert ours.startswith(f"{held}-gang-x")
        assert kube.core.read_namespaced_pod(member(held, 1, 0), ns).spec.subdomain == ours
        assert rank1[held]["MASTER_ADDR"] == fqdn(held, ns, ours)
        kept = kube.core.read_namespaced_service(f"{held}-gang", ns)
        assert names.ANNOTATION_SEAL not in (kept.metadata.annotations or {})
        assert kept.spec.selector == {"app": "someone-else"}
        assert rank1[lure]["MASTER_ADDR"] == fqdn(lure, ns)
    finally:
        kube.kubectl("delete", "namespace", trap, "--wait=false", check=False)


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
        (r, member("trio", 1, r)) for r in range(3)
    ]
    assert members(status)[0][1] == "succeeded"

    seen = pods(kube, ns)
    for rank in (1, 2):
        env = env_of(seen[member("trio", 1, rank)])
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "3")
        assert env["MASTER_ADDR"] == fqdn("trio", ns)
        assert env["KINETIC_COORDINATOR_ADDRESS"] == f"{fqdn('trio', ns)}:29500"
        assert env["LOCAL_RANK"] == "0"
    logs = kube.core.read_namespaced_pod_log(member("trio", 1, 2), ns)
    assert f"rank 2 of 3 dials {fqdn('trio', ns)}:29500" in logs
    # Each rank's own log through the client's handle (its Pod's, or once the operator
    # reaped it, the archive); a rank the gang lacks is refused naming its hosts.
    handle = kinetic.attach("trio", namespace=ns, kube=KubeClient())
    assert handle.logs().startswith("rank 0 of 3 dials")  # rank 0, the coordinator
    assert handle.logs(rank=2).startswith("rank 2 of 3 dials")
    assert handle.tail(1, rank=1).startswith("rank 1 of 3 dials")
    with pytest.raises(ValueError) as refused:
        handle.logs(rank=3)
    assert str(refused.value) == (
        "rank=3: job trio runs on 3 hosts, ranks 0 to 2: pass a rank in that range "
        "(0, the coordinator, is the default)"
    )
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
    tail = subprocess.run(
        [*cli, "--tail", "1", "--rank", "1"],
        env=client_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.strip() == logs.stdout.strip().splitlines()[-1]
    # Rank 0 ran until it was stopped with its gang: its log was archived before that.
    uid = json.loads(kube.kubectl("get", "kj", "split", "-n", ns, "-o", "json").stdout)
    home = layout.job_home(resolve().storage_root, ns, "split", uid["metadata"]["uid"])
    for attempt in (1, 2):
        archived = storage.read_bytes(home.log_uri(member("split", attempt, 0))).decode()
        assert f"rank 0 of attempt {attempt} starts" in archived, archived
    # The handle reads the newest attempt's: rank 0's from that archive, rank 1's Pod.
    handle = kinetic.attach("split", namespace=ns)
    assert handle.logs().startswith("rank 0 of attempt 2 starts")
    assert handle.tail(5, rank=1).startswith("rank 1 of attempt 2 starts")
    wrong = subprocess.run(
        [*cli, "--rank", "2"], env=client_env, capture_output=True, text=True, timeout=120
    )
    assert wrong.returncode == 1
    said = " ".join((wrong.stdout + wrong.stderr).split())
    assert "rank=2: job split runs on 2 hosts, ranks 0 to 1" in said, said


def test_member_deleted_mid_run_is_a_disruption_and_the_gang_reruns(kube: Kube, ns: str) -> None:
    script = f"""
        [ "$KINETIC_ATTEMPT" = 1 ] && sleep 600
        printf 'attempt %s rank %s' "$KINETIC_ATTEMPT" "$RANK" > {TERM_LOG}
    """
    job(kube, ns, "lose", sh(script, hosts=2, retries=0))

    def both_running() -> bool:
        seen = pods(kube, ns)
        return all(
            (p := seen.get(member("lose", 1, r))) is not None and p.status.phase == "Running"
            for r in (0, 1)
        )

    wait_for(both_running, timeout=180, what="both members of attempt 1 running")
    kube.core.delete_namespaced_pod(member("lose", 1, 1), ns)
    status = ended_status(kube, "kj", ns, "lose", timeout=240)
    assert status["phase"] == "SUCCEEDED", status["message"]
    assert status["result"] == "attempt 2 rank 0"
    # Free: retries was 0, and the gang re-ran whole.
    assert (status["attempt"], status["failures"], status["disruptions"]) == (2, 0, 1)
    first = status["attempts"][0]
    assert first["outcome"] == "disruption"
    assert {r: o for r, (_, o) in members(status, 0).items()} == {0: "stopped", 1: "gone"}
    wait_for(
        lambda: member("lose", 1, 0) not in live(kube, ns),
        timeout=60,
        what="rank 0 of attempt 1 gone",
    )


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
        unit = names.input_pod_name("gangs", int(index), 1)
        assert attempt.pod == unit and attempt.outcome == "success"
        assert [(m.rank, m.pod) for m in attempt.members or []] == [
            (0, names.gang_pod_name(unit, 0)),
            (1, names.gang_pod_name(unit, 1)),
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
