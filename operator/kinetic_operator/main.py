"""What `kopf run` loads. Importing it registers every handler (in Kopf's default registry).

Start one operator by hand (namespaces come from kopf's own flags):

    kopf run --standalone --all-namespaces -m kinetic_operator.main
    kopf run --standalone --namespace team-a --namespace team-b -m kinetic_operator.main

or `python -m kinetic_operator`, which also runs as one of several replicas with
``--leader-election`` (the chart's command; see `kinetic_operator.elected`).

The admission webhooks are not registered here but by a start-up handler
(`handlers.admission.register_webhooks`), once the settings say whether
they are enabled.
"""

import sys

from kinetic_operator import kopf_patch
from kinetic_operator.handlers import (  # noqa: F401 — registers
    admission,
    batches,
    jobs,
    policy,
    setup,
)

SWITCH_INTERVAL_SECONDS = 0.001

# Before Kopf starts watching: decode watch events and lists safely, however deep.
kopf_patch.install()

# The event loop gives the GIL up at every network call and must win it back each time;
# a worker thread that keeps it busy (decoding a large admission review, a reconcile)
# holds it up to this long on each of those occasions. Python's default, 5 ms, made a
# loop that makes a few dozen such calls per turn fall behind by hundreds of milliseconds
# while the webhook decoded 3 MiB reviews; 1 ms kept its lag p99 under 50 ms (measured:
# tests/integration/test_webhook_replica_flood.py).
sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
