"""Range strings: canonical formatting, strict parsing, set algebra, speed at 100k."""

from __future__ import annotations

import random

import pytest
from kinetic.model.ranges import IndexSet, RangeError, format_ranges, parse_ranges


@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        ([], ""),
        ([0], "0"),
        ([0, 1], "0-1"),
        ([0, 1, 2, 3, 4, 7, 9, 10, 11, 12], "0-4,7,9-12"),
        ([12, 9, 7, 4, 3, 2, 1, 0, 11, 10, 10, 0], "0-4,7,9-12"),
        ([5], "5"),
        ([1, 3, 5], "1,3,5"),
        (range(100_000), "0-99999"),
    ],
)
def test_format_and_parse_round_trip(indexes, text):
    assert format_ranges(indexes) == text
    assert parse_ranges(text) == sorted(set(indexes))


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("a", "item 1"),
        ("1,,2", "item 2"),
        ("1,", "item 2"),
        ("-1", "item 1"),
        ("01", "leading zeros"),
        ("1-01", "leading zeros"),
        ("3-3", "start below its end"),
        ("4-2", "start below its end"),
        ("1-2-3", "item 1"),
        ("3,1", "must start above 4"),
        ("0-2,3", "never overlap or touch"),
        ("0-5,4-8", "never overlap or touch"),
        ("1, 2", "item 2"),
        ("+1", "item 1"),
        ("1.5", "item 1"),
    ],
)
def test_parse_is_strict_and_says_why(text, complaint):
    with pytest.raises(RangeError) as e:
        parse_ranges(text)
    assert complaint in str(e.value)
    assert repr(text) in str(e.value)


def test_parse_tolerates_surrounding_whitespace_and_none():
    assert parse_ranges("  0-2 \n") == [0, 1, 2]
    assert parse_ranges(None) == []
    assert parse_ranges("   ") == []


def test_range_error_is_a_value_error():
    assert issubclass(RangeError, ValueError)


def test_rejects_negative_and_non_integers():
    with pytest.raises(ValueError, match="non-negative"):
        IndexSet([3, -1])
    with pytest.raises(TypeError):
        IndexSet([1.5])
    with pytest.raises(ValueError):
        IndexSet.range(-1, 3)


def test_queries():
    s = IndexSet.parse("0-4,7,9-12")
    assert len(s) == 10
    assert bool(s) and not bool(IndexSet())
    assert 0 in s and 4 in s and 7 in s and 12 in s
    assert 5 not in s and 8 not in s and 13 not in s and -1 not in s and "3" not in s
    assert list(s) == [0, 1, 2, 3, 4, 7, 9, 10, 11, 12]
    assert s.min() == 0 and s.max() == 12
    assert IndexSet().min() is None and IndexSet().max() is None
    assert s.intervals == [(0, 4), (7, 7), (9, 12)]
    assert repr(s) == "IndexSet('0-4,7,9-12')"


def test_first():
    s = IndexSet.parse("0-4,7,9-12")
    assert str(s.first(0)) == ""
    assert str(s.first(3)) == "0-2"
    assert str(s.first(5)) == "0-4"
    assert str(s.first(6)) == "0-4,7"
    assert str(s.first(8)) == "0-4,7,9-10"
    assert s.first(100) == s
    assert str(IndexSet.range(0, 10**9).first(2)) == "0-1"


def test_immutable_add_and_algebra():
    s = IndexSet.parse("0-4,7")
    t = s.add(5, 6)
    assert str(s) == "0-4,7"  # unchanged
    assert str(t) == "0-7"
    assert str(s | [8, 9]) == "0-4,7-9"
    assert str(s - [2, 7]) == "0-1,3-4"
    assert str(s & IndexSet.range(3, 100)) == "3-4,7"
    assert str(IndexSet.range(0, 10) - IndexSet.parse("0,2-3,9")) == "1,4-8"
    assert str(IndexSet.range(0, 10) - IndexSet.range(0, 10)) == ""
    assert str(IndexSet().union()) == ""
    assert s.isdisjoint([5, 6]) and not s.isdisjoint([7])
    assert IndexSet(s) == s and hash(IndexSet(s)) == hash(s)
    assert IndexSet.range(5, 5) == IndexSet()


@pytest.mark.parametrize("seed", range(40))
def test_algebra_matches_python_sets(seed):
    rng = random.Random(seed)
    a = {rng.randrange(200) for _ in range(rng.randrange(120))}
    b = {rng.randrange(200) for _ in range(rng.randrange(120))}
    A, B = IndexSet(a), IndexSet(b)
    assert set(A | B) == a | b
    assert set(A - B) == a - b
    assert set(A & B) == a & b
    assert len(A) == len(a)
    assert IndexSet.parse(str(A)) == A
    assert parse_ranges(format_ranges(a)) == sorted(a)
    for i in range(-2, 205):
        assert (i in A) == (i in a)
    n = rng.randrange(len(a) + 2)
    assert list(A.first(n)) == sorted(a)[:n]


@pytest.mark.timeout(60)  # catches a runaway; speed itself is for the benchmarks
def test_100k_indexes_round_trip():
    rng = random.Random(1)
    indexes = list(range(100_000))
    rng.shuffle(indexes)
    evens = [i for i in indexes if i % 2 == 0]
    full = IndexSet(indexes)
    text = format_ranges(evens)  # worst case: 50k separate items
    back = IndexSet.parse(text)
    rest = full - back
    both = back | rest
    assert all(i in back for i in range(0, 1000, 2))
    assert str(full) == "0-99999"
    assert len(back) == 50_000 and len(rest) == 50_000 and both == full
    assert text.count(",") == 49_999
