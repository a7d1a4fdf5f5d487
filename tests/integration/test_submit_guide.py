"""`kinetic batches submit` and the batch-submission guide's behaviour, on the real cluster.

What happens when an object is refused (continue or stop, by flag or by the
file's ``continue_on_error``; a refusal at creation), the live policy's
``dryRunDefault`` and ``requireConfirmation`` as a user meets them (also as a
user who may only create jobs in their own namespace), ``allowedNamespaces:
["*"]``, ``defaultGpuType`` and ``maxJobsPerRequest``, the guide's GPU counts
turned into the catalog's accelerator, and the guide's three examples as
written (tests/guide_examples.py).

Every policy edit goes through ``test_policy_live``'s fixture, which restores
the chart's policy afterwards: other engineers run tests on the same cluster.
"""

from __future__ import annotations

import base64
import json
import os
import pty
import re
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from guide_examples import EXAMPLES, PYTORCH, with_projects
from kinetic_testing.cluster import EFFECT_SECONDS, KINETIC, refused_for, stored, submit
from kinetic_testing.cluster import batch_json as batch
from kinetic_testing.cluster import job_json as job
from kube_helpers import Kube, fresh_namespace, wait_for

pytestmark = pytest.mark.integration

SOURCE = "kinetic-policy in kinetic-system"
# Refused by the API server (not by the local checks): object names are DNS subdomains.
BAD_NAME = "Bad_Name"
BAD_NAME_REASON = "a lowercase RFC 1123 subdomain must consist of lower case"

PolicySetter = Callable[[dict[str, str]], None]
RBAC = "rbac.authorization.k8s.io"


def documents(*texts: str) -> str:
    return "\n---\n".join(texts)


def train(name: str, ns: str, **keys: Any) -> dict[str, Any]:
    """One job of a guide request."""
    return {"type": "training", "name": name, "project": ns, "command": "true", **keys}


def request(*jobs: dict[str, Any], **keys: Any) -> str:
    return json.dumps({"jobs": list(jobs), **keys}, indent=2)


def names(kube: Kube, ns: str) -> list[str]:
    return sorted(n.split("/", 1)[1] for n in stored(kube, ns))


def line_of(out: str, *parts: str) -> str:
    """The one output line holding every part (the summary prints one line per object)."""
    found = [line for line in out.splitlines() if all(p in line for p in parts)]
    assert len(found) == 1, (parts, out)
    return found[0]


# ----------------------------------------------------------------------- on a refusal


@pytest.mark.parametrize("how", ["default", "flag", "file"])
def test_continue_on_error_creates_the_others_and_names_each_refusal(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path, how: str
) -> None:
    """The guide's default (continue_on_error true), the flag, and the file's key."""
    if how in ("default", "flag"):
        text = documents(job("good", namespace), job(BAD_NAME, namespace), job("after", namespace))
        args: tuple[str, ...] = ("--yes",) + (("--continue-on-error",) if how == "flag" else ())
    else:
        jobs = (train("good", namespace), train(BAD_NAME, namespace), train("after", namespace))
        text, args = request(*jobs, continue_on_error=True, dry_run=False, confirmed=True), ()
    out = submit(tmp_path, client_env, text, *args)
    assert out.returncode == 1, out.stdout + out.stderr
    assert names(kube, namespace) == ["after", "good"]
    assert "Submitted 3 objects: 2 created, 1 failed" in out.stdout
    failed = line_of(out.stdout, "failed", f"KineticJob/{BAD_NAME} in {namespace}")
    assert BAD_NAME_REASON in failed  # the API server's own message
    line_of(out.stdout, "created", f"KineticJob/good in {namespace}")
    line_of(out.stdout, "created", f"KineticJob/after in {namespace}")
    assert "1 of 3 objects were not created" in out.stderr


