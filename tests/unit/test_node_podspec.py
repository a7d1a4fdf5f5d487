"""Pure logic of the process node: spec -> process, resources, exit -> status."""

from decimal import Decimal
from pathlib import Path

import pytest
from kinetic_dev import podspec as ps


def pod(**spec_overrides):
    spec = {
        "containers": [
            {
                "name": "main",
                "image": "ignored",
                "command": ["sh", "-c"],
                "args": ["echo $(GREETING) $$(x)"],
            }
        ],
        "restartPolicy": "Never",
        "nodeName": "kinetic-node",
    }
    spec.update(spec_overrides)
    return {
        "metadata": {
            "name": "p1",
            "namespace": "ns1",
            "uid": "0123456789abcdef",
            "labels": {"app": "demo"},
            "annotations": {"a": "b"},
        },
        "spec": spec,
    }


def test_process_spec_argv_env_cwd_and_path():
    p = pod()
    c = dict(
        p["spec"]["containers"][0],
        env=[
            {"name": "GREETING", "value": "hello"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "BOTH", "value": "$(GREETING)-$(POD)"},
        ],
    )
    spec = ps.process_spec(
        p,
        c,
        node_name="kinetic-node",
        pod_dir=Path("/x/ns1_p1"),
        base_env={"PATH": "/usr/bin", "KUBECONFIG": "/secret", "HOME": "/root"},
        bin_dir="/venv/bin",
    )
    assert spec.argv == ["sh", "-c", "echo hello $(x)"]
    assert spec.env["PATH"] == "/venv/bin:/usr/bin"
    assert "KUBECONFIG" not in spec.env
    assert spec.env["POD"] == "p1" and spec.env["NS"] == "ns1" and spec.env["APP"] == "demo"
    assert spec.env["UID"] == "0123456789abcdef" and spec.env["NODE"] == "kinetic-node"
    assert spec.env["BOTH"] == "hello-p1"
    assert spec.env["KINETIC_TERMINATION_LOG"] == "/x/ns1_p1/main.termination-log"
    assert spec.cwd == "/x/ns1_p1/work"
    assert spec.log_path == "/x/ns1_p1/main.log"


def test_working_dir_is_honoured():
    p = pod()
    c = dict(p["spec"]["containers"][0], workingDir="/tmp")
    assert ps.process_spec(p, c, node_name="n", pod_dir=Path("/d"), base_env={}).cwd == "/tmp"


def test_missing_command_is_a_clear_error():
    p = pod()
    with pytest.raises(ps.PodConfigError, match="no command"):
        ps.process_spec(
            p,
            {"name": "main", "image": "python:3.12"},
            node_name="n",
            pod_dir=Path("/d"),
            base_env={},
        )


def test_unsupported_field_ref():
    p = pod()
    c = dict(
        p["spec"]["containers"][0],
        env=[{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}],
    )
    with pytest.raises(ps.PodConfigError, match="status.phase"):
        ps.process_spec(p, c, node_name="n", pod_dir=Path("/d"), base_env={})


def test_secret_and_configmap_refs_use_lookup():
    p = pod()
    c = dict(
        p["spec"]["containers"][0],
        env=[
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {
                "name": "O",
                "valueFrom": {"configMapKeyRef": {"name": "m", "key": "gone", "optional": True}},
            },
        ],
        envFrom=[{"configMapRef": {"name": "m"}, "prefix": "CM_"}],
    )

    def lookup(kind, ns, name, key):
        data = {"secretKeyRef": {"k": "v"}, "configMapRef": {"a": "1"}, "configMapKeyRef": {}}[kind]
        return data if key == "*" else data.get(key)

    env = ps.container_env(p, c, "n", lookup)
    assert env == {"CM_a": "1", "S": "v"}


