"""Changing a running batch: the admission webhook refuses, the reconcile refuses too."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf
import pytest
from kinetic.model import layout
from kinetic.model.resources import KineticBatchSpec, KineticBatchStatus
from kinetic_operator.handlers import batch_accept
from kinetic_operator.handlers.admission import (
    _batch_job_specs,
    check_spec_update,
    debug_problems,
    register_validators,
    validate_batch,
    validate_job,
)
from kinetic_operator.handlers.batches import BatchMemory
from kinetic_operator.kube import Kube
from kinetic_operator.settings import OperatorSettings
from kinetic_operator.webhook import (
    BATCH_HOOK,
    JOB_HOOK,
    configure_admission,
    self_signed_certificate,
    webhook_entries,
)

SHA = "0" * 64
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def spec(**extra: Any) -> dict[str, Any]:
    return {
        "template": {"function": {"payloadURI": "gs://b/f.pkl", "sha256": SHA}},
        "inputs": {"items": [1, 2, 3]},
        "maxConcurrent": 1,
        **extra,
    }


def body(s: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "steady", "namespace": "ns", **meta}, "spec": s}


def test_mutable_fields_and_metadata_may_change():
    old = body(spec())
    check_spec_update(old, body(spec(maxConcurrent=3)))
    check_spec_update(old, body(spec(maxConcurrent=None)))
    check_spec_update(old, body(spec(cancel=True)))
    check_spec_update(old, body(spec(cancelIndexes="0,2")))
    check_spec_update(body(spec(cancelIndexes="0")), body(spec(cancelIndexes="0-2")))
    check_spec_update(old, body(spec(), labels={"a": "b"}, finalizers=["x"]))


def test_changing_inputs_is_rejected_with_the_reason():
    with pytest.raises(kopf.AdmissionError) as err:
        check_spec_update(body(spec()), body(spec(inputs={"items": [1, 2, 3, 4]})))
    assert err.value.code == 422
    assert str(err.value) == (
        "spec.inputs cannot change on an existing batch (only spec.maxConcurrent, "
        "spec.cancel and spec.cancelIndexes can): create a new batch instead"
    )


def test_changing_the_chunk_size_is_rejected():
    with pytest.raises(kopf.AdmissionError, match=r"^spec.chunkSize cannot change"):
        check_spec_update(body(spec()), body(spec(chunkSize=2)))


def test_changing_the_template_and_more_names_every_field():
    new = spec(template={"function": {"payloadURI": "gs://b/g.pkl", "sha256": SHA}}, retries=2)
    with pytest.raises(kopf.AdmissionError, match=r"^spec.template, spec.retries cannot change"):
        check_spec_update(body(spec()), body(new))


def test_updates_it_cannot_judge_are_allowed():
    check_spec_update(body({"template": "not a template"}), body(spec()))  # old unparsable
    check_spec_update(
        body(spec()), body({"template": "not a template", "inputs": {}})
    )  # new unparsable: the operator fails it
    check_spec_update(None, body(spec()))


def test_the_kopf_handler_takes_old_body_and_operation():
    def call(old: dict | None, new: dict, operation: str) -> None:
        validate_batch(
            old=kopf.Body(old) if old else None, body=kopf.Body(new), operation=operation
        )

    with pytest.raises(kopf.AdmissionError):
        call(body(spec()), body(spec(inputs={"items": [9]})), "UPDATE")
    call(body(spec()), body(spec(cancel=True)), "UPDATE")
    call(None, body(spec(inputs={"items": [9]})), "CREATE")  # a create changes nothing
    with pytest.raises(kopf.AdmissionError, match=r"spec.inputs.items\[1\] is nested more"):
        call(None, body(spec(inputs={"items": [[[1]], _deep(40)]})), "CREATE")


def _deep(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_job_handler_refuses_a_deep_inline_input():
    job = {"metadata": {"name": "j"}, "spec": {"function": {"inputJSON": _deep(33)}}}
    with pytest.raises(kopf.AdmissionError) as err:
        validate_job(body=kopf.Body(job))
    assert err.value.code == 422
    assert "spec.function.inputJSON is nested more than 32 levels" in str(err.value)
    validate_job(body=kopf.Body({"spec": {"function": {"inputJSON": _deep(32)}}}))


def test_both_kinds_are_judged_on_create_and_update_and_fail_open():
    registry = kopf.OperatorRegistry()
    register_validators(registry)
    ours = {h.id: h for h in registry._webhooks.get_all_handlers()}
    for hook, fn in ((JOB_HOOK, validate_job), (BATCH_HOOK, validate_batch)):
        h = ours[hook.id]
        assert h.fn is fn
        assert list(h.operations) == ["CREATE", "UPDATE"]
        assert h.ignore_failures is True and h.side_effects is False
        assert h.subresource is None  # status writes are not judged
    entries = webhook_entries({"url": "https://127.0.0.1:9443/", "caBundle": "Q0E="})
    assert [e["name"] for e in entries] == [
        "kinetic-job-spec.kinetic.dev",
        "kinetic-batch-spec.kinetic.dev",
    ]
    batch = entries[1]
    assert batch["clientConfig"] == {
        "url": "https://127.0.0.1:9443/kinetic-batch-spec",
        "caBundle": "Q0E=",
    }
    assert batch["failurePolicy"] == "Ignore" and batch["sideEffects"] == "None"
    assert batch["rules"] == [
        {
            "apiGroups": ["kinetic.dev"],
            "apiVersions": ["v1alpha1"],
            "resources": ["kineticbatches"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]


def test_admission_settings():
    settings = kopf.OperatorSettings()
    configure_admission(settings, OperatorSettings(webhook_enabled=False), Kube)
    assert settings.admission.server is None and settings.admission.managed is None
    ours = OperatorSettings(webhook_host="kinetic-operator.kinetic-system.svc", webhook_port=9443)
    configure_admission(settings, ours, Kube)
    # Kopf manages no configuration (it would create a mutating one): our server patches ours.
    assert settings.admission.managed is None
    server = settings.admission.server
    assert isinstance(server, kopf.WebhookServer)
    assert (server.host, server.port, server.addr) == (
        "kinetic-operator.kinetic-system.svc",
        9443,
        "0.0.0.0",
    )


def test_self_signed_certificate_names_every_host():
    from cryptography import x509

    cert_pem, key_pem = self_signed_certificate(["kinetic-operator.ns.svc", "0.0.0.0", "127.0.0.1"])
    assert b"PRIVATE KEY" in key_pem
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["kinetic-operator.ns.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_the_reconcile_still_refuses_what_bypasses_the_webhook(tmp_path):
    """Defense in depth: the accepted spec wins, SpecAccepted=False, one Warning event."""
    mem = BatchMemory(uid="u")
    root = f"file://{tmp_path}"
    own = {"function": {"payloadURI": f"{root}/namespaces/ns/uploads/steady-0a0b0c0d/f.pkl",
                        "sha256": SHA}}  # fmt: skip
    accepted = KineticBatchSpec.model_validate(spec(template=own))
    home = layout.batch_home(root, "ns", "steady", "u")
    first, refused = batch_accept.accept(mem, home, accepted)
    assert first == accepted and refused is None
    edited = KineticBatchSpec.model_validate(
        spec(template=own, inputs={"items": [1, 2, 3, 4, 5]}, cancel=True, cancelIndexes="1")
    )
    # A restart: the stored spec is believed because the status vouches for it.
    vouching = KineticBatchStatus(phase="RUNNING", accepted_spec_sha256=mem.accepted.sha256)
    again = BatchMemory(uid="u")
    settings = OperatorSettings(storage_root=root)
    assert batch_accept.check_stored(again, home, vouching, True, edited, settings, None) == []
    acted_on, refused = batch_accept.accept(again, home, edited)
    assert acted_on.inputs == accepted.inputs and acted_on.cancel is True
    assert acted_on.cancel_indexes == "1"
    assert refused is not None and refused.startswith("spec.inputs cannot change")
    status, events = batch_accept.spec_condition(KineticBatchStatus(), refused, NOW)
    cond = next(c for c in status.conditions if c.type == "SpecAccepted")
    assert cond.status == "False" and "create a new batch" in cond.message
    assert [(e.type, e.reason) for e in events] == [("Warning", "SpecChangeRefused")]


@pytest.mark.parametrize(
    "spec, expected",
    [
        (
            {"template": {"container": {"command": ["true"]}, "debug": True}},
            ["spec.template.debug"],
        ),
        (
            {
                "template": {
                    "function": {"payloadURI": "gs://b/p", "sha256": "ab" * 32},
                    "debug": True,
                }
            },
            [],
        ),
        (
            {
                "jobs": [
                    {"container": {"command": ["true"]}},
                    {"container": {"command": ["x"]}, "debug": True},
                ]
            },
            ["spec.jobs[1].debug"],
        ),
        ({"jobs": "not a list", "template": None}, []),
    ],
)
def test_debug_on_a_container_in_a_batch_is_refused_naming_the_field(spec, expected):
    problems = debug_problems(_batch_job_specs(spec))
    assert [p.split(":")[0] for p in problems] == expected
