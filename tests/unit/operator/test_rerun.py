"""Reruns: selecting inputs, mapping positions to original indexes, resolving fromBatch."""

from __future__ import annotations

import pytest
from kinetic.api.batch_rerun import SourceView, rerun_body, source_state
from kinetic.api.inputs import input_total
from kinetic.model import layout
from kinetic.model.fanout import child_spec, input_count, validate_batch_spec
from kinetic.model.manifest import ManifestHeader
from kinetic.model.ranges import IndexSet
from kinetic.model.rerun import (
    SelectionError,
    from_batch_problems,
    index_map,
    original_index,
    originals,
    select,
)
from kinetic.model.resources import KineticBatchSpec
from kinetic_operator.logic.batch_pods import build_unit_pod
from kinetic_operator.rerun_source import Source, SourceProblem, rerun_spec
from kinetic_operator.settings import OperatorSettings

ROOT = "file:///tmp/kinetic-root"
CONTAINER = {"container": {"image": "busybox", "command": ["sh", "-c", "echo $KINETIC_INDEX"]}}


# ----------------------------------------------------------------------- selection


@pytest.mark.parametrize(
    ("selector", "total", "failed", "submission", "expected"),
    [
        ("failed", 10, "1,3,5-7", [], "1,3,5-7"),
        ("failed", 10, "1,3,5-7", [3, 6], "1,5,7"),  # never packaged: would fail again
        ("all", 4, "", [], "0-3"),
        ("all", 4, "2", [2], "0-3"),  # all is all
        ("2,4-5", 6, "", [], "2,4-5"),
        ("0", 1, "", [], "0"),
    ],
)
def test_select(selector, total, failed, submission, expected) -> None:
    got = select(selector, total=total, failed=failed, submission_failures=submission)
    assert str(got) == expected


@pytest.mark.parametrize(
    ("selector", "total", "failed", "message"),
    [
        ("failed", 5, "", "has no failed inputs to rerun"),
        ("all", 0, "", "has no inputs to rerun"),
        ("3-6", 6, "", "index 6 is out of range: the source batch has 6 inputs (0-5)"),
        ("x", 6, "", "'x' is not failed, all or index ranges"),
    ],
)
def test_select_refuses(selector, total, failed, message) -> None:
    with pytest.raises(SelectionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        select(selector, total=total, failed=failed)


# ----------------------------------------------------------------------- the index map


@pytest.mark.parametrize(
    ("indexes", "positions", "originals_"),
    [
        (None, [0, 5, 9], [0, 5, 9]),  # no map: a position is its own original
        ("3", [0], [3]),
        ("1,3,5", [0, 1, 2], [1, 3, 5]),
        ("0-2,10-11,20", [0, 2, 3, 4, 5], [0, 2, 10, 11, 20]),
        ("100000-199999", [0, 99999], [100000, 199999]),
    ],
)
def test_original_index(indexes, positions, originals_) -> None:
    assert [original_index(indexes, p) for p in positions] == originals_


def test_index_map_bounds() -> None:
    mapping = index_map("1,3,5")
    assert len(mapping) == 3
    with pytest.raises(IndexError):
        mapping.original(3)


def test_originals_compose_through_a_rerun_of_a_rerun() -> None:
    # The first rerun ran originals 1,3,5,7 at positions 0-3; its positions 1 and 3 failed.
    assert str(originals("1,3,5,7", IndexSet([1, 3]))) == "3,7"
    assert str(originals(None, IndexSet([1, 3]))) == "1,3"


# ----------------------------------------------------------------------- specs


def items_spec(**extra) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {"template": CONTAINER, "inputs": {"items": ["a", "b", "c", "d", "e"]}, **extra}
    )


def rerun_of(indexes: str = "failed", **extra) -> KineticBatchSpec:
    return KineticBatchSpec.model_validate(
        {"inputs": {"fromBatch": {"name": "grp-src", "indexes": indexes}}, **extra}
    )


def header(phase: str = "FAILED", failed: str = "1,3") -> ManifestHeader:
    return ManifestHeader(group_id="grp-src", total=5, phase=phase, failed_indexes=failed)


def test_rerun_spec_takes_the_source_template_inputs_and_failed_indexes() -> None:
    spec = rerun_spec(rerun_of(retries=2), Source("u-src", items_spec(), header()))
    assert spec.template == items_spec().template
    assert spec.inputs.items == ["a", "b", "c", "d", "e"]
    assert spec.inputs.indexes == "1,3"
    assert spec.inputs.from_batch is not None and spec.inputs.from_batch.uid == "u-src"
    assert spec.retries == 2  # the rerun's own settings stay
    assert input_count(spec.inputs) == 2
    assert (
        validate_batch_spec(
            spec.model_copy(update={"inputs": spec.inputs.model_copy(update={"from_batch": None})})
        )
        == []
    )


