"""Pod names: deterministic, never clashing across kinds, objects, attempts, ranks and
units, and within a Pod's 63 characters whatever the owner is called."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kinetic.model import names

OWNER = st.text(string.ascii_lowercase + string.digits + "-.", min_size=1, max_size=63).filter(
    lambda n: n[0].isalnum() and n[-1].isalnum() and ".-" not in n and "-." not in n
)
NUMBER = st.integers(min_value=0, max_value=10**9)


def pod(kind: str, owner: str, index: int, attempt: int, rank: int | None) -> str:
    base = (
        names.job_pod_name(owner, attempt)
        if kind == "job"
        else names.input_pod_name(owner, index, attempt)
    )
    return base if rank is None else names.gang_pod_name(base, rank)


@pytest.mark.parametrize(
    ("made", "expected"),
    [
        (names.job_pod_name("train", 1), "train-a1"),
        (names.input_pod_name("grp-0a1b2c3d", 5, 2), "grp-0a1b2c3d-i5-2"),
        (names.gang_pod_name(names.job_pod_name("train", 3), 1), "train-a3-r1"),
        (names.alternative_pod_name("train-a1", "042917"), "train-a1-x042917"),
    ],
)
def test_names_read_as_what_they_run(made: str, expected: str) -> None:
    assert made == expected


def test_the_clashes_of_old_are_gone() -> None:
    """Job ``b-1`` beside batch ``b``; job ``x-1`` beside the gang of job ``x``."""
    assert names.job_pod_name("b-1", 1) != names.input_pod_name("b", 1, 1)
    assert names.job_pod_name("x-1", 2) != names.gang_pod_name(names.job_pod_name("x", 1), 2)
    assert names.input_pod_name("g-i1", 1, 1) != names.input_pod_name("g", 1, 1)


@given(
    st.tuples(st.sampled_from(["job", "batch"]), OWNER, NUMBER, NUMBER, st.none() | NUMBER),
    st.tuples(st.sampled_from(["job", "batch"]), OWNER, NUMBER, NUMBER, st.none() | NUMBER),
)
def test_different_pods_never_share_a_name(
    a: tuple[str, str, int, int, int | None], b: tuple[str, str, int, int, int | None]
) -> None:
    key_a = a if a[0] == "batch" else (a[0], a[1], 0, a[3], a[4])
    key_b = b if b[0] == "batch" else (b[0], b[1], 0, b[3], b[4])
    if key_a != key_b:
        assert pod(*key_a) != pod(*key_b)


@given(st.sampled_from(["job", "batch"]), OWNER, NUMBER, NUMBER, st.none() | NUMBER)
def test_every_name_fits_a_pod_and_is_a_dns_name(
    kind: str, owner: str, index: int, attempt: int, rank: int | None
) -> None:
    name = pod(kind, owner, index, attempt, rank)
    assert len(name) <= names.MAX_POD_NAME
    assert name[0].isalnum() and name[-1].isalnum() and ".-" not in name and "-." not in name
    alternative = names.alternative_pod_name(name, "123456")
    assert len(alternative) <= names.MAX_POD_NAME and alternative != name
