"""What runs inside the pod: ``python -m kinetic.runtime.runner`` and what it calls.

It imports the model and the storage backends, never the user API, the Kubernetes
client, typer or rich (checked by `make lint`): a pod pays only for what it uses.
"""
