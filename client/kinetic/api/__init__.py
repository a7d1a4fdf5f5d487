"""The user API: `kinetic.run`, handles, batches, attach, and the calls the CLI makes.

It creates KineticJobs and KineticBatches and reads their status; the operator does
the orchestrating. It may import the model and storage, never the pod's runtime.
"""
