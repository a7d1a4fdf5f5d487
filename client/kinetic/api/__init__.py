"""The user API: `kinetic.run`, handles, batches, attach, and the calls the CLI makes.

It creates KineticJobs and KineticBatches and reads their status; the operator does
the orchestrating. It may import the model and storage, never the pod's runtime.

Its modules import one another in one direction only, from the plumbing up to
what users call: `config`, `kube`, `reference` (the reference API's arguments),
`cleanup`, `submission`, `vouched`, `data` (`kinetic.Data` on the laptop),
`staging`, `project`, `logstream`, `waiting`, `debug`, `hosts`, `attempt_pods`,
`stored` and `job_context`; then `handle` (what every handle is);
`input_records` and `inputs` (an input's handle); `batch_rerun`;
`batch_results`, `batch_handle` and `batches`; `mixed` (`kinetic.batch`); `jobs`
(submitting a job, and `attach`, which finds jobs and inputs alike); and
`remote` (`kinetic.run`). `doctor_verdicts` and `doctor` stand beside them. A
lower module names a higher one only for types.
"""
