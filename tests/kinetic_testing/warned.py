"""What the tests of the reference API's argument order read from the warnings a call gave."""

from __future__ import annotations

import warnings

from kinetic.api.reference import ArgumentMoved


def moved(caught: list[warnings.WarningMessage], caller: str) -> str:
    """The one `ArgumentMoved` warning among ``caught``, which must point at the caller's
    own line (in the file ``caller``), not at the client's code."""
    found = [w for w in caught if issubclass(w.category, ArgumentMoved)]
    assert len(found) == 1, [str(w.message) for w in caught]
    assert found[0].filename == caller
    return str(found[0].message)
