"""`list_jobs`'s page: at most `limit` rows from `offset`, read lazily."""

from __future__ import annotations

import itertools

import pytest
from kinetic.api.jobs import page_of


@pytest.mark.parametrize(
    "limit, offset, expected",
    [
        (3, 0, [0, 1, 2]),
        (3, 8, [8, 9]),
        (3, 10, []),
        (None, 7, [7, 8, 9]),
        (0, 0, []),
    ],
)
def test_a_page(limit, offset, expected):
    assert page_of(range(10), limit, offset) == expected


def test_a_page_of_an_endless_listing_reads_only_what_it_returns():
    read: list[int] = []

    def rows():
        for i in itertools.count():
            read.append(i)
            yield i

    assert page_of(rows(), 2, 1_000) == [1_000, 1_001]
    assert len(read) == 1_002


@pytest.mark.parametrize("limit, offset", [(-1, 0), (1, -1)])
def test_negative_bounds_are_refused_naming_both(limit, offset):
    with pytest.raises(ValueError, match="limit and offset must be 0 or more"):
        page_of([], limit, offset)
