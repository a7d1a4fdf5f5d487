"""The user's project, shipped with each job: its requirements and its own Python source.

A function usually needs more than its own pickle: packages the image lacks
(the project's requirements) and the project's other modules (a helper it
imports lazily, inside the function). The client finds the *project root*
from the file that defines the function (the nearest directory upward with
``pyproject.toml``, ``requirements.txt`` or ``.git``), reads the requirements
from it (``requirements.txt`` when present, else ``[project] dependencies``
of ``pyproject.toml``) and zips the project's ``.py`` files. Both are
uploaded content-addressed (`kinetic.model.layout.project_blob_uri`), so
submitting the same project again uploads nothing; the job payload names
them with their sha256 and the runner installs and unpacks them before it
unpickles the function (`kinetic.runtime.podenv`).

Only ``.py`` files are shipped: data and config files (``.env`` with secrets
among them) stay on the laptop. Hidden directories, virtual environments,
``__pycache__``, ``node_modules``, ``build`` and ``dist`` are skipped.

A function that comes from an installed package (site-packages, the
standard library) ships nothing: the image is expected to have it.

Everything above the upload (`discover`, `find_root`, `parse_requirements`,
`pyproject_dependencies`, `source_zip`) is pure or reads only local files,
so it is table-tested without a cluster.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import threading
import tomllib
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinetic import storage
from kinetic.model import layout

__all__ = [
    "ROOT_MARKERS",
    "MAX_SOURCE_FILES",
    "MAX_SOURCE_BYTES",
    "ProjectError",
    "Project",
    "find_root",
    "parse_requirements",
    "pyproject_dependencies",
    "read_requirements",
    "source_files",
    "source_zip",
    "import_paths",
    "discover",
    "ship",
    "DEFAULT_IMAGE_ALIASES",
    "resolve_image",
]

ROOT_MARKERS = ("pyproject.toml", "requirements.txt", ".git")
"""What marks a project root, looked for upward from the function's file."""

MAX_SOURCE_FILES = 20_000
MAX_SOURCE_BYTES = 200 * 1024 * 1024
"""Bounds on the shipped source (uncompressed): past them the root is surely too wide."""

_SKIP_DIRS = frozenset(
    {"__pycache__", "node_modules", "site-packages", "dist-packages", "build", "dist"}
)
_MAX_INCLUDE_DEPTH = 10
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so the same files always zip to the same bytes

DEFAULT_IMAGE_ALIASES = ("bundled", "prebuilt")
"""The reference's names for "the default image, requirements installed for you"."""


class ProjectError(ValueError):
    """The project cannot be shipped as it is; the message names the file and the fix."""


# --------------------------------------------------------------------------- image


def resolve_image(image: str | None, container_image: str | None) -> str | None:
    """The custom image to run, or None for the default image (requirements installed).

    ``container_image`` is the reference's name for ``image``; giving both
    with different values is an error. ``"bundled"`` and ``"prebuilt"`` (the
    reference's default modes) both mean the default image here: this cluster
    builds no images, it installs the requirements when the pod starts.
    """
    if image is not None and container_image is not None and image != container_image:
        raise ValueError(
            f"image={image!r} and container_image={container_image!r} disagree: they are "
            "the same setting (container_image is the reference's name); pass only one"
        )
    chosen = image if image is not None else container_image
    if chosen is not None and (not isinstance(chosen, str) or not chosen.strip()):
        raise ValueError(f"image must be a non-empty image reference, got {chosen!r}")
    if chosen is None or chosen.strip() in DEFAULT_IMAGE_ALIASES:
        return None
    return chosen.strip()


# --------------------------------------------------------------------------- discovery


