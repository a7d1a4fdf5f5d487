"""The user's project: root discovery, requirement parsing, the shipped source, the image option."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import subprocess
import sys
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import kinetic
import pytest
from kinetic import storage
from kinetic.api import project
from kinetic.api.project import ProjectError
from kinetic.model import layout
from kinetic.runtime import podenv


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# --------------------------------------------------------------------------- project root


@pytest.mark.parametrize(
    "files, start, expected",
    [
        ({"proj/pyproject.toml": "", "proj/pkg/mod.py": ""}, "proj/pkg/mod.py", "proj"),
        ({"proj/requirements.txt": "", "proj/a/b/c.py": ""}, "proj/a/b/c.py", "proj"),
        ({"proj/.git/HEAD": "", "proj/a/m.py": ""}, "proj/a/m.py", "proj"),
        # the nearest marker wins: a sub-project inside a repository
        ({"repo/.git/HEAD": "", "repo/sub/pyproject.toml": "", "repo/sub/m.py": ""},
         "repo/sub/m.py", "repo/sub"),
        ({"repo/.git/HEAD": "", "repo/sub/m.py": ""}, "repo/sub", "repo"),
    ],
)  # fmt: skip
def test_project_root_is_the_nearest_folder_with_a_marker(
    tmp_path: Path, files: dict[str, str], start: str, expected: str
) -> None:
    _tree(tmp_path, files)
    assert project.find_root(tmp_path / start) == tmp_path / expected


def test_no_marker_anywhere_means_no_project(tmp_path: Path) -> None:
    # tmp_path's parents hold no marker on this machine's /tmp (checked, not assumed)
    if project.find_root(tmp_path.parent) is not None:
        pytest.skip("a parent of the temp folder is itself a project")
    _tree(tmp_path, {"loose/m.py": ""})
    assert project.find_root(tmp_path / "loose" / "m.py") is None


# --------------------------------------------------------------------------- requirements


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", []),
        ("# only a comment\n\n", []),
        ("requests==2.32.0\nnumpy>=1.26  # pinned below 2\n", ["requests==2.32.0", "numpy>=1.26"]),
        ("pkg[extra] ; python_version >= '3.11'\n", ["pkg[extra] ; python_version >= '3.11'"]),
        ("long-name\\\n>=1.0\n", ["long-name>=1.0"]),
        ("--extra-index-url https://example.org/simple\nfoo\n",
         ["--extra-index-url https://example.org/simple", "foo"]),
        ("foo @ https://example.org/foo-1.0.tar.gz#sha256=abc\n",
         ["foo @ https://example.org/foo-1.0.tar.gz#sha256=abc"]),
    ],
)  # fmt: skip
def test_requirements_txt_lines(text: str, expected: list[str]) -> None:
    assert project.parse_requirements(text, "requirements.txt") == expected


def test_included_requirements_are_inlined() -> None:
    files = {"base.txt": "six\n-r more.txt\n", "more.txt": "attrs==23.1\n"}
    lines = project.parse_requirements("-r base.txt\nfoo\n", "requirements.txt", files.__getitem__)
    assert lines == ["six", "attrs==23.1", "foo"]


@pytest.mark.parametrize(
    "line, says",
    [
        ("-e .", "editable installs are not supported"),
        ("--editable git+https://x/y", "editable installs are not supported"),
        ("-c constraints.txt", "constraints files are not supported"),
        ("./libs/mine", "is a local path"),
        ("/opt/wheels/x.whl", "is a local path"),
        ("file:///tmp/x.whl", "is a local path"),
    ],
)
def test_requirements_the_pod_cannot_install_are_refused_naming_the_line(
    line: str, says: str
) -> None:
    with pytest.raises(ProjectError, match=says) as info:
        project.parse_requirements(f"ok\n{line}\n", "/p/requirements.txt")
    assert "/p/requirements.txt:2" in str(info.value)


def test_an_include_cycle_is_refused_not_followed_forever() -> None:
    with pytest.raises(ProjectError, match="nested too deep"):
        project.parse_requirements("-r a.txt", "requirements.txt", lambda _: "-r a.txt")


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[project]\nname = "x"\ndependencies = ["pyjokes==0.8.3", " attrs "]\n',
         ["pyjokes==0.8.3", "attrs"]),
        ('[project]\nname = "x"\n', []),
        ("[tool.ruff]\nline-length = 100\n", []),
    ],
)  # fmt: skip
def test_pyproject_dependencies(text: str, expected: list[str]) -> None:
    assert project.pyproject_dependencies(text, "pyproject.toml") == expected


@pytest.mark.parametrize(
    "text, says",
    [
        ("[project\n", "is not valid TOML"),
        ('[project]\ndependencies = "numpy"\n', "must be a list of strings"),
    ],
)
def test_bad_pyproject_names_the_file(text: str, says: str) -> None:
    with pytest.raises(ProjectError, match=says):
        project.pyproject_dependencies(text, "/p/pyproject.toml")


def test_requirements_txt_wins_over_pyproject(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "requirements.txt": "from-requirements\n",
            "pyproject.toml": '[project]\nname="x"\ndependencies=["from-pyproject"]\n',
        },
    )
    assert project.read_requirements(tmp_path) == (
        ["from-requirements"],
        str(tmp_path / "requirements.txt"),
    )
    (tmp_path / "requirements.txt").unlink()
    assert project.read_requirements(tmp_path)[0] == ["from-pyproject"]


# --------------------------------------------------------------------------- source


def test_only_the_projects_own_python_files_ship(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "pyproject.toml": "",
            "main.py": "",
            "pkg/__init__.py": "",
            "pkg/util.py": "",
            "pkg/data.json": "{}",
            ".env": "SECRET=1",
            ".git/hooks/x.py": "",
            ".venv/lib/x.py": "",
            "venv2/pyvenv.cfg": "",
            "venv2/lib/y.py": "",
            "pkg/__pycache__/util.cpython-312.py": "",
            "node_modules/z.py": "",
            "build/lib/b.py": "",
            "x.egg-info/e.py": "",
        },
    )
    files = [p.as_posix() for p in project.source_files(tmp_path)]
    assert files == ["main.py", "pkg/__init__.py", "pkg/util.py"]


def test_the_same_files_always_zip_to_the_same_bytes(tmp_path: Path) -> None:
    _tree(tmp_path, {"a.py": "x = 1\n", "b/c.py": "y = 2\n"})
    files = project.source_files(tmp_path)
    first = project.source_zip(tmp_path, files)
    (tmp_path / "a.py").touch()  # a new mtime alone changes nothing
    assert project.source_zip(tmp_path, files) == first
    (tmp_path / "a.py").write_text("x = 2\n")
    assert project.source_zip(tmp_path, files) != first


def test_too_much_source_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(project, "MAX_SOURCE_FILES", 2)
    _tree(tmp_path, {f"m{i}.py": "" for i in range(3)})
    with pytest.raises(ProjectError, match="more than 2 .py files.*pyproject.toml"):
        project.source_files(tmp_path)


@pytest.mark.parametrize(
    "files, module, file, expected",
    [
        ({"m.py": ""}, "m", "m.py", [""]),
        ({"src/pkg/__init__.py": "", "src/pkg/m.py": ""}, "pkg.m", "src/pkg/m.py", ["", "src"]),
        ({"tests/test_x.py": ""}, "test_x", "tests/test_x.py", ["", "tests"]),
        ({"tests/test_x.py": ""}, "tests.test_x", "tests/test_x.py", [""]),
        ({"scripts/run.py": ""}, "__main__", "scripts/run.py", ["", "scripts"]),
        ({"pkg/__init__.py": ""}, "pkg", "pkg/__init__.py", [""]),
    ],
)
def test_import_paths_make_the_same_imports_work(
    tmp_path: Path, files: dict[str, str], module: str, file: str, expected: list[str]
) -> None:
    _tree(tmp_path, files)
    assert project.import_paths(tmp_path, module, tmp_path / file) == expected


def test_a_function_from_an_installed_package_ships_nothing() -> None:
    assert project.discover(json.dumps) is None


# --------------------------------------------------------------------------- image


@pytest.mark.parametrize(
    "image, container_image, expected",
    [
        (None, None, None),
        ("bundled", None, None),
        (None, "prebuilt", None),
        ("ghcr.io/me/img:1", None, "ghcr.io/me/img:1"),
        (None, "ghcr.io/me/img:1", "ghcr.io/me/img:1"),
        ("ghcr.io/me/img:1", "ghcr.io/me/img:1", "ghcr.io/me/img:1"),
    ],
)
def test_image_and_container_image_are_one_setting(
    image: str | None, container_image: str | None, expected: str | None
) -> None:
    assert project.resolve_image(image, container_image) == expected
    fn = kinetic.run(image=image, container_image=container_image)(lambda: 1)
    assert fn.options["image"] == expected


def test_image_and_container_image_that_disagree_are_refused() -> None:
    with pytest.raises(ValueError, match="image='a:1' and container_image='b:1' disagree"):
        kinetic.run(image="a:1", container_image="b:1")


# --------------------------------------------------------------------------- the pod side


def _ship_source(tmp_path: Path, files: dict[str, str]) -> dict:
    src = _tree(tmp_path / "user", {"requirements.txt": "", **files})
    found = project.Project(
        root=src,
        source=project.source_zip(src, project.source_files(src)),
        paths=("",),
    )
    return project.ship(found, (tmp_path / "store").as_uri(), "team-a")


def test_source_is_uploaded_once_by_content_and_unpacked_in_the_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = _ship_source(tmp_path, {"helper_for_unit_test.py": "VALUE = 7\n"})
    prefix = layout.projects_prefix((tmp_path / "store").as_uri(), "team-a")
    blobs = storage.list_prefix(prefix)
    assert blobs == [entry["source"]["uri"]]
    project._shipped.clear()  # a new client process: storage says it is there already
    assert _ship_source(tmp_path, {"helper_for_unit_test.py": "VALUE = 7\n"}) == entry
    assert storage.list_prefix(prefix) == blobs

    monkeypatch.setenv("KINETIC_DEPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    lines: list[str] = []
    podenv.prepare(entry, lines.append)
    import helper_for_unit_test  # type: ignore[import-not-found]

    assert helper_for_unit_test.VALUE == 7
    podenv.prepare(entry, lines.append)  # a second pod on the node reuses it
    assert any("reusing the project's source" in line for line in lines)


def _prepare_after(barrier: Any, entry: dict, cache: str) -> list[str]:
    os.environ["KINETIC_DEPS_CACHE"] = cache
    lines: list[str] = []
    barrier.wait()
    podenv.prepare(entry, lines.append)
    return lines


def test_pods_sharing_a_cache_unpack_the_source_once(tmp_path: Path) -> None:
    """Pods that start together on one node: one unpacks, the others wait and reuse it."""
    files = {f"mod_{i}.py": f"VALUE = {i}\n" * 200 for i in range(40)}
    entry = _ship_source(tmp_path, files)
    ctx = multiprocessing.get_context("spawn")  # fork from a threaded pytest may deadlock
    pods = 6
    with ctx.Manager() as manager, ProcessPoolExecutor(pods, mp_context=ctx) as pool:
        barrier = manager.Barrier(pods)
        cache = str(tmp_path / "cache")
        logs = list(pool.map(_prepare_after, [barrier] * pods, [entry] * pods, [cache] * pods))
    said = sorted(line.split(" ")[0] for lines in logs for line in lines)
    assert said == ["reusing"] * (pods - 1) + ["unpacked"]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [
        f"src-{entry['source']['sha256'][:32]}"
    ]


def test_a_tampered_source_blob_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = _ship_source(tmp_path, {"m.py": ""})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("m.py", "import os; os.system('boom')\n")
    storage.write_bytes(entry["source"]["uri"], buf.getvalue())
    monkeypatch.setenv("KINETIC_DEPS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(podenv.PrepareError, match="has sha256 .*, expected") as info:
        podenv.prepare(entry, print)
    assert info.value.phase == "unpack-source"


def test_a_failed_install_names_the_phase_and_pips_error_and_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --no-index keeps pip off the network: it fails at once, as a typo'd name would
    found = project.Project(
        root=tmp_path, requirements=("--no-index", "kinetic-absent-pkg==1.0"), source=None
    )
    entry = project.ship(found, (tmp_path / "store").as_uri(), "team-a")
    monkeypatch.setenv("KINETIC_DEPS_CACHE", str(tmp_path / "cache"))
    lines: list[str] = []
    with pytest.raises(podenv.PrepareError) as info:
        podenv.prepare(entry, lines.append)
    assert info.value.phase == "install-dependencies"
    assert info.value.message.startswith("installing dependencies failed: pip exited with 1: ")
    assert "No matching distribution found for kinetic-absent-pkg==1.0" in info.value.message
    assert any(line.startswith("pip: ") for line in lines)  # the install log, line by line
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half-installed to reuse


def test_discover_finds_the_functions_project_its_requirements_and_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(
        tmp_path / "proj",
        {
            "pyproject.toml": '[project]\nname = "p"\ndependencies = ["pyjokes==0.8.3"]\n',
            "src/userpkg_for_unit_test/__init__.py": "",
            "src/userpkg_for_unit_test/tasks.py": "def go():\n    return 1\n",
        },
    )
    monkeypatch.syspath_prepend(str(root / "src"))
    from userpkg_for_unit_test import tasks  # type: ignore[import-not-found]

    found = project.discover(tasks.go)
    assert found is not None and found.root == root.resolve()
    assert found.requirements == ("pyjokes==0.8.3",)
    assert found.paths == ("", "src")
    assert found.source is not None
    names = zipfile.ZipFile(io.BytesIO(found.source)).namelist()
    assert names == ["src/userpkg_for_unit_test/__init__.py", "src/userpkg_for_unit_test/tasks.py"]
    assert project.discover(tasks.go, with_requirements=False).requirements == ()  # type: ignore[union-attr]


def test_a_pod_that_finds_the_source_unpacked_imports_nothing_to_unpack_it(
    tmp_path: Path,
) -> None:
    """Every Pod of a project imports this module; only the first on a node unpacks.

    The others must not pay for pip's subprocess, zipfile, shutil or tempfile
    (about 0.03 CPU-seconds a Pod): a fresh interpreter is the only honest
    place to see what a Pod imports.
    """
    entry = _ship_source(tmp_path, {"helper_warm_cache.py": "VALUE = 1\n"})
    cache = str(tmp_path / "cache")
    script = (
        "import json, sys\n"
        "from kinetic.runtime import podenv\n"
        "lines = []\n"
        f"podenv.prepare(json.loads({json.dumps(json.dumps(entry))}), lines.append)\n"
        "heavy = ('subprocess', 'zipfile', 'shutil', 'tempfile')\n"
        "print(json.dumps([lines, [m for m in heavy if m in sys.modules]]))\n"
    )
    env = {**os.environ, "KINETIC_DEPS_CACHE": cache}

    def pod() -> tuple[list[str], list[str]]:
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        lines, loaded = json.loads(done.stdout)
        return lines, loaded

    first_lines, _ = pod()
    assert first_lines[0].startswith("unpacked the project's source")
    lines, loaded = pod()
    assert lines[0].startswith("reusing the project's source")
    assert loaded == []
