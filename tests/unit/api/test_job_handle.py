"""A job handle saved as a dict keeps what identifies the job, never a hash it was given."""

from __future__ import annotations

import json

from kinetic.api.inputs import InputHandle
from kinetic.api.jobs import JobHandle
from kinetic.model import digest


def test_a_saved_handle_leaves_out_the_hash_held_after_a_deletion() -> None:
    handle = JobHandle(job_id="one-1", namespace="team-a", uid="u-1", function=True)
    handle._stored_before_deletion = digest.Reported("ab" * 32, 12)
    saved = json.loads(json.dumps(handle.to_dict()))
    assert not any("before_deletion" in key for key in saved)
    again = JobHandle.from_dict(saved)
    assert (again.job_id, again.uid, again.function) == ("one-1", "u-1", True)
    assert again._stored_before_deletion is None


def test_a_saved_input_handle_comes_back_as_one() -> None:
    saved = InputHandle(
        job_id="grp-1-3", namespace="team-a", group_id="grp-1", group_index=3, chunk_size=2
    ).to_dict()
    again = JobHandle.from_dict(saved)
    assert isinstance(again, InputHandle)
    assert (again.group_index, again.chunk_size) == (3, 2)