def find_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding one of `ROOT_MARKERS`."""
    here = start if start.is_dir() else start.parent
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            return folder
    return None


_OPTION = re.compile(r"^(-[a-zA-Z]|--[a-z][a-z-]*)(?:[ =]\s*(.*))?$")
_INCLUDE = {"-r", "--requirement"}
_UNSUPPORTED = {
    "-c": "constraints files",
    "--constraint": "constraints files",
    "-e": "editable installs",
    "--editable": "editable installs",
}
_LOCAL_PATH = re.compile(r"^(\.{1,2}/|/|~|file:)")


def parse_requirements(
    text: str, where: str, read: Callable[[str], str] | None = None, _depth: int = 0
) -> list[str]:
    """The requirement lines of a requirements.txt, flattened.

    Comments, blank lines and line continuations are resolved; ``-r other.txt``
    is inlined through ``read`` (relative names as the caller resolves them).
    Options pip accepts in a file (``--index-url``, ``--extra-index-url``,
    ``--pre``, ...) are kept. Editable installs, constraints files and local
    paths are refused: the pod cannot see the laptop's disk.
    """
    lines: list[str] = []
    pending = ""
    numbered: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = pending + raw
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        pending = ""
        numbered.append((number, line))
    if pending:
        numbered.append((len(text.splitlines()), pending))
    for number, line in numbered:
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if not line:
            continue
        at = f"{where}:{number}"
        option = _OPTION.match(line)
        if option is not None:
            name, value = option.group(1), (option.group(2) or "").strip()
            if name in _UNSUPPORTED:
                raise ProjectError(
                    f"{at}: {line!r}: {_UNSUPPORTED[name]} are not supported in shipped "
                    "requirements; list the packages themselves (name and version)"
                )
            if name in _INCLUDE:
                if read is None or _depth >= _MAX_INCLUDE_DEPTH:
                    raise ProjectError(f"{at}: cannot follow {line!r} (nested too deep)")
                lines += parse_requirements(read(value), value, read, _depth + 1)
                continue
            lines.append(line)
            continue
        if _LOCAL_PATH.match(line):
            raise ProjectError(
                f"{at}: {line!r} is a local path, which the pod cannot reach; publish the "
                "package to an index or put its source in this project"
            )
        lines.append(line)
    return lines


def pyproject_dependencies(text: str, where: str) -> list[str]:
    """``[project] dependencies`` of a pyproject.toml ([] when it has none)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProjectError(f"{where} is not valid TOML: {e}") from None
    project = doc.get("project", {})
    deps = project.get("dependencies", []) if isinstance(project, dict) else []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ProjectError(f"{where}: [project] dependencies must be a list of strings")
    return [d.strip() for d in deps if d.strip()]


def read_requirements(root: Path) -> tuple[list[str], str | None]:
    """The project's requirement lines and the file they came from (None: no file).

    ``requirements.txt`` wins over ``pyproject.toml`` when both exist, as
    the one that pins what is installed.
    """
    req = root / "requirements.txt"
    if req.is_file():

        def read(name: str) -> str:
            path = (req.parent / name).resolve()
            try:
                return path.read_text()
            except OSError as e:
                raise ProjectError(f"{req}: cannot read included {name}: {e}") from None

        return parse_requirements(req.read_text(), str(req), read), str(req)
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        return pyproject_dependencies(pyproject.read_text(), str(pyproject)), str(pyproject)
    return [], None


def _skipped_dir(path: Path) -> bool:
    name = path.name
    return (
        name.startswith(".")
        or name in _SKIP_DIRS
        or name.endswith(".egg-info")
        or (path / "pyvenv.cfg").exists()  # a virtual environment under another name
    )


def source_files(root: Path) -> list[Path]:
    """The project's ``.py`` files, relative to ``root``, sorted; bounded by the limits."""
    found: list[Path] = []
    total = 0
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not _skipped_dir(here / d))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = here / name
            try:
                total += path.stat().st_size
            except OSError:
                continue  # a dangling link or a file removed while walking
            found.append(path.relative_to(root))
            if len(found) > MAX_SOURCE_FILES or total > MAX_SOURCE_BYTES:
                raise ProjectError(
                    f"the project at {root} has more than {MAX_SOURCE_FILES} .py files or "
                    f"{MAX_SOURCE_BYTES // 2**20} MiB of them, the most kinetic ships; put a "
                    "pyproject.toml or requirements.txt in the folder that holds your code so "
                    "that it becomes the project root"
                )
    return sorted(found)


