"""Where everything lives in storage: the one module that knows the layout.

The client, the operator and the runner all build storage URIs through
these functions, so the layout changes in one place. Paths are plain string
joins under the storage root (``gs://bucket/prefix`` or ``file:///path``)::

    <root>/jobs/<job>/payload.pkl            a KineticJob's pickled call
    <root>/jobs/<job>/result.pkl             its result
    <root>/jobs/<job>/logs/<pod>.log         the log of each attempt, once its Pod is gone
    <root>/outputs/<job>/                    KINETIC_OUTPUT_DIR (kept by cleanup)
    <root>/batches/<grp>/function.pkl        a batch's pickled function
    <root>/batches/<grp>/inputs/<i>.pkl      its pickled inputs, and
    <root>/batches/<grp>/inputs/sha256.json  the list of their hashes
    <root>/batches/<grp>/manifest.json       the manifest header (see kinetic.manifest)
    <root>/batches/<grp>/manifest/<s>.json   shard s: attempt history of inputs
                                             [s*SHARD_SIZE, (s+1)*SHARD_SIZE)
    <root>/batches/<grp>/accepted-spec.json  the spec the operator accepted
    <root>/batches/<grp>/logs/<pod>.log      the log of each attempt Pod
    <root>/jobs/<grp>-<i>/result.pkl         input i's result
    <root>/outputs/<grp>/<i>/                input i's KINETIC_OUTPUT_DIR
"""

from __future__ import annotations

SHARD_SIZE = 1000  # inputs per manifest shard


def _under(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


# --------------------------------------------------------------------------- jobs


def job_dir(root: str, job: str) -> str:
    """Everything one KineticJob (or one batch input) writes, but its outputs."""
    return _under(root, "jobs", job)


def job_payload_uri(root: str, job: str) -> str:
    return _under(root, "jobs", job, "payload.pkl")


def job_result_uri(root: str, job: str) -> str:
    return _under(root, "jobs", job, "result.pkl")


def job_log_uri(root: str, job: str, pod: str) -> str:
    """The archived log of one attempt Pod of a KineticJob."""
    return _under(root, "jobs", job, "logs", f"{pod}.log")


def job_output_dir(root: str, job: str) -> str:
    return _under(root, "outputs", job)


# --------------------------------------------------------------------------- batches


def batch_dir(root: str, batch: str) -> str:
    return _under(root, "batches", batch)


def batch_function_uri(root: str, batch: str) -> str:
    return _under(root, "batches", batch, "function.pkl")


def batch_inputs_prefix(root: str, batch: str) -> str:
    return _under(root, "batches", batch, "inputs")


def batch_input_uri(inputs_prefix: str, index: int) -> str:
    """Input ``index`` under a batch's ``spec.inputs.uriPrefix``."""
    return f"{inputs_prefix.rstrip('/')}/{index}.pkl"


def batch_hashes_uri(root: str, batch: str) -> str:
    return _under(root, "batches", batch, "inputs", "sha256.json")


def manifest_uri(root: str, batch: str) -> str:
    return _under(root, "batches", batch, "manifest.json")


def manifest_shard_uri(root: str, batch: str, shard: int) -> str:
    return _under(root, "batches", batch, "manifest", f"{shard}.json")


def shard_of(index: int) -> int:
    return index // SHARD_SIZE


def accepted_spec_uri(root: str, batch: str) -> str:
    return _under(root, "batches", batch, "accepted-spec.json")


def batch_log_uri(root: str, batch: str, pod: str) -> str:
    """The archived log of one attempt Pod of a batch (a Pod may run several inputs)."""
    return _under(root, "batches", batch, "logs", f"{pod}.log")


def input_dir(root: str, batch: str, index: int) -> str:
    """Everything input ``index`` of a batch writes (its result), but its outputs."""
    return _under(root, "jobs", f"{batch}-{index}")


def inputs_dir_prefix(root: str, batch: str) -> str:
    """The prefix every input's folder of a batch starts with: ``<root>/jobs/<grp>-``."""
    return _under(root, "jobs", f"{batch}-")


def input_result_uri(root: str, batch: str, index: int) -> str:
    return _under(root, "jobs", f"{batch}-{index}", "result.pkl")


def input_output_dir(template_output_dir: str | None, root: str, batch: str, index: int) -> str:
    """KINETIC_OUTPUT_DIR of input ``index``: the template's, or the root's, plus ``/<i>``."""
    base = template_output_dir or _under(root, "outputs", batch)
    return f"{base.rstrip('/')}/{index}"
