"""The user's project ships with the job: its requirements and its own modules.

Each test writes a small user project into a temporary folder (a
requirements.txt, a helper module and a task module), imports the task
module as the user's script would, and runs its function on the cluster.
The requirement is ``pyjokes``: small, pure Python, and not installed in the
runner's environment (checked), so only the pod-start install can provide it.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kinetic
import pytest
from kinetic import storage
from kinetic.api import project
from kinetic.api.config import resolve
from kinetic.api.jobs import JobStatus
from kinetic.model import layout, payload

pytestmark = pytest.mark.integration

REQUIREMENT = "pyjokes==0.8.3"

TASK = """
def work(x):
    from importlib.metadata import version

    import helper  # imported in the pod, from the shipped source
    import pyjokes  # installed in the pod, from requirements.txt

    assert isinstance(pyjokes.get_joke(), str)
    return helper.triple(x), version("pyjokes"), pyjokes.__file__
"""


def _user_project(root: Path, requirements: str) -> Callable[..., Any]:
    """A user's project folder; returns its ``work`` function, imported from its file."""
    root.mkdir(parents=True)
    (root / "requirements.txt").write_text(requirements)
    (root / "helper.py").write_text("def triple(x):\n    return 3 * x\n")
    (root / "task.py").write_text(textwrap.dedent(TASK))
    name = f"task_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, root / "task.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.work


def _blobs(ns: str) -> dict[str, int | None]:
    """The namespace's project blobs and their generations (a rewrite changes it)."""
    prefix = layout.projects_prefix(resolve().storage_root, ns)
    return {uri: storage.stat(uri) for uri in storage.list_prefix(prefix)}


def test_requirement_and_helper_module_are_there_in_the_pod(ns: str, tmp_path: Path) -> None:
    assert importlib.util.find_spec("pyjokes") is None, "pyjokes must not be preinstalled"
    work = kinetic.run(namespace=ns)(_user_project(tmp_path / "proj", REQUIREMENT + "\n"))

    job = work.run_async(5)
    tripled, version, where = job.result(timeout=240, cleanup=False)

    assert tripled == 15
    assert version == "0.8.3"
    assert "/req-" in where  # from the pod's install folder, not from any site-packages
    log = job.logs() or ""
    assert "installing dependencies: 1 requirement(s) from requirements.txt" in log or (
        "installing dependencies: reusing" in log
    )
    job.cleanup()


def test_a_second_submission_uploads_nothing_new(ns: str, tmp_path: Path) -> None:
    work = kinetic.run(namespace=ns)(_user_project(tmp_path / "proj", REQUIREMENT + "\n"))
    assert work(1)[0] == 3
    first = _blobs(ns)
    assert sorted(uri.rsplit(".", 1)[1] for uri in first) == ["txt", "zip"]

    project._shipped.clear()  # as a new client process would: only storage remembers
    batch = work.run_async_map([2, 3])
    assert [value[0] for value in batch.results(timeout=240)] == [6, 9]
    assert _blobs(ns) == first  # same objects, same generations: nothing re-uploaded


def test_an_unsatisfiable_requirement_fails_in_the_install_phase(ns: str, tmp_path: Path) -> None:
    missing = f"kinetic-no-such-package-{uuid.uuid4().hex[:8]}==1.0"
    work = kinetic.run(namespace=ns)(_user_project(tmp_path / "proj", missing + "\n"))

    job = work.run_async(1)
    with pytest.raises(payload.RunnerError) as info:
        job.result(timeout=240)

    assert info.value.phase == "install-dependencies"
    assert "installing dependencies failed: pip exited with 1" in info.value.message
    assert missing.split("==")[0] in info.value.message  # pip's own words, its tail
    assert job.status() is JobStatus.FAILED
    message = job.describe()["message"]
    assert "install-dependencies" in message and "installing dependencies failed" in message
    assert "pip: " in (job.logs() or "")  # the install log is in the job's log


def test_a_custom_image_skips_the_requirements_but_still_gets_the_source(
    ns: str, tmp_path: Path
) -> None:
    # The requirement cannot be installed from any index: only skipping it lets the job run.
    fn = _user_project(tmp_path / "proj", "kinetic-no-such-package-anywhere==1.0\n")
    # An image a team built FROM the runner (the local cluster serves one under this name).
    image = f"kinetic-runner:custom-py{sys.version_info.major}.{sys.version_info.minor}"
    remote = kinetic.run(namespace=ns, container_image=image)(fn)

    job = remote.run_async(2)
    # helper came from the shipped source; pyjokes is the image's business, and it lacks it
    with pytest.raises(ModuleNotFoundError, match="pyjokes"):
        job.result(timeout=240)
    assert "installing dependencies" not in (job.logs() or "")
    assert "unpacked the project's source" in (job.logs() or "") or (
        "reusing the project's source" in (job.logs() or "")
    )
