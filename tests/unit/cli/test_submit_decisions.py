"""`kinetic batches submit`: the guide's request format, GPU counts, what happens on a refusal,
and the policy's keys: dryRunDefault, requireConfirmation, defaultGpuType, maxJobsPerRequest
(table tests)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kinetic.cli.guide import GuideError, RequestSettings, gpu_accelerator, gpu_offers
from kinetic.cli.submit_file import Document, DocumentError, Refusal, load_documents, read_file
from kinetic.cli.submit_plan import (
    Decision,
    Outcome,
    create_all,
    decide,
    request_size_problem,
    summary_lines,
    to_create,
)
from kinetic.model.catalog import Catalog, GpuType, default_catalog
from kinetic.model.policy_keys import SubmissionPolicy, submission_policy
from kubernetes.client import ApiException

BUILT_IN = default_catalog().names()
API = "apiVersion: kinetic.dev/v1alpha1"


def job_doc(name: str, **spec: Any) -> str:
    body = {"container": {"command": ["true"]}, **spec}
    return f"{API}\nkind: KineticJob\nmetadata: {{name: {name}}}\nspec: {json.dumps(body)}\n"


def request(*jobs: dict[str, Any], **keys: Any) -> str:
    return json.dumps({"jobs": list(jobs), **keys})


def train(name: str, **keys: Any) -> dict[str, Any]:
    return {"type": "training", "name": name, "image": "busybox:1", "command": "true", **keys}


# ----------------------------------------------------------------------- GPU counts


@pytest.mark.parametrize(
    "gpus,gpu_type,expected",
    [
        (2, "l4", "gpu-l4x2"),
        (1, "l4", "gpu-l4"),
        (None, "a100", "gpu-a100"),  # a type alone is one GPU of it
        (8, "GPU-A100", "gpu-a100x8"),  # spelt as the catalog's names are, any case
        (16, "a100", "gpu-a100x16"),
        (0, "l4", "cpu"),
        (None, None, "cpu"),
        (0, None, "cpu"),
    ],
)
def test_gpus_and_a_type_map_to_the_catalogs_accelerator(
    gpus: Any, gpu_type: Any, expected: str
) -> None:
    assert gpu_accelerator(gpus, gpu_type, BUILT_IN, "jobs[0] (a)") == expected


@pytest.mark.parametrize(
    "gpus,gpu_type,says",
    [
        (
            3,
            "l4",
            "jobs[0] (a): gpus: 3 l4 GPUs per job is not offered; l4 comes in 1, 2, 4, 8 GPUs "
            "per job: set gpus to one of those",
        ),
        (
            2,
            None,
            "jobs[0] (a): gpus: 2 GPUs of which type? Add gpu_type (one of: a100, h100, l4, t4), "
            "or ask the administrator to set defaultGpuType in the policy",
        ),
        (1, "a10", "gpu_type: 'a10' is not a GPU type this cluster offers; did you mean 'a100'?"),
        (1, "v100", "GPU types: a100, h100, l4, t4"),
        ("two", "l4", "gpus: expected a whole number of GPUs, got 'two'"),
        (True, "l4", "gpus: expected a whole number of GPUs, got True"),
        (-1, "l4", "gpus: expected a whole number of GPUs, got -1"),
        (2, 4, "gpu_type: expected a GPU type such as l4, got 4"),
    ],
)
def test_a_gpu_request_the_catalog_cannot_serve_is_refused_naming_the_field(
    gpus: Any, gpu_type: Any, says: str
) -> None:
    with pytest.raises(GuideError) as err:
        gpu_accelerator(gpus, gpu_type, BUILT_IN, "jobs[0] (a)")
    assert says in str(err.value)


@pytest.mark.parametrize(
    "gpus,gpu_type,default,expected",
    [
        (2, None, "l4", "gpu-l4x2"),  # the policy's type
        (1, None, "a100", "gpu-a100"),
        (4, "a100", "l4", "gpu-a100x4"),  # the job's own type wins
        (None, None, "l4", "cpu"),  # no GPUs counted: no type needed
        (0, None, "l4", "cpu"),
    ],
)
def test_gpus_without_a_type_take_the_policys_default_type(
    gpus: Any, gpu_type: Any, default: str, expected: str
) -> None:
    assert gpu_accelerator(gpus, gpu_type, BUILT_IN, "jobs[0] (a)", default) == expected


def test_a_default_type_the_cluster_does_not_offer_says_it_is_the_policys() -> None:
    with pytest.raises(GuideError) as err:
        gpu_accelerator(2, None, BUILT_IN, "jobs[0] (a)", "l40")
    assert str(err.value) == (
        "jobs[0] (a): defaultGpuType (the policy's, for a job without gpu_type): 'l40' is not "
        "a GPU type this cluster offers; did you mean 'l4'? GPU types: a100, h100, l4, t4"
    )


def test_the_clusters_published_catalog_decides_not_the_built_in_one() -> None:
    published = Catalog(gpus={"b200": GpuType(node_label="nvidia-b200", counts=[8])}).names()
    assert gpu_offers(published) == {"b200": [8]}
    assert gpu_accelerator(8, "b200", published, "jobs[0]") == "gpu-b200x8"
    with pytest.raises(GuideError, match="b200 comes in 8 GPUs per job"):
        gpu_accelerator(1, "b200", published, "jobs[0]")
    with pytest.raises(GuideError, match="GPU types: b200"):
        gpu_accelerator(1, "l4", published, "jobs[0]")


# ----------------------------------------------------------------------- the request format


def test_each_job_of_a_request_becomes_a_kinetic_job() -> None:
    text = request(
        train("job1", project="team-a", gpus=2, gpu_type="l4", command="python train.py"),
        {"name": "job2", "command": ["python", "eval.py"]},  # type defaults to training
        continue_on_error=False,
        dry_run=False,
        confirmed=True,
    )
    contents = read_file(text, "default")
    assert contents.settings == RequestSettings(
        continue_on_error=False, dry_run=False, confirmed=True
    )
    one, two = contents.entries
    assert isinstance(one, Document) and isinstance(two, Document)
    assert (one.kind, one.name, one.namespace) == ("KineticJob", "job1", "team-a")
    assert one.body["spec"] == {
        "accelerator": "gpu-l4x2",
        "container": {"command": ["sh", "-c", "python train.py"], "image": "busybox:1"},
    }
    assert (two.namespace, two.body["spec"]) == (
        "default",
        {"accelerator": "cpu", "container": {"command": ["python", "eval.py"]}},
    )


def test_a_job_without_a_command_runs_its_images_entrypoint() -> None:
    """The guide's command is optional: the KineticJob's container has no command, so the
    Pod's container has none either and the image's entrypoint runs."""
    job = {"name": "plain", "image": "pytorch/pytorch:latest"}
    [doc] = read_file(request(job), "ns").entries
    assert isinstance(doc, Document)
    assert doc.body["spec"] == {
        "accelerator": "cpu",
        "container": {"image": "pytorch/pytorch:latest"},
    }


def test_a_request_in_yaml_reads_the_same() -> None:
    text = yaml.safe_dump({"jobs": [train("a")], "continue_on_error": True})
    contents = read_file(text, "ns")
    assert contents.settings.continue_on_error is True
    assert [e.label for e in contents.entries] == ["KineticJob/a in ns"]


def test_json_that_yaml_cannot_read_is_read_as_json() -> None:
    text = '{\n\t"jobs": [{"name": "a", "command": "true"}],\n\t"confirmed": true\n}'
    assert read_file(text, "ns").settings.confirmed is True


@pytest.mark.parametrize(
    "job,says",
    [
        (
            train("d", type="distributed"),
            "jobs[0] (d): workers is required for a distributed job",
        ),
        (train("w", type="workspace"), "type 'workspace' cannot be submitted"),
        (train("n", type="notebook"), "type 'notebook' is not a job type"),
        (
            train("x", workers=4),
            "jobs[0] (x): workers: not a key of a training job (known keys: type, name, "
            "project, image, command, gpus, gpu_type)",
        ),
        ({"command": "true"}, "jobs[0]: name is required"),
        (
            train("c", command=""),
            "jobs[0] (c): command: '' is not a command: give a string (run under sh -c, e.g. "
            "python train.py) or a list such as [python, train.py], or leave command out to "
            "run the image's entrypoint",
        ),
        (train("c", command=[]), "jobs[0] (c): command: [] is not a command"),
        ("a string", "jobs[0]: expected a mapping, got str"),
        (train("g", gpus=3, gpu_type="t4"), "jobs[0] (g): gpus: 3 t4 GPUs per job"),
        # The same checks as any document, named as the request names the job.
        (train("Bad", image=7), "jobs[0] (Bad): spec.container.image: Input should be"),
    ],
)
def test_a_job_that_cannot_be_submitted_is_refused_alone(job: Any, says: str) -> None:
    contents = read_file(request(job, train("fine")), "ns")
    bad, fine = contents.entries
    assert isinstance(bad, Refusal) and says in f"{bad.label}: {bad.reason}", bad
    assert isinstance(fine, Document) and fine.name == "fine"


@pytest.mark.parametrize(
    "text,says",
    [
        (request(train("a"), retry=True), "retry: not a key of a submission request"),
        (request(train("a"), continue_on_error="yes"), "continue_on_error must be true or false"),
        (request(), "jobs must be a non-empty list"),
        (json.dumps({"jobs": "a"}), "jobs must be a non-empty list"),
        (
            request(train("a")) + "\n---\n" + job_doc("b"),
            "must be the file's only document",
        ),
    ],
)
def test_a_request_that_is_not_one_is_refused_whole(text: str, says: str) -> None:
    with pytest.raises(DocumentError, match=says):
        read_file(text, "ns")


def test_a_project_other_than_the_namespace_given_is_refused() -> None:
    contents = read_file(request(train("a", project="team-b"), train("b")), "team-a", forced=True)
    assert isinstance(contents.entries[0], Refusal)
    assert "metadata.namespace 'team-b' does not match --namespace 'team-a'" in (
        contents.entries[0].reason
    )
    assert isinstance(contents.entries[1], Document)


# ----------------------------------------------------------------------- refusals, in order


def test_every_document_is_checked_and_refusals_keep_their_place() -> None:
    text = "---\n".join(
        [job_doc("a"), job_doc("b", retries=-1), "kind: ConfigMap\n", job_doc("c"), job_doc("a")]
    )
    entries = read_file(text, "ns").entries
    assert [type(e).__name__ for e in entries] == [
        "Document",
        "Refusal",
        "Refusal",
        "Document",
        "Refusal",
    ]
    assert [e.label for e in entries] == [
        "KineticJob/a in ns",
        "document 2 (KineticJob/b)",
        "document 3",
        "KineticJob/c in ns",
        "KineticJob/a in ns",
    ]
    assert isinstance(entries[4], Refusal)
    assert "holds KineticJob/a more than once" in entries[4].reason
    # The all-or-nothing reader still stops at the first.
    with pytest.raises(DocumentError, match=r"^document 2 \(KineticJob/b\): spec.retries"):
        load_documents(text, "ns")


def doc(name: str) -> Document:
    return Document(1, "KineticJob", name, "ns", {})


A, B, C = doc("a"), doc("b"), doc("c")
NO = Refusal("document 2 (KineticJob/x)", "spec.retries: too low")


@pytest.mark.parametrize(
    "entries,stop,expected",
    [
        ([A, B, C], False, [A, B, C]),
        ([A, NO, B, C], False, [A, B, C]),
        ([A, NO, B, C], True, [A]),
        ([NO, A], True, []),
    ],
)
def test_what_creation_will_try(entries: list[Any], stop: bool, expected: list[Document]) -> None:
    assert to_create(entries, stop_on_error=stop) == expected


def refusing(*names: str, unreachable: str = "") -> Any:
    """A create that the API server answers with a refusal for ``names``."""
    created: list[str] = []

    def create(d: Document) -> None:
        if d.name == unreachable:
            raise ConnectionError("connection refused")
        if d.name in names:
            refusal = ApiException(status=403, reason="Forbidden")
            refusal.body = json.dumps({"message": f"{d.name} is forbidden: exceeded quota"})
            raise refusal
        created.append(d.name)

    create.created = created  # type: ignore[attr-defined]
    return create


CREATED = "created"


@pytest.mark.parametrize(
    "case,entries,refused,unreachable,stop,expected",
    [
        (
            "all created",
            [A, B],
            (),
            "",
            False,
            [("KineticJob/a in ns", CREATED, ""), ("KineticJob/b in ns", CREATED, "")],
        ),
        (
            "continue past a refusal at creation",
            [A, B, C],
            ("b",),
            "",
            False,
            [
                ("KineticJob/a in ns", CREATED, ""),
                ("KineticJob/b in ns", "failed", "b is forbidden: exceeded quota"),
                ("KineticJob/c in ns", CREATED, ""),
            ],
        ),
        (
            "stop at a refusal at creation; what came before stays",
            [A, B, C],
            ("b",),
            "",
            True,
            [
                ("KineticJob/a in ns", CREATED, ""),
                ("KineticJob/b in ns", "failed", "b is forbidden: exceeded quota"),
                (
                    "KineticJob/c in ns",
                    "not attempted",
                    "stopped at the failure of KineticJob/b in ns",
                ),
            ],
        ),
        (
            "a refusal by the checks is a failure in its place",
            [A, NO, C],
            (),
            "",
            False,
            [
                ("KineticJob/a in ns", CREATED, ""),
                ("document 2 (KineticJob/x)", "failed", "spec.retries: too low"),
                ("KineticJob/c in ns", CREATED, ""),
            ],
        ),
        (
            "stop at a refusal by the checks",
            [A, NO, C],
            (),
            "",
            True,
            [
                ("KineticJob/a in ns", CREATED, ""),
                ("document 2 (KineticJob/x)", "failed", "spec.retries: too low"),
                (
                    "KineticJob/c in ns",
                    "not attempted",
                    "stopped at the failure of document 2 (KineticJob/x)",
                ),
            ],
        ),
        (
            "no answer at all stops even when continuing",
            [A, B, C],
            (),
            "b",
            False,
            [
                ("KineticJob/a in ns", CREATED, ""),
                (
                    "KineticJob/b in ns",
                    "failed",
                    "the API server could not be reached: connection refused",
                ),
                (
                    "KineticJob/c in ns",
                    "not attempted",
                    "stopped at the failure of KineticJob/b in ns",
                ),
            ],
        ),
    ],
)
def test_creation_in_file_order(
    case: str,
    entries: list[Any],
    refused: tuple[str, ...],
    unreachable: str,
    stop: bool,
    expected: list[tuple[str, str, str]],
) -> None:
    create = refusing(*refused, unreachable=unreachable)
    outcomes = create_all(entries, create, stop_on_error=stop)
    assert [(o.label, o.result, o.detail) for o in outcomes] == expected
    made = [o.doc.name for o in outcomes if o.doc is not None]
    assert create.created == made  # each created object is reported as such, and only those


def test_the_summary_counts_and_lists_every_object_with_its_reason() -> None:
    outcomes = [
        Outcome("KineticJob/a in ns", "created", doc=A),
        Outcome("KineticJob/b in ns", "failed", "denied: namespace 'ns' may not run Kinetic jobs"),
        Outcome("KineticJob/c in ns", "not attempted", "stopped at the failure of KineticJob/b"),
    ]
    assert summary_lines(outcomes) == [
        "Submitted 3 objects: 1 created, 1 failed, 1 not attempted",
        "  created        KineticJob/a in ns",
        "  failed         KineticJob/b in ns: denied: namespace 'ns' may not run Kinetic jobs",
        "  not attempted  KineticJob/c in ns: stopped at the failure of KineticJob/b",
    ]
    assert summary_lines(outcomes[:1])[0] == "Submitted 1 object: 1 created"


# ----------------------------------------------------------------------- the policy's keys


UNSET = SubmissionPolicy()  # no policy, or none of its keys: a preview first
OFF = SubmissionPolicy(dry_run_default=False)  # the administrator turned the preview off
PERSON = SubmissionPolicy(dry_run_default=False, require_confirmation=True)
BOTH = SubmissionPolicy(require_confirmation=True)
FILE_YES = RequestSettings(confirmed=True)
FILE_SUBMIT = RequestSettings(dry_run=False)
FILE_PREVIEW = RequestSettings(dry_run=True)
GUIDE = RequestSettings(dry_run=False, confirmed=True)  # as the guide's three examples say
PLAIN = RequestSettings()


def dec(dry: bool, by_policy: bool, ask: bool, person: bool = False, ignored: bool = False):
    return Decision(dry, by_policy, ask, person, ignored)


@pytest.mark.parametrize(
    "dry_run,yes,settings,policy,expected",
    [
        # dryRunDefault false: a yes submits without asking; otherwise a person is asked.
        (None, False, PLAIN, OFF, dec(False, False, True)),
        (None, True, PLAIN, OFF, dec(False, False, False)),
        (True, True, PLAIN, OFF, dec(True, False, False)),
        (None, False, FILE_YES, OFF, dec(False, False, False)),  # the file's confirmed: true
        (None, True, FILE_PREVIEW, OFF, dec(True, False, False)),  # the file's dry_run: true
        (False, False, FILE_PREVIEW, OFF, dec(False, False, True)),  # the flag wins
        # dryRunDefault (true unless set false): a preview, unless told to submit.
        (None, False, PLAIN, UNSET, dec(True, True, True)),
        (None, True, PLAIN, UNSET, dec(False, False, False)),  # --yes
        (False, False, PLAIN, UNSET, dec(False, False, True)),  # --no-dry-run: then asked
        (None, False, FILE_SUBMIT, UNSET, dec(False, False, True)),  # the file's dry_run wins
        (None, False, FILE_YES, UNSET, dec(True, True, False)),  # confirmed alone: a preview
        (None, False, GUIDE, UNSET, dec(False, False, False)),  # the guide's examples: submit
        (True, True, PLAIN, UNSET, dec(True, False, False)),  # --dry-run is no policy's doing
        # requireConfirmation: a person is always asked; a yes does not count.
        (None, False, PLAIN, PERSON, dec(False, False, True, True)),
        (None, True, PLAIN, PERSON, dec(False, False, True, True, True)),
        (None, False, FILE_YES, PERSON, dec(False, False, True, True, True)),
        (None, True, PLAIN, BOTH, dec(False, False, True, True, True)),
        (None, False, PLAIN, BOTH, dec(True, True, True, True)),
        (None, False, GUIDE, BOTH, dec(False, False, True, True, True)),
    ],
)
def test_dry_run_and_confirmation_follow_flags_then_the_file_then_the_policy(
    dry_run: bool | None,
    yes: bool,
    settings: RequestSettings,
    policy: SubmissionPolicy,
    expected: Decision,
) -> None:
    assert decide(dry_run, yes, settings, policy) == expected


@pytest.mark.parametrize(
    "data,expected,note",
    [
        (None, UNSET, None),
        ({}, UNSET, None),
        ({"maxBatchSize": "10", "allowedNamespaces": "*"}, UNSET, None),  # the webhook's keys
        ({"dryRunDefault": "true"}, UNSET, None),
        ({"dryRunDefault": "false"}, OFF, None),
        ({"dryRunDefault": "false", "requireConfirmation": "true"}, PERSON, None),
        ({"dryRunDefault": "", "requireConfirmation": ""}, UNSET, None),
        ({"dryRunDefault": "yes", "requireConfirmation": "on"}, BOTH, None),
        (
            {"requireConfirmation": "enabled"},
            BOTH,
            "requireConfirmation 'enabled' is not true or false; following it as true",
        ),
        ({"dryRunDefault": "[unclosed"}, UNSET, "dryRunDefault '[unclosed' is not true"),
        (
            {"defaultGpuType": "L4", "maxJobsPerRequest": "20"},
            SubmissionPolicy(default_gpu_type="l4", max_jobs_per_request=20),
            None,
        ),
        ({"defaultGpuType": "gpu-a100"}, SubmissionPolicy(default_gpu_type="a100"), None),
        (
            {"maxJobsPerRequest": "0"},
            UNSET,
            "maxJobsPerRequest '0' is not a whole number of 1 or more; following no limit",
        ),
        (
            {"maxJobsPerRequest": "twenty"},
            UNSET,
            "maxJobsPerRequest 'twenty' is not a whole number of 1 or more; following no limit",
        ),
        (
            {"defaultGpuType": "two gpus"},
            UNSET,
            "defaultGpuType 'two gpus' is not a GPU type (such as l4 or a100); following no "
            "default type",
        ),
    ],
)
def test_the_client_reads_its_keys_and_a_bad_flag_as_true(
    data: dict[str, str] | None, expected: SubmissionPolicy, note: str | None
) -> None:
    policy, notes = submission_policy(data)
    assert policy == expected
    assert (notes == []) if note is None else (len(notes) == 1 and note in notes[0])


@pytest.mark.parametrize(
    "objects,limit,says",
    [
        (20, None, None),
        (20, 20, None),
        (
            21,
            20,
            "the file holds 21 jobs, more than maxJobsPerRequest 20 (kinetic-policy in "
            "kinetic-system): nothing was submitted. Split it into files of at most 20 jobs, or "
            "ask the administrator to raise maxJobsPerRequest",
        ),
    ],
)
def test_max_jobs_per_request_refuses_a_larger_request_whole(
    objects: int, limit: int | None, says: str | None
) -> None:
    source = "kinetic-policy in kinetic-system"
    assert request_size_problem(objects, limit, source) == says


@pytest.mark.parametrize(
    "text,images,note",
    [
        ("- ghcr.io/acme/\n- busybox", ("ghcr.io/acme/", "busybox"), None),
        ("ghcr.io/acme, registry.corp.io", ("ghcr.io/acme", "registry.corp.io"), None),
        ("*", ("*",), None),
        ("[]", (), None),
        ("", (), None),
        ("ghcr.io/acme/*", (), '"*" alone allows every image'),  # the operator refuses it too
        ("{a: 1}", (), "is not a list of images"),
    ],
)
def test_the_client_reads_allowed_images_as_the_operator_does(
    text: str, images: tuple[str, ...], note: str | None
) -> None:
    policy, notes = submission_policy({"allowedImages": text})
    assert policy.allowed_images == images
    assert (notes == []) if note is None else (len(notes) == 1 and note in notes[0])
