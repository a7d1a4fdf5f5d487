"""A real rendezvous library meets its peers over the names the operator gives a gang.

Two Pods of a container KineticJob (``hosts: 2``) in the local cluster's JAX
stand-in (`kinetic_dev.images.jax_image`: CPU jax and jaxlib from PyPI) call
``jax.distributed.initialize`` with ``KINETIC_COORDINATOR_ADDRESS``: rank 0
serves JAX's coordination service there, rank 1 dials it by name. Then both
gather a random number each drew and their hostnames over JAX's CPU
collectives (gloo). Rank 0's termination message, the job's result, then
holds rank 1's number, which only rank 1 knew (it prints it to its own log):
no socket test, a rendezvous as training code makes it.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kinetic.model import names
from kinetic.model.resources import GROUP, VERSION
from kinetic_dev.images import jax_image
from kube_helpers import Kube, ended_status

pytestmark = pytest.mark.integration

MEET = r"""
import json, os, secrets, socket
import numpy as np
import jax
from jax.experimental import multihost_utils

rank, world = int(os.environ["KINETIC_PROCESS_ID"]), int(os.environ["KINETIC_NUM_PROCESSES"])
coordinator = os.environ["KINETIC_COORDINATOR_ADDRESS"]
print(f"rank {rank} of {world} meets at {coordinator}", flush=True)
jax.distributed.initialize(
    coordinator_address=coordinator,
    num_processes=world,
    process_id=rank,
    initialization_timeout=240,
)
token = secrets.randbelow(2**31)
host = socket.gethostname()
print(f"rank {rank} drew {token}", flush=True)
mine = np.array([token, *host.encode().ljust(64, b"\0")], dtype=np.int32)
rows = multihost_utils.process_allgather(mine)
if rank == 0:
    met = {
        "processes": jax.process_count(),
        "devices": jax.device_count(),
        "tokens": [int(row[0]) for row in rows],
        "hosts": [bytes(int(b) for b in row[1:]).rstrip(b"\0").decode() for row in rows],
        "coordinator": coordinator,
    }
    with open("/dev/termination-log", "w") as out:
        out.write(json.dumps(met))
multihost_utils.sync_global_devices("done")
jax.distributed.shutdown()
"""


def test_two_jax_processes_meet_through_the_gangs_names(
    kube: Kube, namespace: str, client_env: dict[str, str]
) -> None:
    if not kube.is_local:
        pytest.skip("the JAX stand-in image is built for the local cluster only")
    ns, job = namespace, "meet"
    kube.apply(
        ns,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "KineticJob",
            "metadata": {"name": job},
            "spec": {
                "hosts": 2,
                "container": {
                    "image": jax_image(),
                    "command": ["python", "-c", textwrap.dedent(MEET)],
                },
            },
        },
    )
    status = ended_status(kube, "kj", ns, job, timeout=420)
    assert status["phase"] == "SUCCEEDED", status.get("message")
    met = json.loads(status["result"])
    assert (met["processes"], met["devices"]) == (2, 2)  # one CPU device per process

    # The members are the gang's Pods, by rank, each under its own hostname.
    members = {m["rank"]: m["pod"] for m in status["attempts"][-1]["members"]}
    assert met["hosts"] == [names.gang_hostname(members[0]), names.gang_hostname(members[1])]

    # They met at rank 0's name under the gang's Service, not at an address.
    host, _, port = met["coordinator"].rpartition(":")
    assert port == "29500"
    with pytest.raises(ValueError):
        ipaddress.ip_address(host)
    assert host.startswith(f"{met['hosts'][0]}.{names.gang_service_name(job)}")

    # Rank 1's number reached rank 0 only through the rendezvous; rank 1's log shows it drew it.
    cli = [str(Path(sys.executable).with_name("kinetic")), "jobs", "logs", job, "-n", ns]
    logs = subprocess.run(
        [*cli, "--rank", "1"], env=client_env, capture_output=True, text=True, timeout=120
    )
    assert logs.returncode == 0, logs.stderr
    assert f"rank 1 drew {met['tokens'][1]}" in logs.stdout
    assert f"rank 1 of 2 meets at {met['coordinator']}" in logs.stdout
