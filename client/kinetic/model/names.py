"""Names, labels and time formats that the client and the operator share.

Every attempt is one Pod whose name is a pure function of what it runs, so
that creating it twice is a no-op and any process can find it again:

* attempt ``a`` of KineticJob ``job`` is Pod ``<job>-a<a>``;
* attempt ``a`` of the work unit that starts at input ``i`` of KineticBatch
  ``grp`` is Pod ``<grp>-i<i>-<a>``. A unit is one input, or a block of
  consecutive inputs (then ``i`` is the first of them);
* rank ``r`` of a multi-host attempt (a gang) is that attempt's name with
  ``-r<r>`` appended: ``<job>-a<a>-r<r>``, ``<grp>-i<i>-<a>-r<r>``.

The names cannot clash, across kinds, objects, attempts, ranks and units:
after the owner's name comes a tail of numbers, dashes and one letter per
part (``a`` a job's attempt, ``i`` a batch input, ``r`` a rank, ``x`` an
alternative, below), and the last letter of a name says what the tail is,
so no two different tuples of (kind, owner, input, attempt, rank) give one
name, whatever the owners are called (job ``b-1`` and batch ``b``: ``b-1-a1``
and ``b-i1-1``). A name longer than a Pod's 63 characters keeps its tail
and cuts the owner's part, which then ends in a hash of the whole owner.

A name someone else's Pod holds already (squatted: anyone who may create
Pods in the namespace can take a name before the operator does) gets an
alternative at once, ``<name>-x<token>``, where the token comes from a key
only the operator holds (`kinetic_operator.logic.seal`): deterministic for the
operator, so a Pod it made under an alternative is found again after a
restart, and unknown to anyone else. Pods are found by their labels and
their seal, never by their names alone.

A batch input's own id, for `kinetic.attach` and `kinetic jobs ...`, is
``<grp>-<i>``.

The members of a gang find each other through one headless Service per
owning object (`gang_service_name`).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

LABEL_JOB = "kinetic.dev/job"
LABEL_BATCH = "kinetic.dev/batch"
LABEL_INDEX = "kinetic.dev/index"
LABEL_ATTEMPT = "kinetic.dev/attempt"
LABEL_CHUNK = "kinetic.dev/chunk"  # how many inputs the Pod runs, when more than one
LABEL_RANK = "kinetic.dev/rank"  # a gang member's rank (0 .. hosts - 1); absent on one host
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "kinetic"
# The operator's seal on every Pod it creates (`kinetic_operator.logic.seal`): labels anyone may
# copy, this only the holder of the operator's key can make.
ANNOTATION_SEAL = "kinetic.dev/seal"

# The coordination.k8s.io/v1 Lease in the operator's namespace whose holder is the one
# replica that reconciles; its holderIdentity is "<Pod name>_<process id>" (`holder_identity`).
LEADER_LEASE = "kinetic-operator-leader"
# The operator's flag for running as one of several replicas under that Lease: its parser
# takes it, and the upgrade guard and `kinetic doctor` look for it in a Pod's command.
LEADER_ELECTION_FLAG = "--leader-election"


def holder_identity(pod: str, process: str) -> str:
    """A leader Lease holder's name: its Pod, and its process there (a restarted container
    is another process of the same Pod)."""
    return f"{pod}_{process}"


def holder_pod(holder: str) -> str:
    """The Pod part of a holder's name (all of it for a name without a process part)."""
    return holder.rpartition("_")[0] or holder


# Environment variables a batch input's Pod gets from its spec (the user's code reads them).
ENV_INDEX = "KINETIC_INDEX"  # the input's original index
ENV_INPUT = "KINETIC_INPUT"  # a container input's value
ENV_PARAM_PREFIX = "KINETIC_PARAM_"  # one per key of a dict input

