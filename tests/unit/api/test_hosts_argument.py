"""``hosts=`` on `kinetic.run`, `run_async_map` and `kinetic.container`: refused before any
upload when the operator would refuse it, carried into the spec when given, absent when not."""

from __future__ import annotations

from typing import Any

import kinetic
import pytest
from kinetic.api import batches
from kinetic.api.mixed import container
from kinetic.model import resources as r
from kinetic.model.limits import MAX_HOSTS

FUNCTION = r.FunctionSpec(payload_uri="gs://b/p/payload.pkl", sha256="ab" * 32, name="train")


def train() -> int:
    return 0


def spec_of(**options: Any) -> dict[str, Any]:
    """The job spec `run_async` would send for a function decorated with ``options``."""
    return kinetic.run(**options)(train).job_spec(FUNCTION).wire()


# --------------------------------------------------------------------------- the spec


def test_hosts_given_is_in_the_job_spec() -> None:
    assert spec_of(accelerator="gpu-l4", hosts=3)["hosts"] == 3


def test_hosts_left_out_is_not_in_the_job_spec() -> None:
    """The operator then runs the accelerator's own count (1 here, 4 for tpu-v5e-16)."""
    assert "hosts" not in spec_of(accelerator="gpu-l4")
    assert "hosts" not in spec_of(accelerator="tpu-v5e-16")


def test_a_multi_host_slice_may_say_its_own_count() -> None:
    spec = spec_of(accelerator="v5litepod-16", hosts=4)
    assert (spec["accelerator"], spec["hosts"]) == ("tpu-v5e-16", 4)


def test_with_options_changes_hosts_and_checks_it_again() -> None:
    fn = kinetic.run(accelerator="tpu-v5e-16")(train)
    assert fn.with_options(hosts=4).job_spec(FUNCTION).hosts == 4
    with pytest.raises(ValueError, match="hosts is 2"):
        fn.with_options(hosts=2)


def test_a_map_sets_the_templates_hosts() -> None:
    fn = kinetic.run(accelerator="gpu-l4")(train)
    assert batches.batch_template(fn, FUNCTION, None, 2).wire()["hosts"] == 2


def test_a_map_without_hosts_keeps_the_functions_own() -> None:
    assert batches.batch_template(kinetic.run(hosts=2)(train), FUNCTION, None, None).hosts == 2
    assert "hosts" not in batches.batch_template(kinetic.run()(train), FUNCTION, None, None).wire()


def test_a_container_entry_carries_hosts() -> None:
    assert container(["python", "train.py"], hosts=2).job_spec().wire()["hosts"] == 2
    assert "hosts" not in container(["python", "train.py"]).job_spec().wire()


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "accelerator,hosts,says",
    [
        ("cpu", 0, "hosts is 0; a job runs on at least 1 host: set it to 1 or more"),
        ("cpu", -2, "hosts is -2"),
        ("cpu", MAX_HOSTS + 1, f"the limit is {MAX_HOSTS} hosts per job: ask for fewer"),
        ("cpu", "4", "hosts must be a whole number of hosts"),
        ("cpu", True, "hosts must be a whole number of hosts"),
        (
            "tpu-v5e-16",
            2,
            "hosts is 2, but spec.accelerator 'tpu-v5e-16' is a slice of 4 hosts, one Pod "
            "each: set hosts to 4, or leave it out",
        ),
        ("v5litepod-16", 8, "set hosts to 4"),  # the reference's spelling, checked as the catalog's
    ],
)
def test_a_bad_hosts_is_refused_when_decorating(accelerator: str, hosts: Any, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        kinetic.run(accelerator=accelerator, hosts=hosts)
    assert says in str(refused.value)


def test_a_map_refuses_a_bad_hosts_before_asking_the_cluster_anything() -> None:
    """The check comes first: no configuration is resolved, nothing is uploaded."""
    fn = kinetic.run(accelerator="tpu-v5e-16")(train)
    with pytest.raises(ValueError, match="hosts is 3, but .* set hosts to 4"):
        fn.run_async_map([1, 2], hosts=3)


@pytest.mark.parametrize("where", ["map", "decorator"])
def test_a_map_refuses_chunks_of_gangs_before_asking_the_cluster_anything(where: str) -> None:
    fn = kinetic.run(hosts=2)(train) if where == "decorator" else kinetic.run()(train)
    extra = {"hosts": 2} if where == "map" else {}
    with pytest.raises(ValueError, match="chunk_size=4 with hosts=2: .* use chunk_size=1"):
        fn.run_async_map([1, 2], chunk_size=4, **extra)


def test_a_container_entry_refuses_a_bad_hosts() -> None:
    with pytest.raises(ValueError, match="hosts is 0"):
        container(["true"], hosts=0)
