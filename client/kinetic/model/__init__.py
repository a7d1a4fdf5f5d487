"""The model both sides share: what a resource, an input, a storage path and a manifest are.

The custom resources' pydantic models, the limits, the accelerator catalog, input
expansion, index ranges, names and time formats, the storage layout, the manifest
schema, digests, the payload format, and the job status users see (`job_status`).
Pure: this package imports nothing else of Kinetic (checked by `make lint`), so the
operator, the pod's runtime and the user API all agree on each fact by importing it
from here.
"""
