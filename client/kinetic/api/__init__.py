"""The user API: `kinetic.run`, handles, batches, attach, and the calls the CLI makes.

It creates KineticJobs and KineticBatches and reads their status; the operator does
the orchestrating. It may import the model and storage, never the pod's runtime.

Its modules import one another in one direction only, from the plumbing up to
what users call: `config`, `kube`, `reference` (the reference API's arguments),
`cleanup`, `submission`, `vouched`, `staging`, `project` and `logstream`; then
`handle` (what every handle is); `inputs` (an input's handle); `batch_rerun`;
`batches`; `mixed` (`kinetic.batch`); `jobs` (submitting a job, and `attach`,
which finds jobs and inputs alike); and `remote` (`kinetic.run`). A lower module
names a higher one only for types.
"""
