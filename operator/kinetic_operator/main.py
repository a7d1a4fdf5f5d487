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

from kinetic_operator import kopf_patch
from kinetic_operator.handlers import (  # noqa: F401 — registers
    admission,
    batches,
    jobs,
    policy,
    setup,
)

# Before Kopf starts watching: decode watch events and lists safely, however deep.
kopf_patch.install()
