"""`python -m kinetic_operator`: run the operator, namespaces from KINETIC_NAMESPACES."""

from __future__ import annotations

import kopf

import kinetic_operator.main  # noqa: F401 — registers handlers
from kinetic_operator.state import OperatorState


def main() -> None:
    """Read the settings once, and hand them to Kopf's start-up in its memo.

    The namespaces to watch are needed before Kopf starts; the state made
    for that (settings included) is the one every handler then finds in
    Kopf's memo, so the environment is read in one place.
    """
    state = OperatorState()
    namespaces = state.settings.namespaces
    kopf.configure(verbose=False)
    kopf.run(
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        memo=kopf.Memo(kinetic=state),
    )


if __name__ == "__main__":
    main()
