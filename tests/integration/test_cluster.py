"""The local cluster is a working Kubernetes: Jobs, logs, deletion, scheduling, auth.

What the operator and the tests rely on, checked against the Kubernetes API only
(plus kubectl), so it runs on the local cluster and on kind alike.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from kube_helpers import Kube, wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

IMAGE = "busybox:1.36"


def job(name: str, script: str, backoff: int = 0) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            backoff_limit=backoff,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[
                        client.V1Container(name="main", image=IMAGE, command=["sh", "-c", script])
                    ],
                )
            ),
        ),
    )


def pod(name: str, script: str, **container_kw) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=5,
            containers=[
                client.V1Container(
                    name="main", image=IMAGE, command=["sh", "-c", script], **container_kw
                )
            ],
        ),
    )


def job_condition(kube: Kube, ns: str, name: str) -> str | None:
    j = kube.batch.read_namespaced_job(name, ns)
    for c in j.status.conditions or []:
        if c.status == "True" and c.type in ("Complete", "Failed"):
            return c.type
    return None


def job_pod(kube: Kube, ns: str, name: str) -> client.V1Pod:
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"job-name={name}").items
    assert len(pods) == 1, [p.metadata.name for p in pods]
    return pods[0]


def terminated(p: client.V1Pod):
    return p.status.container_statuses[0].state.terminated


def test_job_completes_and_logs_come_through_the_api(kube: Kube, namespace: str):
    kube.batch.create_namespaced_job(namespace, job("hello", "echo hello"))
    cond = wait_for(lambda: job_condition(kube, namespace, "hello"), 90, what="Job hello")
    assert cond == "Complete"
    p = job_pod(kube, namespace, "hello")
    assert p.status.phase == "Succeeded"
    assert terminated(p).exit_code == 0 and terminated(p).reason == "Completed"
    assert kube.core.read_namespaced_pod_log(p.metadata.name, namespace).strip() == "hello"
    out = kube.kubectl("logs", "-n", namespace, p.metadata.name)
    assert out.stdout.strip() == "hello"


def test_tail_lines(kube: Kube, namespace: str):
    kube.batch.create_namespaced_job(
        namespace, job("lines", "for i in 1 2 3 4 5; do echo line$i; done")
    )
    assert (
        wait_for(lambda: job_condition(kube, namespace, "lines"), 90, what="Job lines")
        == "Complete"
    )
    name = job_pod(kube, namespace, "lines").metadata.name
    assert kube.core.read_namespaced_pod_log(name, namespace, tail_lines=2) == "line4\nline5\n"
    out = kube.kubectl("logs", "-n", namespace, name, "--tail=1")
    assert out.stdout == "line5\n"


def test_failing_command_fails_the_job_with_its_exit_code(kube: Kube, namespace: str):
    kube.batch.create_namespaced_job(namespace, job("boom", "echo about to fail; exit 3"))
    assert wait_for(lambda: job_condition(kube, namespace, "boom"), 90, what="Job boom") == "Failed"
    p = job_pod(kube, namespace, "boom")
    assert p.status.phase == "Failed"
    assert terminated(p).exit_code == 3
    assert terminated(p).reason == "Error"


def test_termination_message_reaches_pod_status(kube: Kube, namespace: str):
    script = 'echo "result: 42" > /dev/termination-log; exit 1'
    kube.core.create_namespaced_pod(namespace, pod("msg", script))
    p = wait_for(
        lambda: (lambda q: q if q.status.phase in ("Succeeded", "Failed") else None)(
            kube.core.read_namespaced_pod("msg", namespace)
        ),
        60,
        what="pod msg to finish",
    )
    assert terminated(p).exit_code == 1
    assert terminated(p).message.strip() == "result: 42"


def test_fallback_to_logs_on_error(kube: Kube, namespace: str):
    kube.core.create_namespaced_pod(
        namespace,
        pod(
            "fallback",
            "echo first; echo last words; exit 7",
            termination_message_policy="FallbackToLogsOnError",
        ),
    )
    p = wait_for(
        lambda: (lambda q: q if q.status.phase == "Failed" else None)(
            kube.core.read_namespaced_pod("fallback", namespace)
        ),
        60,
        what="pod fallback to fail",
    )
    assert terminated(p).exit_code == 7
    assert terminated(p).message.strip().endswith("last words")


def test_env_and_downward_api(kube: Kube, namespace: str):
    body = pod(
        "envpod",
        'echo "$GREETING $MY_NAME $MY_NS $MY_APP"',
        env=[
            client.V1EnvVar(name="GREETING", value="hi"),
            client.V1EnvVar(
                name="MY_NAME",
                value_from=client.V1EnvVarSource(
                    field_ref=client.V1ObjectFieldSelector(field_path="metadata.name")
                ),
            ),
            client.V1EnvVar(
                name="MY_NS",
                value_from=client.V1EnvVarSource(
                    field_ref=client.V1ObjectFieldSelector(field_path="metadata.namespace")
                ),
            ),
            client.V1EnvVar(
                name="MY_APP",
                value_from=client.V1EnvVarSource(
                    field_ref=client.V1ObjectFieldSelector(field_path="metadata.labels['app']")
                ),
            ),
        ],
    )
    body.metadata.labels = {"app": "demo"}
    kube.core.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: kube.core.read_namespaced_pod("envpod", namespace).status.phase == "Succeeded",
        60,
        what="pod envpod to succeed",
    )
    assert (
        kube.core.read_namespaced_pod_log("envpod", namespace).strip()
        == f"hi envpod {namespace} demo"
    )


def _pgrep(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def test_deleting_a_running_pod_kills_its_process(kube: Kube, namespace: str):
    marker = f"kinetic-marker-{uuid.uuid4().hex[:10]}"
    # `exec -a` is bash-only; a unique argument to sleep is visible to pgrep instead.
    kube.core.create_namespaced_pod(namespace, pod("sleeper", f"sleep 300 || true # {marker}"))
    wait_for(
        lambda: kube.core.read_namespaced_pod("sleeper", namespace).status.phase == "Running",
        60,
        what="pod sleeper to run",
    )
    if kube.is_local:
        wait_for(lambda: _pgrep(marker), 10, what="the sleeper process")
    kube.core.delete_namespaced_pod("sleeper", namespace)

    def gone() -> bool:
        try:
            kube.core.read_namespaced_pod("sleeper", namespace)
            return False
        except client.ApiException as e:
            return e.status == 404

    # A 1.20 kubelet removes a deleted Pod from the API on its status sync (every 10 s) once
    # the Pod's resources are reclaimed, and retries a failed kill only after 10 s; a busy
    # node's shim can fail a kill or two, so the wait allows several of those rounds.
    wait_for(gone, 180, what="pod sleeper to disappear")
    if kube.is_local:
        wait_for(lambda: not _pgrep(marker), 10, what="the sleeper process to be gone")


def test_deleting_finished_pods_with_a_grace_period_removes_them_and_a_new_pod_still_runs(
    kube: Kube, namespace: str
):
    """What a batch's deletion does to the node: many finished Pods deleted with the
    default grace at once (each needs the node's own DELETE), and a new Pod created
    meanwhile. Every finished Pod goes, and the new one runs and succeeds."""
    names = [f"done-{i}" for i in range(12)]
    for name in names:
        kube.core.create_namespaced_pod(namespace, pod(name, "true"))

    def phase(name: str) -> str | None:
        try:
            return kube.core.read_namespaced_pod(name, namespace).status.phase
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    wait_for(lambda: all(phase(n) == "Succeeded" for n in names), 120, what="pods to finish")
    for name in names:  # grace period 5 s (the pod's own): the node must remove each
        kube.core.delete_namespaced_pod(name, namespace)
    kube.core.create_namespaced_pod(namespace, pod("newcomer", "echo arrived"))
    wait_for(lambda: all(phase(n) is None for n in names), 60, what="finished pods to go")
    wait_for(lambda: phase("newcomer") == "Succeeded", 60, what="the new pod to succeed")
    log = kube.core.read_namespaced_pod_log("newcomer", namespace)
    assert log.strip() == "arrived"


def test_pods_deleted_as_they_finish_are_removed(kube: Kube, namespace: str):
    """The garbage collector deletes an orphan's Pods the moment they are created, with
    their grace period; some are still starting, some already done. Each must go: a Pod
    whose process ended just as its deletion arrived once stayed Terminating for good."""
    names = [f"short-{i}" for i in range(30)]
    for name in names:
        kube.core.create_namespaced_pod(namespace, pod(name, "true"))
        kube.core.delete_namespaced_pod(name, namespace, grace_period_seconds=30)

    def left() -> list[str]:
        return [p.metadata.name for p in kube.core.list_namespaced_pod(namespace).items]

    wait_for(lambda: not left(), 90, what="every deleted pod to go")


def test_gpu_pod_stays_pending_with_the_schedulers_reason(kube: Kube, namespace: str):
    body = pod(
        "greedy",
        "echo never",
        resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "64"}),
    )
    kube.core.create_namespaced_pod(namespace, body)

    def unschedulable():
        p = kube.core.read_namespaced_pod("greedy", namespace)
        for c in p.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c
        return None

    cond = wait_for(unschedulable, 60, what="the scheduler to mark greedy Unschedulable")
    assert "Insufficient nvidia.com/gpu" in cond.message
    assert kube.core.read_namespaced_pod("greedy", namespace).status.phase == "Pending"


def test_service_account_token_authenticates(kube: Kube, namespace: str):
    kube.core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="robot"))
    )
    req = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    )
    token = wait_for(
        lambda: (
            kube.core.create_namespaced_service_account_token("robot", namespace, req).status.token
        ),
        30,
        what="a token for robot",
    )
    cfg = client.Configuration()
    cfg.host = kube.api.configuration.host
    cfg.ssl_ca_cert = kube.api.configuration.ssl_ca_cert
    cfg.verify_ssl = kube.api.configuration.verify_ssl
    cfg.api_key = {"authorization": f"Bearer {token}"}
    core = client.CoreV1Api(client.ApiClient(cfg))
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_secret(namespace)
    assert err.value.status == 403  # authenticated (not 401), but not allowed
    assert f"system:serviceaccount:{namespace}:robot" in err.value.body
    # Grant it one thing and watch it work.
    rbac = client.RbacAuthorizationV1Api(kube.api)
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="robot-reads-pods"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name="robot", namespace=namespace)
            ]
            if hasattr(client, "RbacV1Subject")
            else [client.V1Subject(kind="ServiceAccount", name="robot", namespace=namespace)],
        ),
    )
    wait_for(lambda: core.list_namespaced_pod(namespace) is not None, 10, what="RBAC to apply")


def test_kubectl_logs_follow(kube: Kube, namespace: str):
    kube.core.create_namespaced_pod(
        namespace, pod("ticker", "for i in 1 2 3; do echo tick$i; sleep 1; done; echo done")
    )
    wait_for(
        lambda: (
            kube.core.read_namespaced_pod("ticker", namespace).status.phase
            in ("Running", "Succeeded")
        ),
        60,
        what="pod ticker to start",
    )
    t0 = time.monotonic()
    out = kube.kubectl("logs", "-f", "-n", namespace, "ticker", timeout=60)
    assert out.stdout.split() == ["tick1", "tick2", "tick3", "done"]
    assert time.monotonic() - t0 < 30


def test_active_deadline_kills_the_pod(kube: Kube, namespace: str):
    body = pod("late", "sleep 300")
    body.spec.active_deadline_seconds = 2
    kube.core.create_namespaced_pod(namespace, body)
    p = wait_for(
        lambda: (lambda q: q if q.status.phase == "Failed" else None)(
            kube.core.read_namespaced_pod("late", namespace)
        ),
        60,
        what="pod late to fail",
    )
    assert p.status.reason == "DeadlineExceeded"