def source_zip(root: Path, files: Iterable[Path]) -> bytes:
    """The files as a zip whose bytes depend only on their names and contents."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel in files:
            info = zipfile.ZipInfo(rel.as_posix(), date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, (root / rel).read_bytes())
    return buf.getvalue()


def import_paths(root: Path, module_name: str | None, module_file: Path | None) -> list[str]:
    """Folders (relative to ``root``, POSIX, "" for the root) to put on the pod's sys.path.

    The root itself, ``src`` when the project uses that layout, and the folder
    the function's own module was imported from (``tests/`` for a module that
    a test runner imported as ``test_x``), so the same ``import`` lines work.
    """
    paths = [""]
    if (root / "src").is_dir():
        paths.append("src")
    if module_file is None:
        return paths
    base = module_file.parent  # a script (``__main__``): python puts its folder first
    if module_name and module_name != "__main__":
        depth = module_name.count(".") + (1 if module_file.name == "__init__.py" else 0)
        for _ in range(depth):
            base = base.parent
    try:
        rel = base.relative_to(root).as_posix()
    except ValueError:
        return paths
    if rel != "." and rel not in paths:
        paths.append(rel)
    return paths


# --------------------------------------------------------------------------- the project


@dataclass(frozen=True)
class Project:
    """What one function ships: requirements and source, each with its sha256."""

    root: Path
    requirements: tuple[str, ...] = ()
    requirements_file: str | None = None
    source: bytes | None = None
    paths: tuple[str, ...] = ()

    @property
    def requirements_text(self) -> bytes | None:
        if not self.requirements:
            return None
        return ("\n".join(self.requirements) + "\n").encode()


def _installed(path: Path) -> bool:
    from kinetic.model.payload import _installed_dirs  # one definition of "installed"

    text = str(path)
    if f"{os.sep}site-packages{os.sep}" in text or f"{os.sep}dist-packages{os.sep}" in text:
        return True
    return text.startswith(_installed_dirs())


def _function_file(fn: Callable[..., Any]) -> tuple[Path | None, str | None]:
    """The file defining ``fn`` (resolved) and its module name; None for notebooks/REPL."""
    target = getattr(fn, "__wrapped__", fn)
    code = getattr(target, "__code__", None)
    filename = getattr(code, "co_filename", None)
    module_name = getattr(target, "__module__", None)
    if not isinstance(filename, str) or filename.startswith("<") or not os.path.isfile(filename):
        return None, module_name
    return Path(os.path.realpath(filename)), module_name


_cache_lock = threading.Lock()
_source_cache: dict[tuple[Any, ...], bytes] = {}


def _zip_cached(root: Path, files: list[Path]) -> bytes:
    """Zip once per distinct (root, files, sizes, mtimes): resubmitting skips the rezip."""
    stats = []
    for rel in files:
        st = (root / rel).stat()
        stats.append((rel.as_posix(), st.st_size, st.st_mtime_ns))
    key = (str(root), tuple(stats))
    with _cache_lock:
        if key in _source_cache:
            return _source_cache[key]
    data = source_zip(root, files)
    with _cache_lock:
        _source_cache.clear()  # one project per process is the common case; keep memory flat
        _source_cache[key] = data
    return data


def discover(
    fn: Callable[..., Any], *, with_requirements: bool = True, cwd: Path | None = None
) -> Project | None:
    """The project ``fn`` belongs to, or None when there is nothing to ship.

    ``fn``'s file decides (the current directory for notebook cells); a
    function from an installed package ships nothing. ``with_requirements``
    is False for a custom image, which is expected to have them.
    """
    file, module_name = _function_file(fn)
    if file is not None and _installed(file):
        return None
    start = file if file is not None else (cwd or Path.cwd()).resolve()
    root = find_root(start)
    if root is None:
        return None
    requirements, req_file = read_requirements(root) if with_requirements else ([], None)
    files = source_files(root)
    source = _zip_cached(root, files) if files else None
    paths = tuple(import_paths(root, module_name, file)) if source else ()
    if not requirements and source is None:
        return None
    return Project(
        root=root,
        requirements=tuple(requirements),
        requirements_file=req_file,
        source=source,
        paths=paths,
    )


# --------------------------------------------------------------------------- shipping

_shipped: set[str] = set()  # URIs this process has uploaded or seen present


def _upload_once(uri: str, data: bytes) -> bool:
    """Upload ``data`` unless its content-addressed URI exists; True when it was uploaded."""
    if uri in _shipped:
        return False
    uploaded = False
    if not storage.exists(uri):
        storage.write_bytes(uri, data)
        uploaded = True
    _shipped.add(uri)
    return uploaded


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ship(project: Project, storage_root: str, namespace: str) -> dict[str, Any]:
    """Upload what is missing; return the payload's ``project`` entry for the runner.

    ``{"root": <folder name>, "requirements": {"uri", "sha256", "file"} | None,
    "source": {"uri", "sha256", "paths"} | None}``. The payload's own sha256
    covers these hashes, and the runner checks each blob against its hash.
    """
    entry: dict[str, Any] = {"root": project.root.name, "requirements": None, "source": None}
    req = project.requirements_text
    if req is not None:
        sha = _sha256(req)
        uri = layout.project_blob_uri(storage_root, namespace, sha, "txt")
        _upload_once(uri, req)
        entry["requirements"] = {
            "uri": uri,
            "sha256": sha,
            "file": os.path.basename(project.requirements_file or "requirements.txt"),
        }
    if project.source is not None:
        sha = _sha256(project.source)
        uri = layout.project_blob_uri(storage_root, namespace, sha, "zip")
        _upload_once(uri, project.source)
        entry["source"] = {"uri": uri, "sha256": sha, "paths": list(project.paths)}
    return entry