def test_rerun_spec_keeps_its_own_template_when_given() -> None:
    own = {"container": {"image": "fixed:2", "command": ["true"]}}
    spec = rerun_spec(rerun_of(template=own), Source("u", items_spec(), header()))
    assert spec.template is not None and spec.template.container is not None
    assert spec.template.container.image == "fixed:2"


@pytest.mark.parametrize(
    ("wanted", "src_header", "message"),
    [
        (
            "failed",
            header(phase="RUNNING"),
            "spec.inputs.fromBatch.indexes: batch grp-src is still RUNNING",
        ),
        ("failed", None, "spec.inputs.fromBatch.indexes: batch grp-src has no manifest yet"),
        ("failed", header(phase="SUCCEEDED", failed=""), "has no failed inputs to rerun"),
        ("7", header(), "spec.inputs.fromBatch.indexes: index 7 is out of range"),
    ],
)
def test_rerun_spec_refuses(wanted, src_header, message) -> None:
    with pytest.raises(SourceProblem, match=message):
        rerun_spec(rerun_of(wanted), Source("u", items_spec(), src_header))


def test_rerun_of_a_rerun_maps_to_the_first_batch() -> None:
    first = rerun_spec(rerun_of("all"), Source("u1", items_spec(), header()))
    first = rerun_spec(rerun_of("1,3"), Source("u1", items_spec(), header()))  # runs 1 and 3
    second = rerun_spec(rerun_of("1"), Source("u2", first, header(failed="1")))
    assert second.inputs.indexes == "3"  # position 1 of the first rerun is original 3


def test_child_of_a_rerun_runs_its_original_input_and_index() -> None:
    spec = rerun_spec(rerun_of(), Source("u", items_spec(), header()))
    home = layout.batch_home(ROOT, "ns", "grp-new", "u-new")
    child = child_spec(home, spec, 1)  # position 1 is original 3
    env = {e.name: e.value for e in child.env}
    assert env["KINETIC_INDEX"] == "3"
    assert env["KINETIC_INPUT"] == "d"
    assert child.output_dir is not None and child.output_dir.endswith("/3")


def test_function_pod_of_a_rerun_reads_the_original_pickled_input() -> None:
    fn = {
        "payloadURI": f"{ROOT}/namespaces/ns/uploads/grp-src-00aa00aa/function.pkl",
        "sha256": "b" * 64,
    }
    source = KineticBatchSpec.model_validate(
        {
            "template": {"function": fn},
            "inputs": {
                "count": 5,
                "uriPrefix": f"{ROOT}/namespaces/ns/uploads/grp-src-00aa00aa/inputs",
            },
        }
    )
    spec = rerun_spec(rerun_of(), Source("u", source, header()))
    hashes = [f"{i}" * 64 for i in range(5)]
    settings = OperatorSettings(storage_root=ROOT)
    pod = build_unit_pod("grp-new", "ns", "u-new", spec, settings, 1, 1, hashes)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["KINETIC_INDEX"] == "3"
    assert env["KINETIC_INPUT_URI"].endswith("/inputs/3.pkl")
    assert env["KINETIC_INPUT_SHA256"] == "3" * 64
    assert env["KINETIC_RESULT_URI"].endswith("/grp-new/u-new/results/1.pkl")  # its own home


def test_only_a_rerun_may_leave_the_template_out() -> None:
    """Without fromBatch there is no source to take a template from: the spec is refused."""
    with pytest.raises(ValueError, match="spec.template is required"):
        KineticBatchSpec.model_validate({"inputs": {"items": [1]}})
    assert KineticBatchSpec.model_validate({"inputs": {"fromBatch": {"name": "grp-a"}}})


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (rerun_of(), None),
        (
            KineticBatchSpec.model_validate(
                {"inputs": {"fromBatch": {"name": "grp-src"}, "items": [1]}}
            ),
            "spec.inputs.items cannot be set with spec.inputs.fromBatch, which takes the "
            "source batch's inputs",
        ),
        (
            items_spec(inputs={"items": [1, 2], "indexes": "1-2"}),
            "spec.inputs.indexes names input 2, but the inputs above have only 2",
        ),
    ],
)
def test_validate_from_batch(spec, problem) -> None:
    found = validate_batch_spec(spec)
    assert (found == []) if problem is None else any(problem in p for p in found), found


