"""`kinetic doctor` on the real cluster, run as a user runs it: the installed command, in a shell.

(a) Everything in place: seven ✓ lines in order and exit 0; ``-o json`` says the same,
    the webhook probe stored nothing and the storage probe is gone.
(b) A context whose API server does not answer (a closed port on its address): ✗ on the
    first line with the fix, every later check skipped, exit 1.
(c) A ServiceAccount with no RoleBinding: the permissions check fails, exit 1, and its fix
    names that account; storage is judged as it is (it passes: its root and credentials
    are the client's, not the API server's). Running the fix's commands makes it pass.

The webhook's own failures (unreachable, failing open) are judged in
tests/unit/api/test_doctor.py only: making the webhook unreachable would mean changing
the shared cluster's webhook configuration or operator under every other test.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from kinetic_testing.cluster import KINETIC, service_account_kubeconfig
from kube_helpers import Kube, leader_pod_name, wait_for, wait_operator_ready

pytestmark = pytest.mark.integration

CHECKS = ["context", "crds", "operator", "leader", "webhook", "storage", "permissions"]


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KINETIC, "doctor", *args],
        env={**env, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def lines(stdout: str) -> list[tuple[str, str]]:
    """Each check's mark and name, from its first line (fixes and wrapped text are indented)."""
    return [(line[0], line.split()[1]) for line in stdout.splitlines() if line[:1] in "✓✗-"]


def results(env: dict[str, str], *args: str) -> tuple[int, dict[str, dict[str, Any]]]:
    """The exit status and, by check name, the results ``-o json`` printed."""
    out = doctor(env, *args, "-o", "json")
    listed = json.loads(out.stdout)
    assert [r["name"] for r in listed] == CHECKS, out.stdout
    return out.returncode, {r["name"]: r for r in listed}


def test_everything_in_place_passes(kube: Kube, namespace: str, client_env: dict[str, str]) -> None:
    wait_operator_ready(kube)
    out = doctor(client_env, "-n", namespace)
    assert out.returncode == 0, out.stdout + out.stderr
    assert lines(out.stdout) == [("✓", name) for name in CHECKS], out.stdout
    assert "fix:" not in out.stdout

    code, found = results(client_env, "-n", namespace)
    assert code == 0
    assert {r["status"] for r in found.values()} == {"ok"}
    assert {r["fix"] for r in found.values()} == {None}
    assert kube.api.configuration.host in found["context"]["detail"]
    # The leader line names the Pod whose replica holds the Lease.
    assert found["leader"]["detail"].startswith(f"held by {leader_pod_name(kube)} ("), found
    assert (
        'admission webhook "kinetic-job-spec.kinetic.dev" denied the request'
        in (found["webhook"]["detail"])
    )
    # The probes leave nothing behind: a dry run stores nothing, the storage probe is deleted.
    stored = kube.kubectl("get", "kineticjobs", "-n", namespace, "-o", "name").stdout
    assert stored.strip() == ""
    probe = re.search(r"deleted (\S+) under (\S+)$", found["storage"]["detail"])
    assert probe is not None, found["storage"]
    assert probe.group(2).endswith(f"/namespaces/{namespace}/")
    assert probe.group(1).startswith(probe.group(2) + "uploads/kinetic-doctor-")
    from kinetic import storage

    assert not storage.exists(probe.group(1))


def closed_port(host: str) -> tuple[str, int]:
    """An address on which nothing listens: a port of ``host`` just given back (the API
    server's own address on the local cluster, 10.244.0.1), else of the loopback."""
    for candidate in (host, "127.0.0.1"):
        try:
            with socket.socket() as s:
                s.bind((candidate, 0))
                return candidate, s.getsockname()[1]
        except OSError:
            continue
    raise AssertionError("no local address to find a closed port on")


def test_an_api_server_that_does_not_answer_fails_first_and_skips_the_rest(
    kube: Kube, client_env: dict[str, str], tmp_path: Path
) -> None:
    host, port = closed_port(urlparse(kube.api.configuration.host).hostname or "127.0.0.1")
    cfg = yaml.safe_load(Path(kube.kubeconfig).read_text())
    for cluster in cfg["clusters"]:
        cluster["cluster"]["server"] = f"https://{host}:{port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(cfg))
    env = {**client_env, "KUBECONFIG": str(kubeconfig)}

    out = doctor(env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert lines(out.stdout) == [("✗", "context")] + [("-", name) for name in CHECKS[1:]]
    assert f"https://{host}:{port} does not answer" in out.stdout
    assert "fix: check that the cluster runs" in out.stdout

    code, found = results(env)
    assert code == 1
    assert found["context"]["status"] == "failed"
    assert "cluster-info" in found["context"]["fix"]
    for name in CHECKS[1:]:
        assert found[name] == {
            "name": name,
            "status": "skipped",
            "detail": "the context check failed",
            "fix": None,
        }


def test_an_identity_that_may_not_create_jobs_fails_the_permissions_check(
    kube: Kube, namespace: str, client_env: dict[str, str], tmp_path: Path
) -> None:
    account = f"system:serviceaccount:{namespace}:onlooker"
    kubeconfig = service_account_kubeconfig(kube, namespace, "onlooker", tmp_path / "kubeconfig")
    env = {k: v for k, v in client_env.items() if k != "KINETIC_NAMESPACE"}
    env["KUBECONFIG"] = str(kubeconfig)

    out = doctor(env)  # the namespace is the context's
    assert out.returncode == 1, out.stdout + out.stderr
    assert lines(out.stdout)[-1] == ("✗", "permissions"), out.stdout

    code, found = results(env)
    assert code == 1
    assert found["context"]["status"] == "ok"
    permissions = found["permissions"]
    assert permissions["status"] == "failed"
    assert permissions["detail"].startswith(
        f"{account} may not create kineticjobs.kinetic.dev in {namespace}"
    )
    assert f"--serviceaccount={namespace}:onlooker" in permissions["fix"]
    # Storage is the client's own: the account's missing rights do not touch it.
    assert found["storage"]["status"] == "ok", found["storage"]
    # What it may not read is reported as unknown, not as absent.
    assert "may not read CustomResourceDefinitions" in found["crds"]["detail"]
    assert "may not list Deployments" in found["operator"]["detail"]
    assert "refused the probe before the webhook saw it" in found["webhook"]["detail"]

    # The fix's commands, run by an administrator, are what this identity lacked.
    for command in re.findall(r"`(kubectl [^`]+)`", permissions["fix"]):
        args = shlex.split(command)
        kube.kubectl(*args[1:])

    def granted() -> dict[str, dict[str, Any]] | None:
        _, now = results(env)
        return now if now["permissions"]["status"] == "ok" else None

    now = wait_for(granted, 30, 1, "the granted role to take effect")
    assert isinstance(now, dict)
    assert now["webhook"]["status"] == "ok", now["webhook"]  # the probe reaches the webhook
