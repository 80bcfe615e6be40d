"""RangeSet: sorted, merged half-open ranges (SACK scoreboards and reassembly)."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from tierwise.proto import RangeSet


def test_add_keeps_ranges_sorted_and_disjoint():
    """Ranges added out of order come back sorted."""
    rs = RangeSet()
    rs.add(20, 30)
    rs.add(0, 5)
    rs.add(10, 12)
    assert list(rs) == [(0, 5), (10, 12), (20, 30)]
    assert len(rs) == 3


def test_add_merges_overlapping_and_touching_ranges():
    """Overlap merges; so does touching, [0, 10) + [10, 20) = [0, 20)."""
    rs = RangeSet([(0, 10), (20, 30)])
    rs.add(5, 12)
    assert list(rs) == [(0, 12), (20, 30)]
    rs.add(12, 20)
    assert list(rs) == [(0, 30)]


def test_add_bridges_several_ranges():
    """One wide range swallows every range it covers or touches."""
    rs = RangeSet([(0, 2), (4, 6), (8, 10), (20, 22)])
    rs.add(1, 8)
    assert list(rs) == [(0, 10), (20, 22)]


def test_add_of_an_empty_range_is_ignored():
    """``end <= start`` adds nothing."""
    rs = RangeSet()
    rs.add(5, 5)
    rs.add(7, 3)
    assert not rs
    assert list(rs) == []


def test_subtract_below_drops_and_trims():
    """Whole ranges below the point go; a range straddling it is cut at the point."""
    rs = RangeSet([(0, 10), (20, 30), (40, 50)])
    rs.subtract_below(25)
    assert list(rs) == [(25, 30), (40, 50)]
    rs.subtract_below(30)
    assert list(rs) == [(40, 50)]
    rs.subtract_below(5)
    assert list(rs) == [(40, 50)]


def test_contains_is_half_open():
    """Start is in, end is out."""
    rs = RangeSet([(10, 20)])
    assert [rs.contains(v) for v in (9, 10, 19, 20)] == [False, True, True, False]


def test_covered_needs_one_range_to_hold_it_all():
    """A span across a gap is not covered, even if both ends are."""
    rs = RangeSet([(0, 10), (11, 20)])
    assert rs.covered(0, 10)
    assert rs.covered(12, 20)
    assert not rs.covered(5, 15)
    assert not rs.covered(15, 21)
    assert not RangeSet().covered(0, 1)


def test_bytes_above_counts_only_the_part_above():
    """Bytes at or above the point, across ranges."""
    rs = RangeSet([(0, 10), (20, 30)])
    assert rs.bytes_above(0) == 20
    assert rs.bytes_above(5) == 15
    assert rs.bytes_above(25) == 5
    assert rs.bytes_above(30) == 0


def test_first_start_and_pop_first():
    """The lowest range can be read and popped only where it starts."""
    rs = RangeSet([(10, 20), (30, 40)])
    assert rs.first_start() == 10
    assert rs.pop_first_if_starts_at(5) is None
    assert rs.pop_first_if_starts_at(10) == 20
    assert list(rs) == [(30, 40)]
    assert RangeSet().first_start() is None


def test_blocks_are_highest_first_and_limited():
    """``blocks(limit)`` reports at most ``limit`` ranges, highest first."""
    rs = RangeSet([(0, 1), (2, 3), (4, 5), (6, 7)])
    assert rs.blocks(3) == ((6, 7), (4, 5), (2, 3))
    assert rs.blocks(10) == ((6, 7), (4, 5), (2, 3), (0, 1))
    assert RangeSet().blocks() == ()


def test_repr_shows_the_ranges():
    """The repr lists the ranges."""
    assert repr(RangeSet([(1, 2)])) == "RangeSet([(1, 2)])"


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 60), st.integers(0, 60)),
        st.tuples(st.just("cut"), st.integers(0, 60), st.just(0)),
    ),
    max_size=30,
)


@given(ops)
def test_matches_a_set_of_integers(operations):
    """Any sequence of add/subtract_below agrees with a Python set of integers."""
    rs, ref = RangeSet(), set()
    for op, a, b in operations:
        if op == "add":
            rs.add(a, b)
            ref |= set(range(a, b))
        else:
            rs.subtract_below(a)
            ref = {v for v in ref if v >= a}
    ranges = list(rs)
    assert {v for s, e in ranges for v in range(s, e)} == ref
    # Sorted, non-empty, disjoint and non-adjacent: the representation is canonical.
    assert all(s < e for s, e in ranges)
    assert all(e1 < s2 for (_, e1), (s2, _) in pairwise(ranges))
    assert all(rs.contains(v) == (v in ref) for v in range(-1, 62))
    assert rs.bytes_above(20) == len([v for v in ref if v >= 20])


@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=10),
    st.integers(0, 40),
    st.integers(1, 10),
)
def test_covered_matches_a_set(adds, start, width):
    """``covered(a, b)`` holds exactly when every integer of [a, b) is in the set."""
    rs, ref = RangeSet(), set()
    for a, b in adds:
        rs.add(a, b)
        ref |= set(range(a, b))
    assert rs.covered(start, start + width) == set(range(start, start + width)).issubset(ref)


def _members(rs: RangeSet) -> set[int]:
    return {v for s, e in rs for v in range(s, e)}


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 300), st.integers(1, 4)),
            st.tuples(st.just("cut"), st.integers(0, 300), st.just(0)),
            st.tuples(st.just("pop"), st.just(0), st.just(0)),
        ),
        max_size=200,
    ),
    st.integers(-1, 305),
    st.integers(1, 12),
)
def test_lookups_match_a_set_after_removals_from_the_bottom(operations, probe, width):
    """range_containing, uncovered, reversed and len agree with a set, dead prefix or not."""
    rs, ref = RangeSet(), set()
    for op, a, b in operations:
        if op == "add":
            rs.add(a, a + b)
            ref |= set(range(a, a + b))
        elif op == "cut":
            rs.subtract_below(a)
            ref = {v for v in ref if v >= a}
        elif (first := rs.first_start()) is not None:
            end = rs.pop_first_if_starts_at(first)
            ref -= set(range(first, end))
    assert _members(rs) == ref
    assert list(reversed(rs)) == list(rs)[::-1] and len(rs) == len(list(rs))
    hit = rs.range_containing(probe)
    assert (hit is not None) == (probe in ref)
    assert hit is None or (hit in list(rs) and hit[0] <= probe < hit[1])
    gaps = rs.uncovered(probe, probe + width)
    assert {v for s, e in gaps for v in range(s, e)} == set(range(probe, probe + width)) - ref
    assert all(s < e for s, e in gaps) and gaps == sorted(gaps)
    assert rs.uncovered(probe, probe) == [] and rs.uncovered(probe + width, probe) == []


def test_many_removals_from_the_bottom_compact_and_keep_the_rest():
    """Popping most of 1,000 ranges one by one leaves exactly the others, in order."""
    rs = RangeSet([(10 * i, 10 * i + 5) for i in range(1000)])
    for i in range(900):
        assert rs.pop_first_if_starts_at(10 * i) == 10 * i + 5
    assert len(rs) == 100 and rs.first_start() == 9000
    rs.add(8000, 9001)
    rs.subtract_below(9500)
    assert list(rs)[:2] == [(9500, 9505), (9510, 9515)] and len(rs) == 50
    assert rs.blocks(2) == ((9990, 9995), (9980, 9985))
