"""Where everything lives in storage: the one module that knows the layout.

The client, the operator and the runner build every storage URI through
this module. Everything is keyed by namespace, and everything a KineticJob
or KineticBatch writes by the object's UID, so an object copied into
another namespace, or deleted and re-created under the same name, never
reads, reports or overwrites another's files::

    <root>/namespaces/<ns>/                          the namespace prefix: every URI a
                                                     spec names must lie under it
    <root>/namespaces/<ns>/uploads/<name>-<token>/   what the client uploads before the
        payload.pkl                                  object exists (so before its UID is
        function.pkl                                 known): a job's call, a batch's
        inputs/<i>.pkl, inputs/sha256.json           function and inputs
    <root>/namespaces/<ns>/jobs/<name>/<uid>/        a KineticJob's home (`Home`):
        result.pkl                                   its result
        logs/<pod>.log                               each attempt's archived log
    <root>/namespaces/<ns>/jobs/<name>/current.json  which UID of that name wrote last (to find
                                                     its records once it is gone; trusted for
                                                     nothing else: storage vouches for nothing)
    <root>/namespaces/<ns>/batches/<name>/<uid>/     a KineticBatch's home:
        manifest.json, manifest/<s>.json             header and shards (`kinetic.model.manifest`),
        manifest.1.json, manifest/<s>.1.json         each in two slots (see `MANIFEST_SLOTS`)
        accepted-spec.json                           the spec the operator accepted
        results/<i>.pkl                              input i's result
        reports/<pod>.json                           a chunk Pod's per-input result hashes
        logs/<pod>.log                               each attempt Pod's archived log
    <root>/namespaces/<ns>/batches/<name>/current.json
    <root>/namespaces/<ns>/outputs/<name>/<uid>/     default KINETIC_OUTPUT_DIR (a batch
                                                     input adds /<i>); never deleted by cleanup
    <root>/namespaces/<ns>/data/<sha256>/...         `kinetic.Data` upload cache, keyed by
    <root>/namespaces/<ns>/data/<sha256>.json        content hash; the manifest (written last)
                                                     marks an entry complete. Shared by every
                                                     object of the namespace: never deleted
                                                     by an object's cleanup
    <root>/namespaces/<ns>/projects/<sha256>.<ext>   the user's project, content-addressed
                                                     (`kinetic.api.project`): requirements (.txt)
                                                     and Python source (.zip); shared by every
                                                     job that ships the same bytes, so never
                                                     deleted by an object's cleanup

The client never needs the UID to upload: it uploads under a fresh folder
of ``uploads/`` and creates the object; the operator derives every path it
writes (results, manifest, logs) from namespace and UID, and refuses a spec
whose URIs leave the namespace prefix (`outside_namespace`; for places the
Pod reads or writes with its own credentials, such as data volumes and
``outputDir``, `outside_own_storage`). Cleanup deletes
an object's `Home` prefix, and the upload folder only when it is named after
the object (`upload_dir_of`) — never anything derived from a URI in a spec.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SHARD_SIZE = 1000  # inputs per manifest shard
# Each manifest file (the header, each shard) has two slots, 0 and 1: the operator
# writes a new version into the slot the batch status does not vouch for, so the
# version it vouches for is never overwritten (`kinetic.model.manifest`).
MANIFEST_SLOTS = (0, 1)

Kind = Literal["jobs", "batches"]

# DNS-1123 names (namespaces, object names) and Kubernetes UIDs: never "/", "." or "..".
_SEGMENT = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
_TOKEN = re.compile(r"^[0-9a-f]{8,32}$")


def _segment(value: str, what: str, pattern: re.Pattern[str] = _SEGMENT) -> str:
    """One path segment taken from a resource; refused unless it cannot escape its folder."""
    if not isinstance(value, str) or not pattern.match(value) or len(value) > 253:
        raise ValueError(
            f"{what} {value!r} cannot be used in a storage path: it must be a lowercase DNS "
            "name (letters, digits, '-', '.')" + (" or a UID" if pattern is _UID else "")
        )
    return value


def _under(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def namespace_prefix(root: str, namespace: str) -> str:
    """Everything of one namespace; ends with '/' so a prefix never matches a longer name."""
    return _under(root, "namespaces", _segment(namespace, "namespace")) + "/"


# --------------------------------------------------------------------------- an object's home


@dataclass(frozen=True)
class Home:
    """The storage of one KineticJob or KineticBatch: namespace, kind, name and UID."""

    root: str
    namespace: str
    kind: Kind
    name: str
    uid: str

    def __post_init__(self) -> None:
        _segment(self.namespace, "namespace")
        _segment(self.name, "name")
        _segment(self.uid, "uid", _UID)
        if self.kind not in ("jobs", "batches"):
            raise ValueError(f"kind must be jobs or batches, got {self.kind!r}")

    @property
    def prefix(self) -> str:
        """The folder only this object writes to; cleanup deletes exactly this (with '/')."""
        return f"{self._named()}/{self.uid}/"

    def _named(self) -> str:
        return _under(namespace_prefix(self.root, self.namespace).rstrip("/"), self.kind, self.name)

    def _file(self, *parts: str) -> str:
        return self.prefix + "/".join(parts)

    @property
    def current_uri(self) -> str:
        """Which UID of this name wrote last (read only once the object is gone)."""
        return f"{self._named()}/current.json"

    def log_uri(self, pod: str) -> str:
        """The archived log of one attempt Pod."""
        return self._file("logs", f"{_segment(pod, 'pod name')}.log")

    @property
    def output_dir(self) -> str:
        """The default KINETIC_OUTPUT_DIR: outside the home, so cleanup keeps it."""
        ns = namespace_prefix(self.root, self.namespace)
        return f"{ns}outputs/{self.name}/{self.uid}"

    # ---- jobs

    @property
    def result_uri(self) -> str:
        """A KineticJob's result."""
        return self._file("result.pkl")

    def member_result_uri(self, pod: str) -> str:
        """Where a gang member other than rank 0 keeps its own return value: the job's
        result is rank 0's alone, but the others' are kept to look at."""
        return self._file("members", f"{_segment(pod, 'pod name')}.pkl")

    # ---- batches

    def input_result_uri(self, index: int) -> str:
        return self._file("results", f"{_index(index)}.pkl")

    @property
    def stop_uri(self) -> str:
        """Where a batch that stopped launching tells its units to start no more inputs."""
        return self._file("units", "stop")

    def report_uri(self, pod: str) -> str:
        """The per-input result hashes a chunk Pod reports (too many for a termination message)."""
        return self._file("reports", f"{_segment(pod, 'pod name')}.json")

    @property
    def manifest_uri(self) -> str:
        """The header's slot 0 (`header_uri`)."""
        return self.header_uri(0)

    def header_uri(self, slot: int) -> str:
        """The manifest header in ``slot`` (0: ``manifest.json``, 1: ``manifest.1.json``)."""
        return self._file(f"manifest{_slot(slot)}.json")

    def header_slot(self, uri: str | None) -> int | None:
        """Which header slot ``uri`` names, or None when it is not one of this batch's."""
        return next((s for s in MANIFEST_SLOTS if uri == self.header_uri(s)), None)

    def manifest_shard_uri(self, shard: int, slot: int = 0) -> str:
        """Shard ``shard`` in ``slot`` (``manifest/<s>.json`` or ``manifest/<s>.1.json``)."""
        return self._file("manifest", f"{_index(shard)}{_slot(slot)}.json")

    @property
    def accepted_spec_uri(self) -> str:
        return self._file("accepted-spec.json")

    def input_output_dir(self, template_output_dir: str | None, index: int) -> str:
        """KINETIC_OUTPUT_DIR of input ``index``: the template's, or the default, plus ``/<i>``."""
        base = template_output_dir or self.output_dir
        return f"{base.rstrip('/')}/{_index(index)}"


