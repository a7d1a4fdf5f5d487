"""A multi-host job's gang: the pure facts the operator and the client share. No I/O.

One attempt of a job with ``hosts`` N > 1 is N Pods, ranks 0 .. N-1, created
together (`kinetic.model.names.gang_pod_name`). They find each other through
rank 0, whose address every member gets in the environment frameworks read
(`rendezvous_env`), and they live and die as one:

* the job's result is rank 0's (its return value, or its termination message);
* any member's failure fails the whole attempt, charged once to ``retries``;
* losing a member to a disruption (eviction, preemption, a deleted Pod or a
  lost node) is a disruption of the attempt, not a failure of the job;
* a gang that cannot be placed whole within a deadline is torn down, so the
  members already placed stop holding accelerators that others could use.

The operator judges those verdicts (`kinetic_operator.logic.gang_verdicts`); what lives
here is what the client and the operator both need: member names, the rendezvous
environment, and the hosts a spec asks for.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from kinetic.model import names
from kinetic.model.catalog import Catalog, UnknownAccelerator, hosts_of, is_tpu
from kinetic.model.limits import DEFAULT_GANG_SCHEDULING_SECONDS, MAX_HOSTS
from kinetic.model.resources import KineticBatchSpec, KineticJobSpec

# torch's own default rendezvous port (torchrun's --master_port, the port its examples use):
# a script written for torchrun that hard-codes it still meets its peers. JAX is told the
# port through KINETIC_COORDINATOR_ADDRESS, so the same port serves it; a Pod runs one
# framework's rendezvous. Below the NodePort range (30000-32767) and unprivileged.
DEFAULT_RENDEZVOUS_PORT = 29500
COORDINATOR_RANK = 0  # whose address everyone dials, and whose result is the job's
DEFAULT_SCHEDULING_DEADLINE = timedelta(seconds=DEFAULT_GANG_SCHEDULING_SECONDS)


# --------------------------------------------------------------------------- environment


def rendezvous_env(
    rank: int,
    world: int,
    coordinator: str,
    port: int = DEFAULT_RENDEZVOUS_PORT,
    *,
    hostnames: Sequence[str] | None = None,
    tpu: bool = False,
) -> dict[str, str]:
    """The environment of gang member ``rank`` of ``world``, as torch, JAX and libtpu read it.

    ``coordinator`` is rank 0's address: its DNS name under the gang's
    Service where the cluster has DNS, its Pod IP where it has none.
    ``LOCAL_RANK`` is always 0 because a member is one process in its own Pod.
    On TPU, libtpu needs every host by rank (``hostnames``, one per rank), so
    there they are required.
    """
    _check_rendezvous(rank, world, port, hostnames, tpu)
    env = {
        names.ENV_MASTER_ADDR: coordinator,
        names.ENV_MASTER_PORT: str(port),
        names.ENV_RANK: str(rank),
        names.ENV_WORLD_SIZE: str(world),
        names.ENV_LOCAL_RANK: "0",
        names.ENV_PROCESS_ID: str(rank),
        names.ENV_NUM_PROCESSES: str(world),
        names.ENV_COORDINATOR_ADDRESS: host_port(coordinator, port),
    }
    if tpu and hostnames is not None:
        env[names.ENV_TPU_WORKER_ID] = str(rank)
        env[names.ENV_TPU_WORKER_HOSTNAMES] = ",".join(hostnames)
    return env


def host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets so the port stays readable."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_rendezvous(
    rank: int, world: int, port: int, hostnames: Sequence[str] | None, tpu: bool
) -> None:
    """Refuse arguments that would give the members an environment they cannot agree on."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank must be in 0 .. world - 1 with world >= 1; got {rank} of {world}")
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be in 1 .. 65535; got {port}")
    if hostnames is not None and len(hostnames) != world:
        raise ValueError(
            f"hostnames must list one name per rank: {world} expected, got {len(hostnames)}"
        )
    if tpu and hostnames is None:
        raise ValueError("hostnames are required on TPU: libtpu reads every host by rank")


def member_pod_names(attempt_pod: str, hosts: int) -> list[str]:
    """The Pods of one attempt by rank: the attempt's own Pod on one host (today's name, so
    single-host jobs do not change), `names.gang_pod_name` for each rank of a gang."""
    if hosts <= 1:
        return [attempt_pod]
    return [names.gang_pod_name(attempt_pod, rank) for rank in range(hosts)]