# Environment variables the operator gives every attempt Pod, naming what it runs
# (`kinetic.JobHandle.from_job_context` reads them back inside the Pod).
ENV_JOB_NAME = "KINETIC_JOB_NAME"  # the KineticJob, or `<grp>-<i>`: the unit's first input
ENV_JOB_NAMESPACE = "KINETIC_JOB_NAMESPACE"
ENV_PAYLOAD_URI = "KINETIC_PAYLOAD_URI"  # set when the Pod runs a function
ENV_RESULT_URI = "KINETIC_RESULT_URI"  # where a function's result goes (one input, or a job)
ENV_CHUNK = "KINETIC_CHUNK"  # a Pod that runs several inputs of a batch: their list
ENV_DEBUG_PORT = "KINETIC_DEBUG_PORT"  # a debug job: the port debugpy listens on in the Pod
ENV_LOG_URI = "KINETIC_LOG_URI"  # a function Pod: where its runner archives the end of its log
ENV_LOG_LIMIT = "KINETIC_LOG_LIMIT"  # ... and the most bytes it keeps there
ENV_STOP_URI = "KINETIC_STOP_URI"  # a unit Pod: start no more inputs once this object exists
ENV_FAIL_FAST = "KINETIC_FAIL_FAST"  # a unit Pod: an input's failure is final, and fails fast

# Environment variables every member of a gang gets (`kinetic.model.gang.rendezvous_env`):
# the names frameworks read, so that user code needs no Kinetic-specific setup.
ENV_MASTER_ADDR = "MASTER_ADDR"  # torch.distributed: where rank 0 listens
ENV_MASTER_PORT = "MASTER_PORT"
ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_LOCAL_RANK = "LOCAL_RANK"  # always 0: one process per Pod
ENV_PROCESS_ID = "KINETIC_PROCESS_ID"  # jax.distributed.initialize(process_id=...)
ENV_NUM_PROCESSES = "KINETIC_NUM_PROCESSES"  # ... num_processes=...
ENV_COORDINATOR_ADDRESS = "KINETIC_COORDINATOR_ADDRESS"  # ... coordinator_address="host:port"
ENV_TPU_WORKER_ID = "TPU_WORKER_ID"  # libtpu: this host's place in the slice
ENV_TPU_WORKER_HOSTNAMES = "TPU_WORKER_HOSTNAMES"  # libtpu: every host, comma-separated, by rank

# A debug job's debugpy listens on the Pod's loopback only: `kubectl port-forward` reaches
# it there, and nothing else on the cluster network can attach to (and run code in) the job.
DEBUG_PORT = 5678  # debugpy's own default, as the reference's VS Code configurations use
DEBUG_READY_LINE = "debugpy is listening; waiting for a debugger to attach"
"""The runner's log line once debugpy listens: `JobHandle.debug_attach` waits for it."""

MAX_POD_NAME = 63  # Pod names become hostnames: the kubelet cuts a longer one
_OWNER_HASH_DIGITS = 8


def _fit(owner: str, tail: str) -> str:
    """``owner + tail``, its owner part cut (and made unique again by a hash of the whole
    owner, in digits) when the name would exceed `MAX_POD_NAME` characters."""
    if len(owner) + len(tail) <= MAX_POD_NAME:
        return owner + tail
    digest = int.from_bytes(hashlib.sha256(owner.encode()).digest()[:8], "big")
    mark = f"-{digest % 10**_OWNER_HASH_DIGITS:0{_OWNER_HASH_DIGITS}d}"
    keep = max(MAX_POD_NAME - len(tail) - len(mark), 1)
    head = owner[:keep].rstrip("-.") or owner[:1]
    return head + mark + tail


def job_pod_name(job: str, attempt: int) -> str:
    """Attempt ``attempt`` of KineticJob ``job``: ``<job>-a<attempt>``."""
    return _fit(job, f"-a{attempt}")


def input_pod_name(batch: str, index: int, attempt: int) -> str:
    """Attempt ``attempt`` of the unit starting at input ``index`` of batch ``batch``:
    ``<batch>-i<index>-<attempt>``."""
    return _fit(batch, f"-i{index}-{attempt}")


def gang_pod_name(attempt_pod: str, rank: int) -> str:
    """Rank ``rank`` of a multi-host attempt whose single-host Pod would be ``attempt_pod``
    (`job_pod_name` or `input_pod_name`): ``<attempt pod>-r<rank>``.

    Every rank, 0 included, carries the suffix: the members of one gang sort
    and select alike, and no member's name is another attempt's.
    """
    return _fit(attempt_pod, f"-r{rank}")


def alternative_pod_name(name: str, token: str) -> str:
    """The name to use when ``name`` is held by a Pod the operator did not create:
    ``<name>-x<token>`` (``token``: digits only the operator can derive)."""
    if not token.isdigit():
        raise ValueError(f"an alternative's token is digits, got {token!r}")
    return _fit(name, f"-x{token}")


_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # DNS-1035: Service names
_HOST_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # DNS-1123: hostnames
GANG_SERVICE_SUFFIX = "-gang"


