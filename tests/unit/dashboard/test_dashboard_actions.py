"""An action the page asks for is checked before anything is sent (`actions.Ask.check`)."""

from __future__ import annotations

import pytest
from kinetic.dashboard.actions import Ask, BadAction
from kinetic.model import resources as r


@pytest.mark.parametrize(
    ("ask", "says"),
    [
        (Ask("explode", "ns", "grp-1"), "action='explode': choose one of cancel-batch"),
        (Ask("cancel-batch", "", "grp-1"), "namespace and name are required"),
        (Ask("delete", "ns", "x", kind="pod"), "kind='pod': choose batch or job"),
        (Ask("cancel-input", "ns", "grp-1"), "index=None: cancel-input needs the input's index"),
        (Ask("cancel-input", "ns", "grp-1", index=-1), "index=-1"),
    ],
)
def test_a_malformed_ask_names_the_field(ask, says):
    with pytest.raises(BadAction) as e:
        ask.check()
    assert says in str(e.value)


@pytest.mark.parametrize(
    ("ask", "plural"),
    [
        (Ask("cancel-batch", "ns", "g"), r.BATCH_PLURAL),
        (Ask("cancel-input", "ns", "g", index=3), r.BATCH_PLURAL),
        (Ask("rerun-failed", "ns", "g"), r.BATCH_PLURAL),
        (Ask("cancel-job", "ns", "j"), r.JOB_PLURAL),
        (Ask("delete", "ns", "j", kind="job"), r.JOB_PLURAL),
        (Ask("delete", "ns", "g", kind="batch"), r.BATCH_PLURAL),
    ],
)
def test_each_action_writes_the_kind_it_names(ask, plural):
    assert ask.check().plural == plural