# --------------------------------------------------------------------------- admission


def effective_hosts(hosts: int | None, catalog: Catalog, accelerator: str | None) -> int:
    """Hosts a job runs on: ``hosts`` if given, else what its accelerator needs.

    Left out, ``hosts`` is 1 for cpu and GPUs (as before gangs existed) and a
    multi-host TPU slice's own count, so ``accelerator="tpu-v5e-16"`` alone
    asks for the whole slice; an unknown accelerator is another check's
    refusal, and counts as 1 here.
    """
    if hosts is not None:
        return hosts
    try:
        return hosts_of(catalog, accelerator or "cpu")
    except UnknownAccelerator:
        return 1


def hosts_problems(
    hosts: object, accelerator: str | None, catalog: Catalog, max_hosts: int | None, path: str
) -> list[str]:
    """What is wrong with ``hosts`` at ``path`` (``spec.hosts``, ``spec.jobs[2].hosts``).

    ``hosts`` left out (None) is always fine (`effective_hosts`). Else it must
    be an integer of at least 1, at most `MAX_HOSTS` and the policy's
    ``maxHostsPerJob`` (``max_hosts``, None without a policy), and equal to a
    multi-host accelerator's hosts. A single-host accelerator allows any
    count: two hosts of ``gpu-l4x1`` are two Pods of one L4 each.
    """
    if hosts is None:
        return []
    if isinstance(hosts, bool) or not isinstance(hosts, int):
        return [
            f"{path} must be a whole number of hosts, at least 1; got {hosts!r}: give the "
            "number of Pods the job runs on, or leave it out for its accelerator's own"
        ]
    if hosts < 1:
        return [f"{path} is {hosts}; a job runs on at least 1 host: set it to 1 or more"]
    return _above_limits(hosts, max_hosts, path) + _slice_mismatch(
        hosts, accelerator, catalog, path
    )


def _above_limits(hosts: int, max_hosts: int | None, path: str) -> list[str]:
    if hosts > MAX_HOSTS:
        return [f"{path} is {hosts}; the limit is {MAX_HOSTS} hosts per job: ask for fewer"]
    if max_hosts is not None and hosts > max_hosts:
        return [
            f"{path} is {hosts}, above the policy's maxHostsPerJob of {max_hosts}: ask for at "
            f"most {max_hosts} hosts, or ask the cluster administrator to raise maxHostsPerJob"
        ]
    return []


def _slice_mismatch(hosts: int, accelerator: str | None, catalog: Catalog, path: str) -> list[str]:
    if accelerator is None or not is_tpu(catalog, accelerator):
        return []
    needed = hosts_of(catalog, accelerator)
    if needed == 1 or hosts == needed:
        return []
    where = path.rpartition(".")[0] or "spec"
    return [
        f"{path} is {hosts}, but {where}.accelerator {accelerator!r} is a slice of {needed} "
        f"hosts, one Pod each: set {path} to {needed}, or leave it out"
    ]


# --------------------------------------------------------------------------- whole specs


def job_hosts_problems(spec: KineticJobSpec, catalog: Catalog, path: str = "spec") -> list[str]:
    """`hosts_problems` of one parsed job spec at ``path`` (no policy: that is judged apart)."""
    return hosts_problems(spec.hosts, spec.accelerator, catalog, None, f"{path}.hosts")


def batch_hosts_problems(spec: KineticBatchSpec, catalog: Catalog) -> list[str]:
    """The hosts of a batch's template or of each of its jobs, and chunking with gangs.

    A chunk runs several inputs one after another in one Pod; a gang is
    several Pods for one input. The two do not combine: a gang batch runs
    one input per attempt, so ``chunkSize`` must stay 1.
    """
    specs: list[tuple[str, KineticJobSpec]] = []
    if spec.template is not None:
        specs.append(("spec.template", spec.template))
    specs += [(f"spec.jobs[{i}]", job) for i, job in enumerate(spec.jobs or [])]
    problems = [p for path, job in specs for p in job_hosts_problems(job, catalog, path)]
    multi = [
        path for path, job in specs if effective_hosts(job.hosts, catalog, job.accelerator) > 1
    ]
    if multi and spec.fixed_chunk != 1:
        problems.append(
            f"spec.chunkSize is {spec.chunk_size}, but {multi[0]} runs on several hosts; a gang "
            "runs one input per attempt: set spec.chunkSize to 1"
        )
    return problems
