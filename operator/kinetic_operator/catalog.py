"""The accelerator catalog now lives in the client (`kinetic.catalog`), shared by both sides.

Re-exported here so operator code written against this module keeps working.
"""

from kinetic.catalog import (
    Catalog,
    GpuType,
    Placement,
    TpuSlice,
    UnknownAccelerator,
    canonical_name,
    check_name,
    default_catalog,
    device_count,
    resolve,
)

__all__ = [
    "Catalog",
    "GpuType",
    "Placement",
    "TpuSlice",
    "UnknownAccelerator",
    "canonical_name",
    "check_name",
    "default_catalog",
    "device_count",
    "resolve",
]
