"""`python -m kinetic_operator`: run the operator (the chart's command).

    python -m kinetic_operator --leader-election --all-namespaces \\
        --liveness=http://0.0.0.0:8080/healthz
    python -m kinetic_operator --namespace team-a --namespace team-b

With ``--leader-election`` any number of replicas may run: all serve the
admission webhook, the holder of the leader Lease reconciles
(`kinetic_operator.elected`). Without it this process is the only operator
(as under ``kopf run --standalone -m kinetic_operator.main``). Namespaces
come from ``--namespace``/``--all-namespaces``, else KINETIC_NAMESPACES
(comma-separated; empty means all).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

import kopf
from kinetic.model.names import LEADER_ELECTION_FLAG

import kinetic_operator.main  # noqa: F401 — registers handlers
from kinetic_operator.elected import Scope, run_elected
from kinetic_operator.state import OperatorState


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m kinetic_operator", description=__doc__)
    parser.add_argument(
        LEADER_ELECTION_FLAG,
        action="store_true",
        help="run as one of several replicas: reconcile only while holding the leader Lease",
    )
    parser.add_argument(
        "--liveness", metavar="URL", help="serve /healthz, e.g. http://0.0.0.0:8080/healthz"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--namespace", action="append", default=[], metavar="NS", help="watch NS (repeatable)"
    )
    where.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Read the settings once, and hand them to Kopf's start-up in its memo.

    The namespaces to watch are needed before Kopf starts; the state made
    for that (settings included) is the one every handler then finds in
    Kopf's memo, so the environment is read in one place.
    """
    args = parse(argv)
    state = OperatorState()
    if args.namespace or args.all_namespaces:
        state.settings = state.settings.model_copy(update={"namespaces": args.namespace})
    namespaces = state.settings.namespaces
    kopf.configure(verbose=False)
    if args.leader_election:
        asyncio.run(run_elected(state.settings, Scope(namespaces, args.liveness)))
        return
    kopf.run(
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness,
        memo=kopf.Memo(kinetic=state),
    )


if __name__ == "__main__":
    main()