def test_pod_requests_like_the_scheduler():
    p = pod(
        containers=[
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        ],
        initContainers=[{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
    )
    r = ps.pod_requests(p)
    assert r["cpu"] == Decimal(2)
    assert r["memory"] == Decimal(1024**3)
    assert r["nvidia.com/gpu"] == Decimal(1)
    assert r["pods"] == Decimal(1)


def test_admit_reports_out_of_resource():
    alloc = {"cpu": Decimal(2), "pods": Decimal(10), "nvidia.com/gpu": Decimal(0)}
    assert ps.admit({"cpu": Decimal(1), "pods": Decimal(1)}, {"cpu": Decimal(1)}, alloc) is None
    reason, msg = ps.admit({"nvidia.com/gpu": Decimal(1), "pods": Decimal(1)}, {}, alloc)
    assert reason == "OutOfnvidia.com/gpu" and "nvidia.com/gpu" in msg
    reason, _ = ps.admit({"cpu": Decimal("1.5")}, {"cpu": Decimal(1)}, alloc)
    assert reason == "OutOfcpu"
    used = ps.add({}, {"cpu": Decimal(1)})
    assert ps.add(used, {"cpu": Decimal(1)}, -1) == {"cpu": Decimal(0)}


def test_exit_code_and_termination_message():
    assert ps.exit_code_of(3) == 3
    assert ps.exit_code_of(-9) == 137
    assert ps.exit_code_of(-15) == 143
    assert ps.termination_message("bye", "log", 1, True) == "bye"
    assert ps.termination_message("", "l1\nl2", 1, True) == "l1\nl2"
    assert ps.termination_message("", "l1\nl2", 0, True) == ""
    assert ps.termination_message("", "l1", 1, False) == ""
    long_log = "\n".join(f"line {i}" for i in range(1000))
    fb = ps.termination_message("", long_log, 2, True)
    assert len(fb.encode()) <= ps.FALLBACK_LOG_BYTES and fb.endswith("line 999")
    assert len(ps.termination_message("x" * 10000, "", 1, False)) == ps.TERMINATION_MESSAGE_LIMIT


def test_status_running_then_terminated():
    run = ps.ContainerRun("main", "img", pid=42, started_at=1000.0)
    st = ps.pod_status([], [run], "Never", 999.0)
    assert st["phase"] == "Running"
    cs = st["containerStatuses"][0]
    assert cs["state"]["running"]["startedAt"] == "1970-01-01T00:16:40Z"
    assert cs["ready"] is True
    assert {c["type"]: c["status"] for c in st["conditions"]} == {
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
    }
    assert st["podIP"] == "127.0.0.1"

    run.finished_at, run.exit_code, run.message = 1001.0, 3, "boom"
    st = ps.pod_status([], [run], "Never", 999.0)
    assert st["phase"] == "Failed"
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error" and term["message"] == "boom"
    run.exit_code = 0
    st = ps.pod_status([], [run], "Never", 999.0)
    assert st["phase"] == "Succeeded"
    assert st["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert {c["type"]: c.get("reason") for c in st["conditions"]}["Ready"] == "PodCompleted"


def test_failed_init_container_fails_pod_and_restart_keeps_running():
    init = ps.ContainerRun("init", started_at=1.0, finished_at=2.0, exit_code=1)
    app = ps.ContainerRun("main")
    assert ps.pod_phase([init], [app], "Never") == "Failed"
    app = ps.ContainerRun("main", started_at=1.0, finished_at=2.0, exit_code=1)
    app.reset_for_restart("back-off")
    assert app.restart_count == 1 and app.last_state["terminated"]["exitCode"] == 1
    assert ps.pod_phase([], [app], "OnFailure") == "Running"


def test_pod_dir_name_is_unique_per_uid():
    assert ps.pod_dir_name(pod()) == "ns1_p1_01234567"


@pytest.mark.parametrize(
    ("runs_lasting", "delays"),
    [
        # Crash loops double from 10 s up to the 5-minute cap.
        ([1, 1, 1, 1, 1, 1, 1], [10, 20, 40, 80, 160, 300, 300]),
        # A run of 10 minutes or more starts the doubling over.
        ([1, 1, 1, 600, 1, 1], [10, 20, 40, 10, 20, 40]),
        ([1, 1, 599], [10, 20, 40]),
    ],
)
def test_restart_back_off_doubles_and_resets_after_a_long_run(
    runs_lasting: list[float], delays: list[float]
) -> None:
    run = ps.ContainerRun("main")
    seen = []
    for lasted in runs_lasting:
        run.started_at, run.finished_at, run.exit_code = 1000.0, 1000.0 + lasted, 1
        seen.append(run.restart_delay())
        run.reset_for_restart("back-off")
    assert seen == delays
    assert run.restart_count == len(runs_lasting)  # the count never resets, only the delay
