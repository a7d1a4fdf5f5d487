"""Kopf's admission answer carries an empty patch without copying the object under review."""

from __future__ import annotations

import copy

import kopf
import pytest
from kinetic_operator import kopf_patch


def test_an_empty_patch_is_answered_without_a_copy_of_the_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kopf_patch.install()
    body = kopf.Body({"metadata": {"name": "x"}, "spec": {"items": [[]] * 100_000}})

    def no_copy(*_: object, **__: object) -> object:
        raise AssertionError("the object under review was copied")

    monkeypatch.setattr(copy, "deepcopy", no_copy)
    assert kopf.Patch(body=body).as_json_patch() == []


def test_a_patch_with_changes_is_built_by_kopf_as_before() -> None:
    kopf_patch.install()
    kopf_patch.install()  # idempotent
    patch = kopf.Patch(body=kopf.Body({"metadata": {"name": "x"}, "spec": {"a": 1}}))
    patch["spec"] = {"a": 2}
    assert patch.as_json_patch() == [{"op": "replace", "path": "/spec/a", "value": 2}]