def gang_service_name(owner: str) -> str:
    """The headless Service that gives the gangs of KineticJob or KineticBatch ``owner`` DNS
    names: ``<owner>-gang``, or ``gang-<hash>`` when that is no DNS label.

    One Service per owner, not per attempt: it selects the owner's Pods by
    label, lives as long as the owner, and every member's hostname is unique
    already. A Service name must be a DNS-1035 label (63 characters, starts
    with a letter, no dots), which an object name need not be; the hashed
    form is stable, so any process derives the same name without a lookup.
    """
    readable = f"{owner}{GANG_SERVICE_SUFFIX}"
    if _DNS_LABEL.match(readable):
        return readable
    return f"gang-{hashlib.sha256(owner.encode()).hexdigest()[:16]}"


def alternative_service_name(service: str, token: str) -> str:
    """A gang Service's name when ``service`` is held by an object the operator did not
    make: ``<service>-x<token>``, or ``gang-x<token>-<hash>`` where that is no DNS label."""
    if not token.isdigit():
        raise ValueError(f"an alternative's token is digits, got {token!r}")
    readable = f"{service}-x{token}"
    if _DNS_LABEL.match(readable):
        return readable
    return f"gang-x{token}-{hashlib.sha256(service.encode()).hexdigest()[:16]}"


def gang_hostname(pod: str) -> str:
    """A gang member's ``spec.hostname`` (its DNS label under the Service): its Pod name
    when that is a DNS label, else ``m-<hash>`` of it.

    A Pod name may hold dots (it is a DNS subdomain); a hostname may not.
    """
    if _HOST_LABEL.match(pod):
        return pod
    return f"m-{hashlib.sha256(pod.encode()).hexdigest()[:16]}"


DEFAULT_CLUSTER_DOMAIN = "cluster.local"


def gang_address(
    hostname: str, service: str, namespace: str, domain: str = DEFAULT_CLUSTER_DOMAIN
) -> str:
    """The name other members resolve: ``<hostname>.<service>.<namespace>.svc.<domain>``.

    Fully qualified, never relative: a relative ``<hostname>.<service>`` that
    does not resolve yet (rank 0 has no address) would be tried against the
    resolver's search path next, where it names a Service ``<hostname>`` in a
    namespace called ``<service>``, which anyone may own.
    """
    return f"{hostname}.{service}.{namespace}.svc.{domain}"


def gang_policy_name(service: str) -> str:
    """The NetworkPolicy that keeps other namespaces from an owner's gang members: named
    after its Service."""
    return service


def input_id(batch: str, index: int) -> str:
    """The id of one input of a batch: ``<grp>-<i>``."""
    return f"{batch}-{index}"


def split_input_id(job_id: str) -> tuple[str, int] | None:
    """``("grp-…", i)`` for an input id ``grp-…-i``, else None.

    Only batch names of the client's form (``grp-`` + 8 hex) are recognised
    without a lookup; callers that find no KineticJob of that name may still
    try the longer form themselves.
    """
    match = re.match(r"^(grp-[0-9a-f]{8})-(0|[1-9][0-9]{0,8})$", job_id)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def split_any_input_id(job_id: str) -> tuple[str, int] | None:
    """``(batch, i)`` for any ``<batch>-<i>``, for a name known to be an input's (a batch
    may be named by hand, so only the trailing index tells it)."""
    match = re.match(r"^(.+)-(0|[1-9][0-9]{0,8})$", job_id)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def unit_start(index: int, chunk_size: int) -> int:
    """The first input of the unit that runs input ``index``."""
    return index - index % max(1, chunk_size)


# --------------------------------------------------------------------------- time


TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def fmt_time(t: datetime) -> str:
    """RFC 3339 in UTC with a Z, to the second, as Kubernetes writes times."""
    if t.tzinfo is None:
        raise ValueError("times must be timezone-aware (UTC)")
    return t.astimezone(UTC).strftime(TIME_FORMAT)


MICRO_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def fmt_micro_time(t: datetime) -> str:
    """RFC 3339 in UTC to the microsecond: Kubernetes' MicroTime (a Lease's renewTime)."""
    if t.tzinfo is None:
        raise ValueError("times must be timezone-aware (UTC)")
    return t.astimezone(UTC).strftime(MICRO_TIME_FORMAT)


def parse_time(text: str) -> datetime:
    """The inverse of `fmt_time` (also takes fractional seconds and offsets)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
