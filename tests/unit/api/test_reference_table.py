"""Every row of the README's "Coming from the reference API" tables has a test (issue 32, item 8).

`ROWS` maps each row (its first cell, as the README writes it) to the tests
that fail when that row's behaviour changes. A row added without a test, a
row renamed, or a test renamed or removed fails here; the tests themselves
say what the row says.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
UNIT, LIVE = "tests/unit", "tests/integration"

ROWS: dict[str, list[str]] = {
    "Positional order of every function and method": [
        f"{UNIT}/api/test_reference_signatures.py::test_every_reference_signature_keeps_the_reference_order",
        f"{LIVE}/test_reference_args_live.py::test_a_namespace_passed_in_the_old_order_warns_and_is_not_looked_in",
        f"{UNIT}/api/test_reference_signatures.py::test_run_in_the_old_order_warns_naming_each_moved_argument",
        f"{UNIT}/api/test_reference_args.py::test_a_deletion_timeout_that_is_not_seconds_is_refused_naming_the_order",
        f"{LIVE}/test_reference_signatures_live.py::test_every_reference_signature_positionally_and_by_keyword",
    ],
    "`@kinetic.run(accelerator=…)`": [
        f"{UNIT}/api/test_reference_signatures.py::test_the_default_accelerator_is_cpu_not_the_references_tpu",
        f"{LIVE}/test_reference_api.py::test_reference_accelerator_names_reach_the_spec_in_the_catalogs_spelling",
        f"{LIVE}/test_reference_api.py::test_an_accelerator_no_node_offers_is_refused_before_anything_is_uploaded",
        f"{LIVE}/test_reference_api.py::test_an_unknown_accelerator_is_refused_before_anything_is_uploaded",
    ],
    "`container_image=`": [
        f"{UNIT}/api/test_project.py::test_image_and_container_image_are_one_setting",
    ],
    "`base_image_repo=`, `project=`, `zone=`": [
        f"{UNIT}/api/test_reference_args.py::test_run_warns_once_naming_each_ignored_argument_and_its_equivalent",
        f"{LIVE}/test_reference_args_live.py::test_attach_warns_once_for_the_reference_arguments_it_ignores",
    ],
    "`cluster=` (on `run`, `attach`, `list_jobs`, `attach_batch`)": [
        f"{UNIT}/api/test_reference_args.py::test_cluster_selects_a_kubeconfig_context",
        f"{UNIT}/api/test_reference_args.py::test_an_unknown_cluster_is_an_error_listing_the_contexts",
        f"{LIVE}/test_reference_args_live.py::test_cluster_selects_the_context_for_run_attach_and_list",
    ],
    "`backend=`": [
        f"{UNIT}/api/test_reference_args.py::test_pathways_is_refused_naming_the_argument_and_what_to_use",
        f"{UNIT}/api/test_reference_args.py::test_an_unknown_backend_is_refused_too",
    ],
    "`KINETIC_CLUSTER`, `KINETIC_PROJECT`, `KINETIC_ZONE`, `KINETIC_BASE_IMAGE_REPO`, profiles": [
        f"{UNIT}/api/test_reference_env.py::test_kinetic_cluster_selects_the_context_as_cluster_does",
        f"{UNIT}/api/test_reference_env.py::test_the_variables_that_cannot_matter_warn_once_per_process",
        f"{UNIT}/api/test_reference_env.py::test_the_readme_lists_every_variable_the_client_reads",
        f"{LIVE}/test_reference_args_live.py::test_kinetic_cluster_selects_the_context_and_kinetic_project_warns",
    ],
    "`namespace=`, `capture_env_vars=`, `volumes=`, `spot=`, `output_dir=`": [
        f"{UNIT}/api/test_reference_env.py::test_kinetic_namespace_is_the_default_namespace",
        f"{LIVE}/test_reference_api.py::test_capture_env_vars_and_output_dir_for_a_single_job",
        f"{UNIT}/api/test_data.py::test_run_refuses_bad_volumes_when_decorating_before_any_upload",
        f"{UNIT}/model/test_catalog.py::test_spot_adds_selector_and_toleration",
    ],
    "`debug=True`": [
        f"{LIVE}/test_reference_signatures_live.py::test_a_blocking_debug_call_attaches_by_itself",
        f"{UNIT}/api/test_debug_helpers.py::test_the_forward_says_once_when_a_debugger_connects",
        f"{UNIT}/api/test_debug_helpers.py::test_a_port_in_use_is_replaced_by_a_free_one",
    ],
    "`fn(...)`, `fn.run_async(...)`, `fn.run_async_map(inputs)`": [
        f"{UNIT}/api/test_reference_signatures.py::test_every_reference_signature_keeps_the_reference_order",
        f"{LIVE}/test_batches.py::test_results_in_input_order_and_in_completion_order",
    ],
    "Submission errors of one input (`run_async_map`)": [
        f"{LIVE}/test_reference_api.py::test_every_kind_of_input_failure_keeps_its_own_slot_and_the_rest_run",
        f"{LIVE}/test_reference_api.py::test_a_problem_of_the_whole_call_raises_from_it_and_creates_nothing",
        f"{LIVE}/test_data_fuse.py::test_run_async_refuses_fuse_data_before_uploading_or_creating_anything",
        f"{LIVE}/test_reference_api.py::test_a_wrong_typed_item_fails_its_own_slot_with_its_own_exception",
    ],
    "`kinetic.Data(path, fuse=, hf_trust_remote_code=)`, `content_hash()`": [
        f"{UNIT}/api/test_data.py::test_content_hash_follows_the_documented_recipe",
        f"{UNIT}/api/test_data.py::test_local_data_is_uploaded_once_and_arrives_byte_identical",
    ],
    "`JobHandle(...)` built by hand": [
        f"{UNIT}/api/test_reference_signatures.py::test_the_reference_constructor_of_a_handle_is_refused_not_misread",
    ],
    "`JobHandle` fields `job_id`, `namespace`, `accelerator`, `func_name`, `created_at`, "
    "`group_id`, `group_kind`, `group_index`, `debug`": [
        f"{UNIT}/api/test_job_context.py::test_every_input_handle_of_a_batch_is_of_the_map_group",
        f"{UNIT}/api/test_job_handle.py::test_a_saved_input_handle_comes_back_as_one",
    ],
    "`JobHandle` fields `backend`, `project`, `zone`, `cluster_name`, `k8s_name`, "
    "`display_name`, `bucket_name`": [
        f"{UNIT}/api/test_debug_helpers.py::test_the_reference_handles_other_fields_say_what_they_are_here",
    ],
    "`JobHandle.image_uri`": [
        f"{UNIT}/api/test_reference_signatures.py::test_a_handle_keeps_no_image_uri",
    ],
    "`JobHandle.from_job_context()`": [
        f"{UNIT}/api/test_job_context.py::test_a_jobs_pod_gives_the_jobs_handle",
        f"{LIVE}/test_reference_args_live.py::test_code_in_the_pod_builds_its_own_handle_and_imports_job_status",
    ],
    "`from_dict`, `to_dict`, `status()`, `logs(follow=)`, `tail(n)`": [
        f"{LIVE}/test_client_jobs.py::test_logs_and_tail_go_through_the_api_server",
        f"{LIVE}/test_client_inputs.py::test_a_jobs_log_outlives_its_pod",
    ],
    "`result(timeout, cleanup, cleanup_timeout, cleanup_poll_interval, stream_logs, "
    "on_status_change)`": [
        f"{LIVE}/test_client_jobs.py::test_successful_result_cleans_up_by_default",
        f"{LIVE}/test_client_jobs.py::test_result_timeout_leaves_the_job_running",
        f"{LIVE}/test_reference_api.py::test_result_streams_every_attempts_log_while_waiting",
    ],
    "`cleanup_timeout=` (on `result`, `cancel`, `cleanup`)": [
        f"{UNIT}/api/test_reference_args.py::test_cleanup_timeout_bounds_the_wait_for_the_deletion",
        f"{LIVE}/test_reference_args_live.py::test_cleanup_timeout_bounds_real_deletions_and_the_poll_interval_warns",
    ],
    "`cleanup_poll_interval=`": [
        f"{UNIT}/api/test_reference_args.py::test_cleanup_poll_interval_warns_once_naming_the_watch",
    ],
    "`debug_attach(local_port=5678, working_dir=None)`": [
        f"{LIVE}/test_debug_attach.py::test_a_debug_job_waits_for_a_debugger_attached_through_the_forward",
    ],
    "`cancel()`": [
        f"{LIVE}/test_reference_signatures_live.py::test_a_reference_wait_loop_ends_after_cancel",
        f"{LIVE}/test_client_jobs.py::test_cancel_ends_cancelled_and_stops_the_process",
    ],
    "`cancel()` of an input of a batch, `BatchHandle.cancel()`": [
        f"{LIVE}/test_client_inputs.py::test_cancel_one_input_of_a_running_batch",
        f"{LIVE}/test_batches.py::test_cancel_stops_launching_and_cancels_running_inputs",
        f"{LIVE}/test_reference_args_live.py::test_cleanup_timeout_bounds_real_deletions_and_the_poll_interval_warns",
    ],
    "`JobStatus.CANCELLED`": [
        f"{UNIT}/model/test_job_status.py::test_it_has_the_reference_statuses_and_their_values",
        f"{LIVE}/test_reference_signatures_live.py::test_a_reference_wait_loop_ends_after_cancel",
    ],
    "`cleanup(k8s=, gcs=)`": [
        f"{LIVE}/test_client_jobs.py::test_cleanup_can_keep_artifacts_and_the_same_handle_still_reads_them",
        f"{LIVE}/test_client_inputs.py::test_input_handles_after_their_pods_are_gone",
    ],
    "`kinetic.attach(job_id)`": [
        f"{LIVE}/test_client_jobs.py::test_attach_and_list_from_a_separate_process",
        f"{LIVE}/test_client_inputs.py::test_attach_one_input_from_another_process",
    ],
    "`kinetic.list_jobs()`": [
        f"{LIVE}/test_list_jobs.py::test_batch_inputs_are_listed_among_the_jobs_newest_first_and_paged",
        f"{UNIT}/api/test_list_paging.py::test_a_page",
    ],
    "`BatchHandle` `group_id`, `name`, `tags`, `jobs`, `statuses()`, `status_counts()`, "
    "`wait()`, `results(timeout, ordered, cleanup, return_exceptions)`, `failures()`, "
    "`cancel()`, `cleanup(k8s, gcs)`": [
        f"{LIVE}/test_reference_signatures_live.py::test_every_reference_signature_positionally_and_by_keyword",
        f"{LIVE}/test_batches.py::test_return_exceptions_and_failures",
    ],
    "`results(cleanup=True)`": [
        f"{LIVE}/test_reference_signatures_live.py::test_every_reference_signature_positionally_and_by_keyword",
        f"{LIVE}/test_batches.py::test_results_cleanup_keeps_the_manifest_then_full_cleanup",
    ],
    "`as_completed(poll_interval=)`": [
        f"{LIVE}/test_reference_signatures_live.py::test_every_reference_signature_positionally_and_by_keyword",
    ],
    "`BatchError(group_id, failures, partial_results)`": [
        f"{UNIT}/api/test_submission.py::test_batch_error_counts_cancelled_inputs",
        f"{UNIT}/api/test_unread.py::test_no_failure_raises_the_reason_not_a_batch_error",
        f"{LIVE}/test_reference_api.py::test_batch_error_counts_the_cancelled_inputs",
    ],
    "`kinetic.attach_batch(group_id, project, cluster, poll_interval, poll_timeout)`": [
        f"{LIVE}/test_reference_args_live.py::test_attach_warns_once_for_the_reference_arguments_it_ignores",
    ],
    "`kinetic.job_status.JobStatus`, `kinetic.jobs`, `kinetic.debug`": [
        f"{UNIT}/api/test_reference_signatures.py::test_the_reference_module_paths_import_with_their_names",
        f"{UNIT}/model/test_job_status.py::test_importing_it_loads_neither_the_user_api_nor_the_kubernetes_client",
    ],
    "`kinetic init` troubleshooting": [
        f"{UNIT}/api/test_doctor.py::test_context",
    ],
    # The batch-submission guide's table.
    "`command` optional": [
        f"{UNIT}/cli/test_submit_decisions.py::test_a_job_without_a_command_runs_its_images_entrypoint",
        f"{UNIT}/model/test_container_entrypoint.py::test_a_container_without_a_command_runs_its_images_entrypoint",
        f"{LIVE}/test_submit_guide.py::test_the_guides_examples_submit_as_written",
    ],
    "`gpus` without a type": [
        f"{UNIT}/cli/test_submit_decisions.py::test_gpus_without_a_type_take_the_policys_default_type",
        f"{UNIT}/cli/test_submit_guide_examples.py::test_without_a_default_gpu_type_each_gpu_job_is_refused_with_both_fixes",
        f"{LIVE}/test_submit_guide.py::test_without_a_default_gpu_type_a_guide_job_is_refused_naming_both_fixes",
    ],
    "`dry_run` (default true), `confirmed`": [
        f"{UNIT}/cli/test_submit_decisions.py::test_dry_run_and_confirmation_follow_flags_then_the_file_then_the_policy",
        f"{LIVE}/test_submit_guide.py::test_without_dry_run_default_set_the_command_previews_first",
    ],
    "`max_batch_size` (jobs in one request)": [
        f"{UNIT}/cli/test_submit_decisions.py::test_max_jobs_per_request_refuses_a_larger_request_whole",
        f"{LIVE}/test_submit_guide.py::test_max_jobs_per_request_refuses_a_larger_request_whole",
    ],
    "`max_gpus_per_job`, `allowed_projects`": [
        f"{LIVE}/test_policy_live.py::test_an_edit_holds_within_seconds_and_refuses_on_create_and_dry_run",
        f"{LIVE}/test_submit_guide.py::test_allowed_namespaces_star_admits_a_namespace_not_listed",
    ],
    "`type: workspace`": [
        f"{UNIT}/cli/test_submit_guide_examples.py::test_example_2_mixed_types_refuses_only_the_workspace_naming_it",
    ],
    "`type: distributed`, `workers`": [
        f"{UNIT}/cli/test_guide_workers.py::test_workers_are_the_jobs_hosts_rank_0_included",
    ],
}


def readme_rows() -> list[str]:
    """The first cell of every row of the section's two tables (reference, guide)."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Coming from the reference API", 1)[1].split("\n## ", 1)[0]
    rows: list[str] = []
    in_table = False
    for line in section.splitlines():
        if line.startswith(("| Reference | Here |", "| Guide | Here |")):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            rows.append(line[2:].split(" | ", 1)[0])
    return rows


def test_every_row_of_the_readme_table_has_a_test() -> None:
    rows = readme_rows()
    assert len(rows) > 30
    missing = [row for row in rows if row not in ROWS]
    assert not missing, f"rows without a test in ROWS: {missing}"
    stale = [row for row in ROWS if row not in rows]
    assert not stale, f"ROWS names rows the README no longer has: {stale}"


@pytest.mark.parametrize("row", sorted(ROWS))
def test_each_named_test_exists(row: str) -> None:
    for node_id in ROWS[row]:
        path, name = node_id.split("::")
        tree = ast.parse((REPO / path).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in defined, f"{row}: {node_id} does not exist"
