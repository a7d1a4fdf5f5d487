"""Preparing the pod's Python for the user's project, before the function is unpickled.

The payload names the project's requirements and source (`kinetic.api.project`).
The runner, before unpickling the function:

1. installs the requirements with ``pip install --target`` into a folder of
   their own, keyed by the requirements' sha256 and the interpreter, and puts
   it first on ``sys.path`` (and ``PYTHONPATH``, for subprocesses): the
   image's own site-packages stay untouched, and a user's pinned version wins
   over the image's. pip's output goes to the pod's log line by line (so
   `kubectl logs` and the archived job log show it); a failure ends the job in
   phase ``install-dependencies`` with pip's last lines;
2. unpacks the project's ``.py`` files into a folder keyed by their zip's
   sha256 and puts the project's import folders first on ``sys.path``.

Both folders live in the *cache directory*: ``$KINETIC_DEPS_CACHE`` when
set, else ``<tmp>/kinetic-deps-<uid>``. A folder is complete once renamed
into place, so pods sharing a cache (pods whose image or env points it at a
shared volume; otherwise each Pod has its own) install each distinct
requirements set once and reuse it. A hostPath cache
is not offered by the operator: the restricted Pod Security profile it
enforces forbids hostPath volumes.

Imports only the standard library and kinetic's storage module; the runner
imports this module only for payloads that carry a project. Every Pod of such
a payload imports it, but only the first on a node downloads, unpacks or
installs: what only that one needs (pip's subprocess, zipfile, shutil,
tempfile, pathlib) is imported where it is used, which saves the others about
0.03 CPU-seconds each (``make bench``'s function batch has 300 such Pods).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from kinetic import storage

__all__ = ["PrepareError", "cache_dir", "install_key", "prepare", "PIP_TAIL_LINES"]

PIP_TAIL_LINES = 15
"""pip's last lines kept in a failure message (the termination message is 4 KiB at most)."""


