"""The seal key's Secret: the operator's only right on Secrets, rendered by the real Helm."""

from __future__ import annotations

from typing import Any

from helm_render import install, of_kind

BASE: dict[str, Any] = {"storageRoot": "gs://bucket/kinetic"}


def _secret_rules(objects: list[dict[str, Any]]) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Every rule on Secrets: (kind, namespace, rule), in Roles and ClusterRoles alike."""
    found = []
    for kind in ("ClusterRole", "Role"):
        for role in of_kind(objects, kind):
            for rule in role.get("rules") or []:
                if "secrets" in rule.get("resources", []):
                    found.append((kind, role["metadata"].get("namespace"), rule))
    return found


def test_the_operator_reads_only_its_seal_key_and_only_in_its_own_namespace() -> None:
    rules = _secret_rules(install({**BASE, "sealSecret": "my-seal"}))
    assert {(kind, ns) for kind, ns, _ in rules} == {("Role", "kinetic-system")}
    reads = [r for _, _, r in rules if "get" in r["verbs"]]
    assert [(r["verbs"], r.get("resourceNames")) for r in reads] == [(["get"], ["my-seal"])]
    assert [r["verbs"] for _, _, r in rules if "get" not in r["verbs"]] == [["create"]]


def test_with_watched_namespaces_no_role_there_touches_secrets() -> None:
    objects = install({**BASE, "watchNamespaces": ["team-a", "team-b"]})
    assert {ns for _, ns, _ in _secret_rules(objects)} == {"kinetic-system"}
