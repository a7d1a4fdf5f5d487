"""The Kinetic operator: reconciles KineticJobs (and, later, KineticBatches) with Kopf.

Layout — decisions are pure, the API layer is thin:

* `settings`, `catalog`: configuration from `KINETIC_*` env.
* `observed`, `job_logic`, `podspec`: pure functions; what to do and what to create.
* `kube`: the handful of idempotent API calls.
* `serial`: one reconcile at a time per object, with retry and backoff.
* `handlers/`: Kopf handlers, one module per resource (`jobs`; `batches` joins later)
  plus `setup` (Kopf settings, the published ConfigMap).
* `main`: what `kopf run` loads; `__main__` (`python -m kinetic_operator`) runs it alone or,
  with ``--leader-election``, as one of several replicas (`elected`, `election`, `leader`).
"""