@pytest.mark.parametrize(
    ("inputs", "total"),
    [
        ({"fromBatch": {"name": "grp-a"}}, 0),  # failed: not known until resolved
        ({"fromBatch": {"name": "grp-a", "indexes": "1,3-4"}}, 3),
        ({"items": [1, 2, 3], "indexes": "0,2"}, 2),
        ({"items": [1, 2, 3]}, 3),
    ],
)
def test_input_total_of_raw_specs(inputs, total) -> None:
    assert input_total(inputs) == total


# ----------------------------------------------------------------------- the client's body


def view(phase: str = "FAILED", failed: str = "1,3", **spec) -> SourceView:
    base = {"template": CONTAINER, "inputs": {"items": [0, 1, 2, 3]}, "retries": 1} | spec
    return SourceView("grp-src", "u-src", base, phase, 4, failed)


def test_rerun_body_failed() -> None:
    body, chosen = rerun_body(view(), failed=True, namespace="ns", new_name="grp-new")
    assert str(chosen) == "1,3"
    assert body["metadata"]["name"] == "grp-new"
    assert body["spec"]["inputs"] == {
        "fromBatch": {"name": "grp-src", "uid": "u-src", "indexes": "1,3"}
    }
    assert body["spec"]["retries"] == 1 and body["spec"]["template"] == CONTAINER
    KineticBatchSpec.model_validate(body["spec"])  # a valid spec as sent


def test_rerun_body_all_and_refusals() -> None:
    _, chosen = rerun_body(view(phase="RUNNING"), failed=False, namespace="ns", new_name="g")
    assert str(chosen) == "0-3"
    with pytest.raises(ValueError, match="is still RUNNING: rerun its failed inputs once"):
        rerun_body(view(phase="RUNNING"), failed=True, namespace="ns", new_name="g")
    with pytest.raises(ValueError, match="Nothing to rerun in batch grp-src"):
        rerun_body(view(phase="SUCCEEDED", failed=""), failed=True, namespace="ns", new_name="g")


@pytest.mark.parametrize(
    ("spec", "problems"),
    [
        ({"inputs": {"items": [1]}}, []),
        ({"inputs": {"fromBatch": {"name": "grp-a"}}}, []),
        (
            {"inputs": {"fromBatch": {"name": "grp-a"}, "count": 3, "uriPrefix": "gs://b/x"}},
            [
                "spec.inputs.count, spec.inputs.uriPrefix cannot be set with "
                "spec.inputs.fromBatch, which takes the source batch's inputs: remove them (or "
                "remove fromBatch)"
            ],
        ),
        (
            {
                "inputs": {"fromBatch": {"name": "grp-a"}},
                "submissionFailures": [{"index": 0, "message": "x"}],
            },
            ["spec.submissionFailures cannot be set with spec.inputs.fromBatch"],
        ),
        ("not a spec", []),
    ],
)
def test_from_batch_problems_at_admission(spec, problems) -> None:
    assert from_batch_problems(spec) == problems


LIVE_FAILED = {"phase": "FAILED", "total": 5, "failedIndexes": "1,3"}


@pytest.mark.parametrize(
    ("status", "head", "expected"),
    [
        # The manifest, written just after the status, still says RUNNING: the status rules.
        (LIVE_FAILED, header("RUNNING", ""), ("FAILED", 5, "1,3")),
        (LIVE_FAILED, header("PENDING", ""), ("FAILED", 5, "1,3")),
        # Both finished: the manifest's complete ranges (the status may cut them).
        ({**LIVE_FAILED, "failedIndexes": "1", "truncated": True}, header(), ("FAILED", 5, "1,3")),
        # Still running: the manifest, as recent as the status allows.
        ({"phase": "RUNNING", "total": 5}, header("RUNNING", "1"), ("RUNNING", 5, "1")),
        # Deleted: the manifest alone.
        (None, header(), ("FAILED", 5, "1,3")),
        # No manifest yet.
        (LIVE_FAILED, None, ("FAILED", 5, "1,3")),
        (None, None, ("PENDING", 0, "")),
    ],
)
def test_source_state_takes_whichever_record_is_newer(status, head, expected) -> None:
    assert source_state("grp-src", status, head) == expected


def test_a_cut_status_with_an_old_manifest_asks_to_try_again() -> None:
    cut = {**LIVE_FAILED, "truncated": True}
    with pytest.raises(ValueError, match="manifest is still being written"):
        source_state("grp-src", cut, header("RUNNING", ""))