def job_home(root: str, namespace: str, name: str, uid: str) -> Home:
    return Home(root, namespace, "jobs", name, uid)


def batch_home(root: str, namespace: str, name: str, uid: str) -> Home:
    return Home(root, namespace, "batches", name, uid)


def current_uri(root: str, namespace: str, kind: Kind, name: str) -> str:
    """`Home.current_uri` for an object whose UID is not known (it is gone)."""
    return f"{namespace_prefix(root, namespace)}{kind}/{_segment(name, 'name')}/current.json"


class CurrentRecord(BaseModel):
    """A name's ``current.json``: which UID of that name recorded itself last, and its result.

    The operator writes it (a job when it ends with a result, a batch when it
    accepts its spec); clients read it only to find a deleted object's records.
    It vouches for nothing: anyone who can write storage can write it.
    """

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    uid: str = Field(min_length=1)
    result_sha256: str | None = Field(None, alias="resultSHA256")
    result_bytes: int | None = Field(None, ge=0, alias="resultBytes")

    def to_bytes(self) -> bytes:
        """Compact JSON; a job's result hash is kept, a batch's absent one left out."""
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> CurrentRecord | None:
        """The record, or None for bytes that are not one (torn, foreign or forged)."""
        try:
            return cls.model_validate_json(data)
        except (ValidationError, ValueError):
            return None


def _slot(slot: int) -> str:
    if slot not in MANIFEST_SLOTS:
        raise ValueError(f"a manifest slot is 0 or 1, got {slot!r}")
    return "" if slot == 0 else f".{slot}"


def _index(n: int) -> str:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"an index must be a non-negative integer, got {n!r}")
    return str(n)


def shard_of(index: int) -> int:
    return index // SHARD_SIZE


# --------------------------------------------------------------------------- uploads


def new_upload_dir(root: str, namespace: str, name: str) -> str:
    """A fresh folder for what the client uploads for object ``name`` (ends with '/')."""
    ns = namespace_prefix(root, namespace)
    return f"{ns}uploads/{_segment(name, 'name')}-{secrets.token_hex(8)}/"


