"""`python -m kinetic_operator`: run the operator, namespaces from KINETIC_NAMESPACES."""

from __future__ import annotations

import kopf

import kinetic_operator.main  # noqa: F401 — registers handlers
from kinetic_operator.settings import get_settings


def main() -> None:
    namespaces = get_settings().namespaces
    kopf.configure(verbose=False)
    kopf.run(standalone=True, clusterwide=not namespaces, namespaces=namespaces)


if __name__ == "__main__":
    main()
