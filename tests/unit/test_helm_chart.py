"""The Helm chart lints clean with the real Helm library and grants only what the operator needs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "helm" / "kinetic"

helm = pytest.importorskip("helm_sdkpy", reason="helm-sdkpy needs Python 3.12+")

# Helm's lint severities: 1 info, 2 warning, 4 error.
WARNING = 2


def test_chart_lints_clean() -> None:
    report = asyncio.run(helm.Lint(helm.Configuration()).run(str(CHART)))
    assert report["Errors"] is None
    serious = [m for m in report["Messages"] if m["Severity"] >= WARNING]
    assert serious == []


def _rbac_rules() -> list[dict]:
    text = (CHART / "templates" / "rbac.yaml").read_text()
    # Drop template lines: the rules themselves are plain YAML.
    plain = "\n".join(line for line in text.splitlines() if "{{" not in line)
    docs = [d for d in yaml.safe_load_all(plain) if d]
    return [rule for d in docs if d["kind"] in ("ClusterRole", "Role") for rule in d["rules"]]


def test_operator_cannot_change_pods_or_escalate() -> None:
    """It creates and deletes attempt Pods; it can never rewrite one, nor grant itself more."""
    for rule in _rbac_rules():
        resources, verbs = set(rule["resources"]), set(rule["verbs"])
        assert "*" not in resources and "*" not in verbs, rule
        assert not (
            {"pods", "pods/exec", "pods/attach"} & resources and {"update", "patch"} & verbs
        )
        assert not ({"pods/exec", "pods/attach", "pods/portforward"} & resources), rule
        assert not {"roles", "rolebindings", "clusterroles", "clusterrolebindings"} & resources
        assert not {"secrets", "serviceaccounts", "nodes"} & resources, rule


def test_every_setting_the_chart_passes_is_one_the_operator_reads() -> None:
    import re

    from kinetic_operator.settings import OperatorSettings

    text = (CHART / "templates" / "configmap.yaml").read_text()
    passed = set(re.findall(r"^\s+(KINETIC_\w+):", text, re.M))
    read = {f"KINETIC_{name.upper()}" for name in OperatorSettings.model_fields}
    assert passed and passed <= read, f"the operator ignores {sorted(passed - read)}"
