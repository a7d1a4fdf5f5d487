"""A gang member's Pod: its name, labels, hostname and the rendezvous environment."""

from __future__ import annotations

from typing import Any

import pytest
from kinetic.model.resources import KineticJobSpec
from kinetic_operator.logic.podspec import Owner, build_job_pod, gang_member, gang_service, job_home
from kinetic_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(
    storage_root="gs://kinetic/root",
    default_image="runner:1",
    runner_image="kinetic-runner:7",
    runner_pythons=["3.12"],
    runner_service_account="kinetic-runner",
    runner_command=["python", "-m", "kinetic.runtime.runner"],
)
OWNER = Owner(name="kj", namespace="ns", uid="uid-1")
HOME = job_home(OWNER, SETTINGS)
PAYLOAD = "gs://kinetic/root/namespaces/ns/uploads/kj-0123456789abcdef/payload.pkl"


def attempt_pod(**extra: Any) -> dict[str, Any]:
    """Attempt 1 of a function job as it would run on one host."""
    spec = KineticJobSpec.model_validate(
        {"function": {"payloadURI": PAYLOAD, "sha256": "ab" * 32}, "hosts": 2, **extra}
    )
    return build_job_pod(OWNER, spec, SETTINGS, 1)


def env(pod: dict[str, Any]) -> dict[str, Any]:
    """name -> value, or the valueFrom of a variable the kubelet fills in."""
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_a_member_is_named_and_labelled_by_its_rank_under_the_gang_service():
    m = gang_member(attempt_pod(), OWNER, 1, 2, dns=True, home=HOME)
    meta, spec = m["metadata"], m["spec"]
    assert meta["name"] == "kj-a1-r1"
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "kinetic",
        "kinetic.dev/job": "kj",
        "kinetic.dev/attempt": "1",
        "kinetic.dev/rank": "1",
    }
    assert (spec["hostname"], spec["subdomain"]) == ("kj-a1-r1", "kj-gang")
    assert meta["ownerReferences"][0]["uid"] == "uid-1"


def test_the_attempt_pod_it_is_made_from_is_left_alone():
    pod = attempt_pod()
    gang_member(pod, OWNER, 0, 2, dns=False, home=HOME)
    assert (
        pod["metadata"]["name"] == "kj-a1" and "kinetic.dev/rank" not in pod["metadata"]["labels"]
    )


def test_with_dns_every_rank_dials_rank_0_by_name():
    for rank in (0, 1):
        e = env(gang_member(attempt_pod(), OWNER, rank, 2, dns=True, home=HOME))
        assert e["MASTER_ADDR"] == "kj-a1-r0.kj-gang.ns.svc.cluster.local"
        assert e["KINETIC_COORDINATOR_ADDRESS"] == "kj-a1-r0.kj-gang.ns.svc.cluster.local:29500"
        assert (e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"]) == (str(rank), "2", "0")
        assert (e["KINETIC_PROCESS_ID"], e["KINETIC_NUM_PROCESSES"]) == (str(rank), "2")
        assert e["MASTER_PORT"] == "29500"


def test_without_dns_rank_1_dials_rank_0s_ip():
    e = env(gang_member(attempt_pod(), OWNER, 1, 2, dns=False, coordinator="10.0.0.7", home=HOME))
    assert e["MASTER_ADDR"] == "10.0.0.7"
    assert e["KINETIC_COORDINATOR_ADDRESS"] == "10.0.0.7:29500"


def test_without_dns_rank_0_learns_its_own_ip_from_the_downward_api():
    e = env(gang_member(attempt_pod(), OWNER, 0, 2, dns=False, home=HOME))
    assert e["MASTER_ADDR"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert e["KINETIC_COORDINATOR_ADDRESS"] == "$(MASTER_ADDR):29500"
    # $(MASTER_ADDR) is expanded by the kubelet only from a variable defined before it
    (container,) = gang_member(attempt_pod(), OWNER, 0, 2, dns=False)["spec"]["containers"]
    order = [v["name"] for v in container["env"]]
    assert order.index("MASTER_ADDR") < order.index("KINETIC_COORDINATOR_ADDRESS")


def test_without_dns_a_rank_above_0_needs_the_coordinator():
    with pytest.raises(ValueError, match="rank 0's Pod IP"):
        gang_member(attempt_pod(), OWNER, 1, 2, dns=False, home=HOME)


def test_the_gangs_variables_win_over_the_users_own():
    pod = attempt_pod(env=[{"name": "MASTER_ADDR", "value": "evil"}, {"name": "FOO", "value": "1"}])
    m = gang_member(pod, OWNER, 1, 2, dns=True, home=HOME)
    (container,) = m["spec"]["containers"]
    names = [v["name"] for v in container["env"]]
    assert names.count("MASTER_ADDR") == 1
    assert env(m)["MASTER_ADDR"] == "kj-a1-r0.kj-gang.ns.svc.cluster.local" and env(m)["FOO"] == "1"


def test_only_rank_0_writes_the_jobs_result():
    assert HOME is not None
    rank0 = env(gang_member(attempt_pod(), OWNER, 0, 2, dns=True, home=HOME))
    rank1 = env(gang_member(attempt_pod(), OWNER, 1, 2, dns=True, home=HOME))
    assert rank0["KINETIC_RESULT_URI"] == HOME.result_uri
    assert rank1["KINETIC_RESULT_URI"] == HOME.member_result_uri("kj-a1-r1")
    assert rank1["KINETIC_RESULT_URI"] != HOME.result_uri


def test_a_debug_job_waits_for_a_debugger_on_rank_0_only():
    rank0 = env(gang_member(attempt_pod(debug=True), OWNER, 0, 2, dns=True, home=HOME))
    rank1 = env(gang_member(attempt_pod(debug=True), OWNER, 1, 2, dns=True, home=HOME))
    assert rank0["KINETIC_DEBUG_PORT"] == "5678"
    assert "KINETIC_DEBUG_PORT" not in rank1


def test_on_tpu_every_member_knows_its_worker_id_and_every_host():
    e = env(gang_member(attempt_pod(), OWNER, 2, 4, dns=True, tpu=True, home=HOME))
    assert e["TPU_WORKER_ID"] == "2"
    assert e["TPU_WORKER_HOSTNAMES"] == (
        "kj-a1-r0.kj-gang.ns.svc.cluster.local,kj-a1-r1.kj-gang.ns.svc.cluster.local,kj-a1-r2.kj-gang.ns.svc.cluster.local,kj-a1-r3.kj-gang.ns.svc.cluster.local"
    )
    assert "TPU_WORKER_ID" not in env(gang_member(attempt_pod(), OWNER, 1, 2, dns=True))


@pytest.mark.parametrize(
    "owner, label",
    [
        (OWNER, "kinetic.dev/job"),
        (Owner(name="g", namespace="ns", uid="uid-2", kind="KineticBatch"), "kinetic.dev/batch"),
    ],
)
def test_the_gang_service_is_headless_and_selects_the_owners_pods(owner, label):
    svc = gang_service(owner)
    assert (svc["kind"], svc["metadata"]["name"]) == ("Service", f"{owner.name}-gang")
    assert svc["metadata"]["namespace"] == "ns"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True  # found before anyone is ready
    assert svc["spec"]["selector"] == {label: owner.name}
    assert svc["metadata"]["ownerReferences"] == [owner.reference()]
    assert svc["metadata"]["ownerReferences"][0]["kind"] == owner.kind
