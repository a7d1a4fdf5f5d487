"""Which Pods the operator made: a seal only it can put on a Pod. Pure: no API calls.

Anyone who may create Pods in a namespace can give one the labels of a
KineticJob's attempt, or of a batch input, and even an owner reference to
the object (an owner reference proves nothing: it is an ordinary field).
Believed, such a Pod would decide the job's outcome: its termination
message is a container job's result, and a function Pod reports the digest
of the result bytes the client then unpickles. So every Pod the operator
creates carries an annotation, `names.ANNOTATION_SEAL`: an HMAC-SHA256 under
a key only the operator holds (a Secret in its own namespace, created by the
operator on first start, `Kube.seal_key`) of the Pod's namespace, name,
controlling owner and the labels the operator reads. A namespace-mate can
copy labels but not make a seal for a name or labels of its own choosing.

Verdicts (`Sealer.verdict`):

* ``sealed`` — the seal matches: the operator made a Pod of exactly this
  name and these labels for this owner;
* ``legacy`` — no seal, and made before sealing began in this cluster (the
  key's own creation time): the previous operator version's Pods, found
  mid-batch by an upgraded operator, still count, so nothing runs twice;
* ``stranger`` — anything else: ignored for outcomes, never deleted as
  ours, and reported as a Warning Event on the object it pretends to belong to.

A seal names the Pod, not its instance: a Pod the operator made, deleted by
someone and made again under the same name with the seal copied, matches.
The operator tells those apart by the Pod's UID, which the API server gives
and nobody chooses: the first one seen under a name is the one that counts
(`handlers.events`), and a KineticJob's status records each attempt's
(``podUID``), so the client picks Pods the same way.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kinetic.model.names import (
    ANNOTATION_SEAL,
    LABEL_ATTEMPT,
    LABEL_BATCH,
    LABEL_CHUNK,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_RANK,
    parse_time,
)

Verdict = Literal["sealed", "legacy", "stranger"]

VERSION = "v1"
SEALED_LABELS = (LABEL_JOB, LABEL_BATCH, LABEL_INDEX, LABEL_ATTEMPT, LABEL_RANK, LABEL_CHUNK)
TOKEN_DIGITS = 6


@dataclass(frozen=True)
class Sealer:
    """Seals Pods with the operator's ``key``, and judges the Pods it sees.

    ``since``: when sealing began in this cluster (RFC 3339), the key's
    creation time as the API server wrote it; unsealed Pods older than that
    were made by the previous operator version.
    """

    key: bytes
    since: str | None = None

    def seal(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """``manifest`` with its seal, made from its final name and labels (sealed last)."""
        meta = manifest["metadata"]
        meta.setdefault("annotations", {})[ANNOTATION_SEAL] = self._mac(meta)
        return manifest

    def verdict(self, body: Mapping[str, Any]) -> Verdict:
        """Whether the operator made this Pod (see the module docstring)."""
        meta = body.get("metadata") or {}
        given = (meta.get("annotations") or {}).get(ANNOTATION_SEAL)
        if isinstance(given, str):
            return "sealed" if hmac.compare_digest(given, self._mac(meta)) else "stranger"
        return "legacy" if self._before_sealing(meta.get("creationTimestamp")) else "stranger"

    def token(self, name: str, k: int) -> str:
        """Digits for the ``k``-th alternative to ``name`` (`names.alternative_pod_name`):
        the same every time for the operator, unguessable for anyone without the key."""
        mac = hmac.new(self.key, f"alt|{k}|{name}".encode(), hashlib.sha256).digest()
        return f"{int.from_bytes(mac[:8], 'big') % 10**TOKEN_DIGITS:0{TOKEN_DIGITS}d}"

    def _mac(self, meta: Mapping[str, Any]) -> str:
        return hmac.new(self.key, _sealed_text(meta), hashlib.sha256).hexdigest()

    def _before_sealing(self, created: Any) -> bool:
        if self.since is None or not isinstance(created, str):
            return False
        try:
            return parse_time(created) < parse_time(self.since)
        except ValueError:
            return False


def _sealed_text(meta: Mapping[str, Any]) -> bytes:
    """What a seal covers, canonically: namespace, name, controlling owner, our labels."""
    labels = meta.get("labels") or {}
    doc = {
        "v": VERSION,
        "namespace": meta.get("namespace") or "",
        "name": meta.get("name") or "",
        "owner": controller_uid(meta) or "",
        "labels": {k: labels[k] for k in SEALED_LABELS if isinstance(labels.get(k), str)},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def controller_uid(meta: Mapping[str, Any]) -> str | None:
    """The UID of the object that controls the Pod (its KineticJob or KineticBatch)."""
    owner = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
    uid = owner.get("uid") if owner else None
    return uid if isinstance(uid, str) else None
