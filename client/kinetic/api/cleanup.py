"""What deleting an object's storage removes: its home, its upload folder, its name's pointer.

Jobs and batches clean up the same way, so the rule lives here once: only
the object's own prefix (namespace, name, UID), the upload folder the
client made for it, and the name's ``current.json`` when it still points at
this UID. A newer object of the same name keeps its pointer.
"""

from __future__ import annotations

from kinetic import storage
from kinetic.model import layout


def delete_stored(home: layout.Home | None, upload: str | None) -> None:
    """Delete everything the object and its client stored; never anything a spec URI names."""
    if home is not None:
        storage.delete_prefix(home.prefix)
        _forget_name(home)
    if upload is not None:
        storage.delete_prefix(upload)


def _forget_name(home: layout.Home) -> None:
    """Remove the name's pointer if it points at this object (not at a newer same-named one).

    Without it, `attach(name)` after cleanup would find a pointer to files
    that are gone and report a missing result instead of NOT_FOUND.
    """
    found = storage.read_if_exists(home.current_uri)
    if found is None:
        return
    record = layout.CurrentRecord.from_bytes(found[0])
    if record is not None and record.uid == home.uid:
        storage.delete(home.current_uri)
