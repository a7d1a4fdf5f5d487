"""The Helm chart lints clean with the real Helm library and grants only what the operator needs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import helm_sdkpy as helm
import yaml

CHART = Path(__file__).resolve().parents[3] / "helm" / "kinetic"

# Helm's lint severities: 1 info, 2 warning, 4 error.
WARNING = 2


def test_chart_lints_clean() -> None:
    report = asyncio.run(helm.Lint(helm.Configuration()).run(str(CHART)))
    assert report["Errors"] is None
    serious = [m for m in report["Messages"] if m["Severity"] >= WARNING]
    assert serious == []


def _plain(name: str) -> str:
    """A template with its template lines (and template comments) dropped: plain YAML."""
    text = (CHART / "templates" / name).read_text()
    text = text.split("*/ -}}", 1)[-1] if text.startswith("{{- /*") else text
    return "\n".join(line for line in text.splitlines() if "{{" not in line)


def _rbac_rules() -> list[dict]:
    docs = [d for d in yaml.safe_load_all(_plain("rbac.yaml")) if d]
    rules = [
        rule for d in docs if d["kind"] in ("ClusterRole", "Role") for rule in d.get("rules") or []
    ]
    namespaced = yaml.safe_load(_plain("_rbac_rules.tpl"))  # included by the roles above
    assert namespaced and all("verbs" in r for r in namespaced)
    return rules + namespaced


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
        assert not {"serviceaccounts/token", "nodes"} & resources, rule
        if "secrets" in resources:  # its own seal key only (test_helm_seal): read, made once
            assert verbs <= {"get", "create"}, rule
        if "serviceaccounts" in resources:  # the runner's account: made, never changed
            assert verbs <= {"get", "create"}, rule


def test_every_setting_the_chart_passes_is_one_the_operator_reads() -> None:
    import re

    from kinetic_operator.settings import OperatorSettings

    text = (CHART / "templates" / "configmap.yaml").read_text()
    passed = set(re.findall(r"^\s+(KINETIC_\w+):", text, re.M))
    read = {f"KINETIC_{name.upper()}" for name in OperatorSettings.model_fields}
    assert passed and passed <= read, f"the operator ignores {sorted(passed - read)}"


def test_operator_has_no_right_on_any_webhook_configuration() -> None:
    """The chart ships the configuration and its CA; the operator only serves."""
    webhook_rules = [r for r in _rbac_rules() if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert webhook_rules == []


def test_the_shipped_webhooks_are_the_ones_the_operator_serves() -> None:
    """Path and resource of each webhook in the chart match a handler of the operator."""
    import re

    from kinetic_operator.webhook import HOOKS

    text = (CHART / "templates" / "webhook.yaml").read_text()
    shipped = set(re.findall(r'dict "id" "([\w-]+)" "plural" "(\w+)"', text))
    assert shipped == {(hook.id, hook.plural) for hook in HOOKS}
    assert "operations: [CREATE, UPDATE]" in text and "sideEffects: None" in text
    assert "genCA" in text and "lookup" in text  # made once, kept on upgrades


def test_watch_namespaces_sets_the_operator_flags_and_roles() -> None:
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    command = deployment[deployment.index("command:") : deployment.index("ports:")]
    # --all-namespaces only in the else branch of the watchNamespaces loop.
    assert (
        command.index("{{- range .Values.watchNamespaces }}")
        < command.index("--namespace={{ . }}")
        < command.index("{{- else }}")
        < command.index("--all-namespaces")
    )
    rbac = (CHART / "templates" / "rbac.yaml").read_text()
    assert '{{- if not .Values.watchNamespaces }}\n  {{- include "kinetic.namespacedRules"' in rbac
    assert "{{- range .Values.watchNamespaces }}" in rbac and "kind: Role\n" in rbac