def upload_dir_of(root: str, namespace: str, name: str, uri: str | None) -> str | None:
    """The upload folder ``uri`` lies in, when it is one the client made for object ``name``.

    Cleanup deletes an upload folder only through this, so a spec naming some
    other folder (another object's upload, the root, a home directory) never
    gets it deleted.
    """
    if not uri:
        return None
    base = f"{namespace_prefix(root, namespace)}uploads/"
    if not uri.startswith(base):
        return None
    folder, _, rest = uri[len(base) :].partition("/")
    owner, _, token = folder.rpartition("-")
    if owner != name or not _TOKEN.match(token) or not rest or _bad_rest(rest):
        return None
    return f"{base}{folder}/"


def job_payload_uri(upload_dir: str) -> str:
    return f"{upload_dir.rstrip('/')}/payload.pkl"


def batch_function_uri(upload_dir: str) -> str:
    return f"{upload_dir.rstrip('/')}/function.pkl"


def batch_inputs_prefix(upload_dir: str) -> str:
    return f"{upload_dir.rstrip('/')}/inputs"


def batch_hashes_uri(upload_dir: str) -> str:
    return f"{upload_dir.rstrip('/')}/inputs/sha256.json"


def batch_input_uri(inputs_prefix: str, index: int) -> str:
    """Input ``index`` under a batch's ``spec.inputs.uriPrefix``."""
    return f"{inputs_prefix.rstrip('/')}/{_index(index)}.pkl"


# --------------------------------------------------------------------------- data cache

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _content_hash(value: str) -> str:
    if not isinstance(value, str) or not _SHA256.match(value):
        raise ValueError(f"a data content hash must be 64 lowercase hex digits, got {value!r}")
    return value


def data_cache_prefix(root: str, namespace: str, content_hash: str) -> str:
    """Folder of one `kinetic.Data` upload, named by its content hash (ends with '/')."""
    return f"{namespace_prefix(root, namespace)}data/{_content_hash(content_hash)}/"


def data_manifest_uri(root: str, namespace: str, content_hash: str) -> str:
    """The manifest of a data upload: each file's sha256; its presence means complete."""
    return f"{namespace_prefix(root, namespace)}data/{_content_hash(content_hash)}.json"


_DATA_MANIFEST_NAME = re.compile(r"/data/([0-9a-f]{64})\.json$")


def data_manifest_hash(uri: str) -> str | None:
    """The content hash a data manifest's URI names (``…/data/<sha>.json``), or None."""
    found = _DATA_MANIFEST_NAME.search(uri)
    return found.group(1) if found else None


# --------------------------------------------------------------------------- project blobs

PROJECT_BLOB_KINDS = ("txt", "zip")


def projects_prefix(root: str, namespace: str) -> str:
    """The namespace's content-addressed project blobs (ends with '/')."""
    return f"{namespace_prefix(root, namespace)}projects/"


def project_blob_uri(root: str, namespace: str, sha256: str, ext: str) -> str:
    """One project blob, named by the sha256 of its bytes: the same bytes, the same URI."""
    if not isinstance(sha256, str) or not _SHA256.match(sha256):
        raise ValueError(f"a project blob is named by a hex sha256, got {sha256!r}")
    if ext not in PROJECT_BLOB_KINDS:
        raise ValueError(f"a project blob is one of {PROJECT_BLOB_KINDS}, got {ext!r}")
    return f"{projects_prefix(root, namespace)}{sha256}.{ext}"


# --------------------------------------------------------------------------- checking specs


def _bad_rest(rest: str) -> bool:
    return any(part in ("", ".", "..") for part in rest.split("/")) or "\\" in rest


def outside_namespace(root: str, namespace: str, uri: str, field: str) -> str | None:
    """Why ``uri`` (the value of spec ``field``) is refused, or None when it is in the prefix.

    A URI must lie under the namespace prefix and have no empty, '.' or '..'
    segment after it, so one tenant's spec can make the operator and runner
    read or write only that tenant's files.
    """
    prefix = namespace_prefix(root, namespace)
    if uri.startswith(prefix) and len(uri) > len(prefix) and not _bad_rest(uri[len(prefix) :]):
        return None
    return (
        f"{field}: {uri} is outside this namespace's storage prefix {prefix}; objects in "
        f"namespace {namespace} may only name URIs under it (the kinetic client uploads there)"
    )


def outside_own_storage(
    root: str | None, namespace: str, uri: str, field: str, *, always: bool = False
) -> str | None:
    """Why a location a Pod reads or writes with its own credentials is refused, or None.

    Storage under the root belongs to namespaces, and a ``file://`` path (a
    shared filesystem) has no per-tenant permissions: a URI in either must
    lie in this namespace's prefix. A ``gs://`` URI in another bucket is the
    user's own: the Pod's credentials decide, as for any code it runs. With
    ``always``, the URI must be in the prefix wherever it points (the operator
    reads it itself). A folder's trailing ``/`` is not an empty segment.
    """
    inside_root = bool(root) and uri.startswith(str(root).rstrip("/") + "/")
    if not (always or inside_root or uri.startswith("file://")):
        return None
    if not root:
        return f"{field}: the operator has no storage root to check {uri} against"
    bare = uri.removesuffix("/")
    why = outside_namespace(root, namespace, bare, field)
    return None if why is None else why.replace(f": {bare} is", f": {uri} is", 1)
