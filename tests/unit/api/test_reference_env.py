"""The reference's environment variables (issue 32, item 2), and the README's list of them.

``KINETIC_CLUSTER`` picks a kubeconfig context as ``cluster=`` does;
``KINETIC_PROJECT``, ``KINETIC_ZONE`` and ``KINETIC_BASE_IMAGE_REPO`` cannot
matter and are warned about once per process. Every variable the client reads
is in the README's table. Nothing here reaches an API server: the kubeconfig
points nowhere, and which context is chosen is asked of `context_for` itself.
"""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import kinetic
import pytest
import yaml
from kinetic.api import reference
from kinetic.api.config import ConfigError, default_namespace
from kinetic.api.reference import IgnoredSetting
from kinetic.cli.main import app
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def contexts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig outside any Pod: a local context and a GKE-named one; nothing in it is
    ever contacted."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for variable in ("KINETIC_CONTEXT", "KINETIC_CLUSTER", *reference.IGNORED_ENV):
        monkeypatch.delenv(variable, raising=False)
    pairs = [("kinetic-local", "local"), ("gke_proj_us-central1-a_train", "gke-train")]
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": c, "cluster": {"server": "https://127.0.0.1:1"}} for _, c in pairs
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": n, "context": {"cluster": c, "user": "u", "namespace": "ns-" + c}}
                    for n, c in pairs
                ],
                "current-context": "kinetic-local",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def test_kinetic_cluster_selects_the_context_as_cluster_does(
    contexts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(That attach, run and list_jobs then use it is checked on the live cluster:
    tests/integration/test_reference_args_live.py.)"""
    monkeypatch.setenv("KINETIC_CLUSTER", "train")
    assert reference.context_for("kinetic.attach", None, None) == "gke_proj_us-central1-a_train"
    # the argument wins, and so does a context
    assert reference.context_for("kinetic.attach_batch", "local", None) == "kinetic-local"
    assert reference.context_for("kinetic.attach", None, "kinetic-local") == "kinetic-local"


def test_kinetic_cluster_and_kinetic_context_must_agree(
    contexts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_CLUSTER", "train")
    monkeypatch.setenv("KINETIC_CONTEXT", "gke_proj_us-central1-a_train")
    assert reference.context_for("kinetic.attach", None, None) == "gke_proj_us-central1-a_train"
    monkeypatch.setenv("KINETIC_CONTEXT", "kinetic-local")
    with pytest.raises(ConfigError) as refused:
        kinetic.attach("job-1")
    assert str(refused.value) == (
        "kinetic.attach(): KINETIC_CLUSTER='train' selects the kubeconfig context "
        "'gke_proj_us-central1-a_train', but KINETIC_CONTEXT='kinetic-local'; unset one of them."
    )


def test_an_unknown_kinetic_cluster_is_an_error_naming_the_variable(
    contexts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_CLUSTER", "prod")
    with pytest.raises(ConfigError) as refused:
        kinetic.list_jobs()
    message = str(refused.value)
    assert message.startswith(
        f"KINETIC_CLUSTER='prod' (read by kinetic.list_jobs): {contexts} has no context for "
        "that cluster. Its contexts: gke_proj_us-central1-a_train, kinetic-local. Set "
        "KINETIC_CLUSTER to one of them, or leave it out"
    )


def test_the_cli_reads_kinetic_cluster_too(contexts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETIC_CLUSTER", "prod")
    out = CliRunner().invoke(app, ["jobs", "list"])
    assert out.exit_code == 2
    assert "KINETIC_CLUSTER='prod' (read by kinetic)" in " ".join(out.output.split())


def test_kinetic_cluster_in_a_pod_is_ignored_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KINETIC_CONTEXT", raising=False)
    monkeypatch.setenv("KINETIC_CLUSTER", "train")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert reference.context_for("kinetic.attach", None, None) is None
    [warning] = [w for w in caught if issubclass(w.category, IgnoredSetting)]
    assert "KINETIC_CLUSTER='train' is ignored in a Pod" in str(warning.message)


def test_the_variables_that_cannot_matter_warn_once_per_process(
    contexts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_PROJECT", "my-proj")
    monkeypatch.setenv("KINETIC_BASE_IMAGE_REPO", "me/kinetic")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own: each warning once per place
        for _ in range(3):
            reference.context_for("kinetic.attach", None, None)
    said = [str(w.message) for w in caught if issubclass(w.category, IgnoredSetting)]
    assert len(said) == 2, said
    assert said[0] == (
        "KINETIC_PROJECT='my-proj' is the reference API's default for project=, which is not "
        "used on Kubernetes: the cluster is the one of your kubeconfig context: pass context= "
        "(or cluster= naming a context) or set KINETIC_CONTEXT; storage is the operator's "
        "storage root. Unset it to silence this."
    )
    assert said[1].startswith("KINETIC_BASE_IMAGE_REPO='me/kinetic' is the reference API's")
    assert issubclass(IgnoredSetting, UserWarning)  # shown by default


def test_kinetic_namespace_is_the_default_namespace(
    contexts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_namespace() == "ns-local"  # the context's own
    assert default_namespace("gke_proj_us-central1-a_train") == "ns-gke-train"
    monkeypatch.setenv("KINETIC_NAMESPACE", "team-a")
    assert default_namespace() == "team-a"


# --------------------------------------------------------------------------- the README


def variables_read() -> set[str]:
    """Every environment variable the client's code reads by name (not the Pod's runtime):
    the first argument of each ``environ.get(...)``, a literal or a module's constant, and
    the reference's variables `kinetic.api.reference` reads in a loop."""
    found = set(reference.IGNORED_ENV)
    root = REPO / "client" / "kinetic"
    for path in root.rglob("*.py"):
        if "runtime" in path.parts:
            continue
        module = ".".join(path.with_suffix("").relative_to(root.parent).parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            if not ast.unparse(node.func).endswith(("environ.get", "environ.setdefault")):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant):
                found.add(arg.value)
            elif isinstance(arg, ast.Name | ast.Attribute):
                namespace = vars(importlib.import_module(module.removesuffix(".__init__")))
                try:
                    found.add(eval(ast.unparse(arg), namespace))  # a constant of the module
                except NameError:
                    continue  # a loop's variable: the reference's, added above
    return found


def readme_variables() -> set[str]:
    text = (REPO / "README.md").read_text()
    table = text.split("**Environment variables the client reads**", 1)[1].split("\n\n#", 1)[0]
    return set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table))


def test_the_readme_lists_every_variable_the_client_reads() -> None:
    read = variables_read()
    assert {"KINETIC_CONTEXT", "KINETIC_CLUSTER", "KINETIC_NAMESPACE", "KUBECONFIG"} <= read
    missing = sorted(read - readme_variables())
    assert not missing, f"add these to the README's table of variables: {missing}"
