"""The operator's Prometheus metrics: what each recording call adds, read back from the registry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kinetic_operator import metrics
from kinetic_operator.handlers.batch_round import count_ends
from kinetic_operator.handlers.jobs import _count_end
from prometheus_client import REGISTRY, generate_latest


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def before() -> Iterator[dict[str, float]]:
    names = ["launched", "retried", "disrupted", "succeeded", "failed"]
    yield {
        f"{n}/{k}": value(f"kinetic_inputs_{n}_total", kind=k)
        for n in names
        for k in (metrics.KIND_JOB, metrics.KIND_BATCH)
    }


def delta(before: dict[str, float], what: str, kind: str) -> float:
    return value(f"kinetic_inputs_{what}_total", kind=kind) - before[f"{what}/{kind}"]


def test_created_pods_count_by_why_their_attempt_started(before: dict[str, float]) -> None:
    metrics.attempt_created(metrics.KIND_BATCH, "first", inputs=10)  # a chunk of 10
    metrics.attempt_created(metrics.KIND_BATCH, "retry")
    metrics.attempt_created(metrics.KIND_JOB, "disruption")
    metrics.attempt_created(metrics.KIND_JOB, None)  # re-created after a lost create
    assert delta(before, "launched", metrics.KIND_BATCH) == 10
    assert delta(before, "retried", metrics.KIND_BATCH) == 1
    assert delta(before, "disrupted", metrics.KIND_JOB) == 1
    assert delta(before, "launched", metrics.KIND_JOB) == 0


def test_a_batch_status_write_counts_only_the_inputs_it_newly_ends(
    before: dict[str, float],
) -> None:
    count_ends({"counts": {"succeeded": 3, "failed": 1}}, {"counts": {"succeeded": 7, "failed": 1}})
    count_ends({}, {"counts": {"failed": 2}})
    count_ends({"counts": {"succeeded": 7}}, {"counts": {"succeeded": 7}})  # a rewrite
    assert delta(before, "succeeded", metrics.KIND_BATCH) == 4
    assert delta(before, "failed", metrics.KIND_BATCH) == 2


@pytest.mark.parametrize(
    ("old", "new", "succeeded", "failed"),
    [
        ("RUNNING", "SUCCEEDED", 1, 0),
        ("PENDING", "FAILED", 0, 1),
        ("RUNNING", "RUNNING", 0, 0),
        ("SUCCEEDED", "SUCCEEDED", 0, 0),  # rewritten after the end: counted once
        ("RUNNING", "CANCELLED", 0, 0),
    ],
)
def test_a_job_counts_its_input_when_a_write_ends_it(
    before: dict[str, float], old: str, new: str, succeeded: int, failed: int
) -> None:
    _count_end(old, new)
    assert delta(before, "succeeded", metrics.KIND_JOB) == succeeded
    assert delta(before, "failed", metrics.KIND_JOB) == failed


def test_phases_are_read_from_what_the_operator_holds_at_each_scrape() -> None:
    held = [{"status": {"phase": "RUNNING"}}, {"status": {"phase": "RUNNING"}}, {}]
    metrics.phases_collector({metrics.KIND_BATCH: lambda: [metrics.phase_of(b) for b in held]})
    assert value("kinetic_objects", kind=metrics.KIND_BATCH, phase="RUNNING") == 2
    assert value("kinetic_objects", kind=metrics.KIND_BATCH, phase="PENDING") == 1
    held.pop(0)
    assert value("kinetic_objects", kind=metrics.KIND_BATCH, phase="RUNNING") == 1


def test_api_errors_are_counted_by_code_and_queue_depth_is_read_live() -> None:
    was = value("kinetic_api_errors_total", code="409")
    metrics.api_error(409)
    metrics.api_error(None)
    assert value("kinetic_api_errors_total", code="409") == was + 1
    assert value("kinetic_api_errors_total", code="none") >= 1
    depth = [3]
    metrics.watch_queue(lambda: depth[0])
    assert value("kinetic_work_queue_depth") == 3
    depth[0] = 0
    assert value("kinetic_work_queue_depth") == 0


def test_reconcile_time_is_observed_even_when_the_reconcile_raises() -> None:
    count = value("kinetic_reconcile_duration_seconds_count", kind=metrics.KIND_JOB)
    with pytest.raises(RuntimeError), metrics.reconcile_timer(metrics.KIND_JOB):
        raise RuntimeError("conflict")
    assert value("kinetic_reconcile_duration_seconds_count", kind=metrics.KIND_JOB) == count + 1
    assert b"kinetic_reconcile_duration_seconds_bucket" in generate_latest(REGISTRY)


def test_a_busy_metrics_port_is_served_once_it_frees() -> None:
    """An operator starting while an old process still holds the port serves metrics later."""
    import asyncio
    import logging
    import socket
    import urllib.request

    from kinetic_operator.handlers.setup import _serve_metrics_when_free

    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))  # noqa: S104 - the same wildcard address the operator binds
    holder.listen()
    port = holder.getsockname()[1]

    async def scenario() -> None:
        serving = asyncio.create_task(
            _serve_metrics_when_free(port, logging.getLogger("test"))  # type: ignore[arg-type]
        )
        await asyncio.sleep(0.2)
        assert not serving.done()  # still waiting for the port
        holder.close()
        await asyncio.wait_for(serving, timeout=30)

    asyncio.run(scenario())
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert b"kinetic_inputs_launched_total" in answer.read()