class PrepareError(Exception):
    """Preparing the project failed in ``phase``; ``message`` says what and how to fix it."""

    def __init__(self, phase: str, message: str) -> None:
        super().__init__(phase, message)
        self.phase = phase
        self.message = message


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where installed requirements and unpacked sources are kept (created when missing)."""
    env = os.environ if environ is None else environ
    chosen = env.get("KINETIC_DEPS_CACHE", "").strip()
    # A Pod is Linux: $TMPDIR or /tmp, as tempfile would find, without importing it.
    tmp = env.get("TMPDIR") or "/tmp"
    path = Path(chosen) if chosen else Path(tmp) / f"kinetic-deps-{os.getuid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)  # a read-only mount says EROFS here
    except OSError:
        writable = False
    if not writable:
        import tempfile

        path = Path(tempfile.mkdtemp(prefix="kinetic-deps-"))  # unwritable: this pod only
    return path


def install_key(requirements_sha256: str) -> str:
    """Requirements hash plus interpreter and platform: wheels differ between them."""
    tag = f"{sys.implementation.name}{sys.version_info.major}.{sys.version_info.minor}"
    text = f"{requirements_sha256}\0{tag}\0{sys.platform}\0{os.uname().machine}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _fetch(entry: Mapping[str, Any], what: str, phase: str) -> bytes:
    """Download a project blob and check it against the hash the (verified) payload names."""
    uri, want = entry.get("uri"), str(entry.get("sha256", "")).lower()
    if not isinstance(uri, str) or not want:
        raise PrepareError(phase, f"the payload's {what} entry has no uri or sha256")
    try:
        data = storage.read_bytes(uri)
    except storage.StorageError as e:
        raise PrepareError(phase, f"cannot download the {what} {uri}: {e}") from None
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise PrepareError(phase, f"the {what} at {uri} has sha256 {got}, expected {want}")
    return data


@contextlib.contextmanager
def _one_at_a_time(cache: Path) -> Iterator[None]:
    """Hold the cache's lock while preparing a folder in it.

    Pods sharing a cache (a shared volume) that start together would
    otherwise all download, unpack or install the same thing at once; with
    the lock one does it and the others find it done. The lock is on the
    folder itself (``flock`` of its descriptor), so it leaves no file behind,
    and the kernel drops it with a Pod that dies holding it.
    """
    fd = os.open(cache, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _prepend(path: Path) -> None:
    text = str(path)
    if text in sys.path:
        sys.path.remove(text)
    sys.path.insert(0, text)
    current = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = text + (os.pathsep + current if current else "")


PIP_CA_ENV = "KINETIC_PIP_CA_CERTIFICATES"
"""Extra CA certificates (PEM) the cluster's packageIndex setting adds to pip's bundle."""
SYSTEM_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


def _pip_ca_bundle(extra: str) -> Path:
    """The image's CA bundle plus the cluster's extra certificates, for pip only.

    The image's own bundle is kept (an extra CA must not replace the public
    ones); when the image has none, pip's vendored one is the base.
    """
    import tempfile

    base = next((Path(p) for p in SYSTEM_CA_BUNDLES if Path(p).is_file()), None)
    if base is None:
        from pip._vendor import certifi  # the bundle pip itself would use

        base = Path(certifi.where())
    fd, name = tempfile.mkstemp(prefix="kinetic-pip-ca-", suffix=".pem")
    with os.fdopen(fd, "w") as out:
        out.write(base.read_text(errors="replace").rstrip("\n") + "\n" + extra.strip() + "\n")
    return Path(name)


def _run_pip(args: list[str], log: Callable[[str], None]) -> tuple[int, list[str]]:
    """Run pip, echoing each line to the log; returns its exit code and its last lines."""
    import subprocess

    tail: collections.deque[str] = collections.deque(maxlen=PIP_TAIL_LINES)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    extra = env.pop(PIP_CA_ENV, "")
    if extra.strip() and "PIP_CERT" not in env:
        env["PIP_CERT"] = str(_pip_ca_bundle(extra))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pip", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
        )
    except OSError as e:
        return 127, [f"cannot start pip: {e}"]
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line:
            log(f"pip: {line}")
            tail.append(line)
    return proc.wait(), list(tail)


def _build_once(cache: Path, target: Path, build: Callable[[Path], None]) -> bool:
    """Make ``target`` in ``cache`` with ``build(folder)`` unless it is there; True if built.

    The common case, a folder another Pod made, costs one stat and no lock: a
    folder is complete once it has its name. Otherwise the cache's lock is
    taken and the check made again, so Pods starting together build it once;
    ``build`` fills a temporary folder that gets the final name only when it
    returns.
    """
    if target.is_dir():
        return False
    with _one_at_a_time(cache):
        if target.is_dir():
            return False
        import shutil
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=cache))
        try:
            build(tmp)
            try:
                os.rename(tmp, target)
            except OSError:  # on a volume shared by nodes, another Pod may have won
                if not target.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already when published
    return True


def install_requirements(entry: Mapping[str, Any], cache: Path, log: Callable[[str], None]) -> Path:
    """Install the requirements once per cache; returns the folder now first on sys.path."""
    sha = str(entry.get("sha256", ""))
    target = cache / f"req-{install_key(sha)}"
    if _build_once(cache, target, lambda tmp: _install(entry, tmp, log)):
        log(f"installing dependencies: done, in {target}")
    else:
        log(f"installing dependencies: reusing {target} (requirements sha256 {sha[:12]})")
    _prepend(target / "site")
    return target


def _install(entry: Mapping[str, Any], into: Path, log: Callable[[str], None]) -> None:
    """pip install the requirements into ``into``/site."""
    phase = "install-dependencies"
    data = _fetch(entry, "requirements", phase)
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    log(f"installing dependencies: {len(lines)} requirement(s) from {entry.get('file')}")
    req_file = into / ".requirements.txt"
    req_file.write_bytes(data)
    code, tail = _run_pip(
        ["install", "--no-input", "--target", str(into / "site"), "-r", str(req_file)], log
    )
    if code != 0:
        errors = [line for line in tail if line.startswith("ERROR")]
        detail = " | ".join(errors or tail) or "no output"
        raise PrepareError(
            phase,
            f"installing dependencies failed: pip exited with {code}: {detail} (fix "
            f"{entry.get('file') or 'the requirements'}, or pass image= an image that "
            "has them)",
        )
    req_file.unlink()


def _safe_relative(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return not path.startswith("/") and ".." not in parts and "\\" not in path


def _extract(data: bytes, into: Path, phase: str) -> None:
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            bad = [n for n in zf.namelist() if not _safe_relative(n)]
            if bad:
                raise PrepareError(phase, f"the project source has unsafe names: {bad[:3]}")
            zf.extractall(into)
    except zipfile.BadZipFile as e:
        raise PrepareError(phase, f"the project source is not a zip: {e}") from None


def unpack_source(entry: Mapping[str, Any], cache: Path, log: Callable[[str], None]) -> Path:
    """Unpack the project's source once per cache; put its import folders first on sys.path."""
    phase = "unpack-source"
    sha = str(entry.get("sha256", ""))
    paths = entry.get("paths") or [""]
    if not isinstance(paths, list) or not all(
        isinstance(p, str) and _safe_relative(p) for p in paths
    ):
        raise PrepareError(phase, f"the payload's source paths {paths!r} are not relative folders")
    target = cache / f"src-{sha[:32]}"
    fetched: list[int] = []

    def unpack(into: Path) -> None:
        data = _fetch(entry, "project source", phase)
        fetched.append(len(data))
        _extract(data, into, phase)

    if _build_once(cache, target, unpack):
        log(f"unpacked the project's source ({fetched[0]} bytes) into {target}")
    else:
        log(f"reusing the project's source in {target}")
    for rel in reversed(paths):  # the first listed ends up first on sys.path
        _prepend(target / rel if rel else target)
    return target


def prepare(project: Mapping[str, Any], log: Callable[[str], None]) -> None:
    """Install the requirements, then unpack the source (its modules may import them)."""
    cache = cache_dir()
    requirements = project.get("requirements")
    source = project.get("source")
    if isinstance(requirements, Mapping):
        install_requirements(requirements, cache, log)
    if isinstance(source, Mapping):
        unpack_source(source, cache, log)
