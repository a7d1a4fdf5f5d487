"""What a Pod's environment says of the batch input it runs (`JobHandle.from_job_context`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kinetic.model import names


def input_fields(name: str, env: Mapping[str, str], from_env: bool) -> dict[str, Any]:
    """What a batch input's Pod environment says of the input (nothing for a job's Pod).

    Every Pod of a batch has ``KINETIC_INDEX`` (one input) or ``KINETIC_CHUNK``
    (several), and its job name is ``<batch>-<i>``. A name given by the caller
    counts as an input's only in the client's ``grp-`` form.
    """
    in_batch = names.ENV_INDEX in env or names.ENV_CHUNK in env
    split = names.split_any_input_id(name) if from_env and in_batch else None
    split = split or names.split_input_id(name)
    if split is None:
        return {}
    group, index = split
    found: dict[str, Any] = {"group_id": group, "group_index": index}
    if from_env:
        found["container"] = names.ENV_PAYLOAD_URI not in env
    chunk = json.loads(env[names.ENV_CHUNK]) if from_env and names.ENV_CHUNK in env else []
    if not chunk:
        return found
    # The runner names the input that runs now in the job name (`runner._name_input`).
    mine = [entry for entry in chunk if entry.get("index") == index]
    found["result_uri"] = (mine or chunk)[0].get("resultURI")
    if names.ENV_STOP_URI in env:
        found["sized"] = True  # a unit the operator sized: the batch's grid says which
    else:
        first = chunk[0].get("index", index)
        found["chunk_size"] = chunk_size_of(first, len(chunk))
    return found


def chunk_size_of(first: int, inputs: int) -> int:
    """A chunk size that puts input ``first`` at the start of a unit of at least ``inputs``.

    The Pod does not say the batch's ``chunkSize``; it is its number of inputs,
    except in the last unit, which may hold fewer. The smallest such size that
    divides ``first`` gives the same unit and covers all its inputs (the rest are
    past the batch's end).
    """
    size = max(1, inputs)
    while first % size:
        size += 1
    return size