@pytest.mark.parametrize("how", ["flag", "file", "the flag over the file"])
def test_stop_on_error_creates_nothing_after_the_refusal(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path, how: str
) -> None:
    jobs = (train("good", namespace), train(BAD_NAME, namespace), train("after", namespace))
    args: tuple[str, ...] = ("--yes",)
    if how == "flag":
        text = documents(job("good", namespace), job(BAD_NAME, namespace), job("after", namespace))
        args += ("--stop-on-error",)
    elif how == "file":
        text = request(*jobs, continue_on_error=False)
    else:
        text = request(*jobs, continue_on_error=True)
        args += ("--stop-on-error",)
    out = submit(tmp_path, client_env, text, *args)
    assert out.returncode == 1, out.stdout + out.stderr
    assert names(kube, namespace) == ["good"]  # created before the refusal: it stays
    assert "Submitted 3 objects: 1 created, 1 failed, 1 not attempted" in out.stdout
    assert BAD_NAME_REASON in line_of(out.stdout, "failed", BAD_NAME)
    skipped = line_of(out.stdout, "not attempted", f"KineticJob/after in {namespace}")
    assert f"stopped at the failure of KineticJob/{BAD_NAME}" in skipped


@pytest.mark.parametrize("stop", [False, True])
def test_a_refusal_at_creation_goes_on_by_default_and_stops_when_asked(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path, stop: bool
) -> None:
    """A quota of one KineticJob: each dry run passes, the second job's create is refused."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "one-job"},
        "spec": {"hard": {"count/kineticjobs.kinetic.dev": "1"}},
    }
    kube.apply(namespace, quota)
    wait_for(
        lambda: kube.kubectl(
            "get", "resourcequota", "one-job", "-n", namespace, "-o", "jsonpath={.status.used}"
        ).stdout.strip(),
        what="the quota's usage to be counted",
    )
    text = documents(
        job("first", namespace), job("second", namespace), batch("third", namespace, 1)
    )
    out = submit(tmp_path, client_env, text, "--yes", *(("--stop-on-error",) if stop else ()))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "exceeded quota: one-job" in line_of(out.stdout, "failed", "KineticJob/second")
    third = f"KineticBatch/third in {namespace}"
    if stop:
        assert names(kube, namespace) == ["first"]
        line_of(out.stdout, "not attempted", third)
    else:
        assert names(kube, namespace) == ["first", "third"]
        line_of(out.stdout, "created", third)


# ----------------------------------------------------------------------- the live policy


def test_dry_run_default_previews_until_the_command_says_to_submit(
    kube: Kube,
    namespace: str,
    client_env: dict[str, str],
    tmp_path: Path,
    policy: PolicySetter,
) -> None:
    policy({"dryRunDefault": "true"})  # the client reads it at once: no operator involved
    text = job("one", namespace)

    out = submit(tmp_path, client_env, text)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Dry run ({SOURCE}: dryRunDefault)" in out.stdout
    assert "nothing was created. To submit, pass --yes or --no-dry-run." in out.stdout
    assert "could not be read" not in out.stderr
    assert names(kube, namespace) == []

    out = submit(tmp_path, client_env, text, "--no-dry-run")  # then asked: no terminal, no
    assert out.returncode == 1 and "nothing was submitted" in out.stderr
    assert names(kube, namespace) == []

    out = submit(tmp_path, client_env, text, "--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert names(kube, namespace) == ["one"]


def test_require_confirmation_wants_a_person_at_a_terminal_not_yes(
    kube: Kube,
    namespace: str,
    client_env: dict[str, str],
    tmp_path: Path,
    policy: PolicySetter,
) -> None:
    policy({"requireConfirmation": "true"})
    out = submit(tmp_path, client_env, job("scripted", namespace), "--yes")
    assert out.returncode == 1
    assert "requires a person to confirm every submission (requireConfirmation)" in out.stderr
    assert "--yes does not count" in out.stderr
    assert names(kube, namespace) == []

    path = tmp_path / "one.yaml"
    path.write_text(job("confirmed", namespace))
    code, screen = _at_a_terminal(
        [KINETIC, "batches", "submit", "-f", str(path), "--yes"], client_env, answer="y"
    )
    assert code == 0, screen
    assert "--yes does not answer for them" in screen and "Submit 1 object?" in screen
    assert names(kube, namespace) == ["confirmed"]


def test_allowed_namespaces_star_admits_a_namespace_not_listed(
    kube: Kube,
    namespace: str,
    client_env: dict[str, str],
    tmp_path: Path,
    policy: PolicySetter,
) -> None:
    # maxBatchSize shows when the edit holds; only "*" can admit this namespace.
    policy({"allowedNamespaces": '["team-x", "*"]', "maxBatchSize": "2"})
    wait_for(
        lambda: refused_for(kube, batch("b", namespace, 3), "exceeds maxBatchSize 2"),
        timeout=EFFECT_SECONDS,
        what="the edit to hold",
    )
    out = submit(tmp_path, client_env, request(train("anywhere", namespace)), "--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert names(kube, namespace) == ["anywhere"]


# ----------------------------------------------------------------------- GPU counts


def test_gpus_with_a_type_request_the_catalogs_accelerator(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path
) -> None:
    text = request(train("two-l4", namespace, image="busybox:1", gpus=2, gpu_type="l4"))
    out = submit(tmp_path, client_env, text, "--yes")
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "1 x gpu-l4x2" in out.stdout  # the preview
        spec = json.loads(
            kube.kubectl(
                "get", "kineticjob", "two-l4", "-n", namespace, "-o", "jsonpath={.spec}"
            ).stdout
        )
        assert spec["accelerator"] == "gpu-l4x2"
        assert spec["container"] == {"image": "busybox:1", "command": ["sh", "-c", "true"]}
    finally:  # no node has a GPU: its Pod could never schedule
        kube.kubectl("delete", "kineticjob", "two-l4", "-n", namespace, "--wait=false", check=False)

    text = request(train("three-l4", namespace, gpus=3, gpu_type="l4"))
    out = submit(tmp_path, client_env, text, "--yes")
    assert out.returncode == 1
    assert (
        "jobs[0] (three-l4): gpus: 3 l4 GPUs per job is not offered; l4 comes in 1, 2, 4, 8 "
        "GPUs per job: set gpus to one of those"
    ) in " ".join((out.stdout + out.stderr).split())
    assert "three-l4" not in names(kube, namespace)


# ----------------------------------------------------------------------- the guide's examples


def kinetic_jobs(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    out = kube.kubectl("get", "kineticjobs", "-n", ns, "-o", "json").stdout
    return {o["metadata"]["name"]: o["spec"] for o in json.loads(out)["items"]}


def test_the_guides_examples_submit_as_written(
    kube: Kube,
    namespace: str,
    client_env: dict[str, str],
    tmp_path: Path,
    policy: PolicySetter,
) -> None:
    """The guide's requests as it writes them (no command, gpus without a type, dry_run false,
    confirmed true); only their projects are this test's namespaces. No node has a GPU, so
    what is checked is what they create: names, images, accelerators, hosts and the Pod's
    resources, not a run."""
    policy({"defaultGpuType": "l4"})  # the client reads it at once
    with fresh_namespace(kube) as second, fresh_namespace(kube) as third:
        projects = {"project-01": namespace, "project-02": second, "project-03": third}
        outs = {
            name: submit(tmp_path, client_env, json.dumps(with_projects(example, projects)))
            for name, example in EXAMPLES.items()
        }
        for name in ("several", "across"):
            assert outs[name].returncode == 0, outs[name].stdout + outs[name].stderr
        mixed = outs["mixed"]
        assert mixed.returncode == 1  # the workspace, refused with its reason
        assert "type 'workspace' cannot be submitted" in " ".join(mixed.stdout.split())
        assert "Submitted 3 objects: 2 created, 1 failed" in mixed.stdout

        first = kinetic_jobs(kube, namespace)
        expected = {
            "job1": ("gpu-l4x2", PYTORCH),
            "job2": ("gpu-l4", PYTORCH),
            "job3": ("gpu-l4x4", "tensorflow/tensorflow:latest"),
            "model-training": ("gpu-l4x2", PYTORCH),
            "dist-training": ("gpu-l4x2", "nvcr.io/nvidia/pytorch:latest"),
            "job-a": ("gpu-l4x2", PYTORCH),
        }
        assert {n: (s["accelerator"], s["container"]["image"]) for n, s in first.items()} == (
            expected
        )
        assert not any(s["container"].get("command") for s in first.values())
        assert first["dist-training"]["hosts"] == 4
        assert {n: s["accelerator"] for n, s in kinetic_jobs(kube, second).items()} == {
            "job-b": "gpu-l4x4"
        }
        assert {n: s["accelerator"] for n, s in kinetic_jobs(kube, third).items()} == {
            "job-c": "gpu-l4"
        }
        # job1's Pod: the image as written, its own entrypoint, two GPUs.
        pod = wait_for(lambda: _pod_or_failure(kube, namespace, "job1"), what="job1's Pod")
        assert not isinstance(pod, str), f"job1 failed: {pod}"
        [container] = pod.spec.containers
        assert container.image == PYTORCH and not container.command
        assert container.resources.limits["nvidia.com/gpu"] == "2"


def _pod_or_failure(kube: Kube, ns: str, job: str) -> Any:
    """The job's first Pod, or why the operator failed the job (say, an operator that does
    not know a container may leave its command out), or None yet."""
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"kinetic.dev/job={job}").items
    if pods:
        return pods[0]
    got = kube.kubectl("get", "kineticjob", job, "-n", ns, "-o", "json").stdout
    status = json.loads(got).get("status") or {}
    return status.get("message") if status.get("phase") == "FAILED" else None


def test_without_a_default_gpu_type_a_guide_job_is_refused_naming_both_fixes(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path
) -> None:
    text = request({**train("two", namespace), "gpus": 2})
    out = submit(tmp_path, client_env, text, "--yes")
    assert out.returncode == 1
    said = " ".join((out.stdout + out.stderr).split())
    assert "jobs[0] (two): gpus: 2 GPUs of which type? Add gpu_type (one of:" in said
    assert "or ask the administrator to set defaultGpuType in the policy" in said
    assert names(kube, namespace) == []


def test_max_jobs_per_request_refuses_a_larger_request_whole(
    kube: Kube,
    namespace: str,
    client_env: dict[str, str],
    tmp_path: Path,
    policy: PolicySetter,
) -> None:
    policy({"maxJobsPerRequest": "2"})
    text = request(*(train(n, namespace) for n in ("a", "b", "c")), dry_run=False, confirmed=True)
    out = submit(tmp_path, client_env, text)
    assert out.returncode == 1
    assert (
        f"the file holds 3 jobs, more than maxJobsPerRequest 2 ({SOURCE}): nothing was "
        "submitted. Split it into files of at most 2 jobs"
    ) in " ".join(out.stderr.split())
    assert names(kube, namespace) == []
    two = request(train("a", namespace), train("b", namespace))
    out = submit(tmp_path, client_env, two, "--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert names(kube, namespace) == ["a", "b"]


def test_without_dry_run_default_set_the_command_previews_first(
    kube: Kube,
    namespace: str,
    client_env: dict[str, str],
    tmp_path: Path,
    policy: PolicySetter,
) -> None:
    """The key left empty is unset: a preview, as the guide's dry_run defaults to one. The
    file's confirmed: true answers the question but does not turn the preview off; its
    dry_run: false does."""
    policy({"dryRunDefault": ""})
    for text in (job("one", namespace), request(train("one", namespace), confirmed=True)):
        out = submit(tmp_path, client_env, text)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"Dry run ({SOURCE}: dryRunDefault)" in out.stdout
    assert names(kube, namespace) == []
    submitting = request(train("one", namespace), dry_run=False, confirmed=True)
    out = submit(tmp_path, client_env, submitting)
    assert out.returncode == 0, out.stdout + out.stderr
    assert names(kube, namespace) == ["one"]


# ----------------------------------------------------------------------- as a plain user


def test_a_user_who_may_only_submit_follows_the_policy(
    kube: Kube,
    namespace: str,
    client_env: dict[str, str],
    tmp_path: Path,
    policy: PolicySetter,
) -> None:
    """The chart lets every authenticated user get kinetic-policy (and nothing else there)."""
    env = {**client_env, "KUBECONFIG": str(_submitter(kube, namespace, tmp_path))}
    policy({"dryRunDefault": "true"})
    out = submit(tmp_path, env, job("one", namespace))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "could not be read" not in out.stderr
    assert f"Dry run ({SOURCE}: dryRunDefault)" in out.stdout
    assert names(kube, namespace) == []


def test_a_policy_the_user_cannot_read_is_no_policy_said_in_one_line(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path
) -> None:
    """A kinetic-policy where the user has no right to read it (KINETIC_OPERATOR_NAMESPACE
    pointed at their own namespace, where they may only create jobs)."""
    kube.apply(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kinetic-policy"},
            "data": {"dryRunDefault": "true"},
        },
    )
    env = {
        **client_env,
        "KUBECONFIG": str(_submitter(kube, namespace, tmp_path)),
        "KINETIC_OPERATOR_NAMESPACE": namespace,
    }
    out = submit(tmp_path, env, job("one", namespace))
    note = [line for line in out.stderr.splitlines() if "could not be read" in line]
    assert note == [
        f"kinetic-policy in {namespace} could not be read (403 Forbidden): following no policy "
        "(its defaults: preview first, no default GPU type)"
    ], out.stderr
    # No policy is its defaults: a preview first, as the guide's dry_run defaults to one.
    assert out.returncode == 0 and "Dry run" in out.stdout, out.stdout + out.stderr
    assert names(kube, namespace) == []


def _submitter(kube: Kube, ns: str, tmp_path: Path) -> Path:
    """A kubeconfig for a ServiceAccount that may only submit and follow work in ``ns``."""
    for body in (
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "submitter"}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                "name": "submitter-token",
                "annotations": {"kubernetes.io/service-account.name": "submitter"},
            },
        },
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "Role",
            "metadata": {"name": "submitter"},
            "rules": [
                {
                    "apiGroups": ["kinetic.dev"],
                    "resources": ["kineticjobs", "kineticbatches"],
                    "verbs": ["get", "list", "watch", "create"],
                }
            ],
        },
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "submitter"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "submitter",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "submitter", "namespace": ns}],
        },
    ):
        kube.apply(ns, body)
    token = wait_for(
        lambda: (kube.core.read_namespaced_secret("submitter-token", ns).data or {}).get("token"),
        what="the ServiceAccount's token",
    )
    admin = json.loads(kube.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    cluster = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "submitter", "user": {"token": base64.b64decode(token).decode()}}],
        "contexts": [
            {"name": "submitter", "context": {"cluster": "c", "user": "submitter", "namespace": ns}}
        ],
        "current-context": "submitter",
    }
    path = tmp_path / "submitter.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _at_a_terminal(
    argv: list[str], env: dict[str, str], answer: str, timeout: float = 120
) -> tuple[int, str]:
    """Run ``argv`` on a pseudo-terminal, answer its question, return (exit code, screen)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        argv,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**env, "COLUMNS": "200", "TERM": "dumb"},
        close_fds=True,
    )
    os.close(follower)
    screen, answered = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the terminal closed: the command ended
                    break
                if not chunk:
                    break
                screen += chunk
            if not answered and b"object?" in screen:
                os.write(leader, answer.encode() + b"\n")
                answered = True
            if proc.poll() is not None and not ready:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode(errors="replace"))
    return code, text.replace("\r", "")
