"""A set of half-open byte ranges ``[start, end)``, kept sorted and merged (SACK blocks).

Two parallel sorted lists (starts and ends) searched with :mod:`bisect`, so finding
the range that holds a byte, or the first range above a point, is O(log n). Ranges
leave mostly from the bottom (cumulative ACKs, in-order delivery): the lists keep
a head index instead of deleting their first element, and drop the dead prefix in
one step once it is half the list, so removing from the bottom is O(1) amortised.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

__all__ = ["RangeSet"]

_COMPACT_MIN = 64  # dead prefix entries tolerated before compaction is considered


class RangeSet:
    """Sorted, disjoint, non-adjacent half-open ranges of integers."""

    __slots__ = ("_ends", "_head", "_starts")

    def __init__(self, ranges: list[tuple[int, int]] | None = None) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._head = 0  # entries before it are dead
        for start, end in ranges or ():
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        """Add ``[start, end)``, merging with overlapping or touching ranges."""
        if end <= start:
            return
        starts, ends = self._starts, self._ends
        n = len(starts)
        if n == self._head or start > ends[-1]:
            starts.append(start)  # the usual case: above everything held
            ends.append(end)
            return
        i = bisect_left(ends, start, self._head)  # first range that ends at/after start
        j = i
        while j < n and starts[j] <= end:
            j += 1
        if j > i:
            start = min(start, starts[i])
            end = max(end, ends[j - 1])
        starts[i:j] = [start]
        ends[i:j] = [end]

    def subtract_below(self, point: int) -> None:
        """Drop everything below ``point`` (data that became cumulatively acknowledged)."""
        starts, ends = self._starts, self._ends
        head = self._head
        if head < len(starts) and ends[head] <= point:
            head = bisect_right(ends, point, head)
            self._drop_to(head)
            head = self._head
        if head < len(starts) and starts[head] < point:
            starts[head] = point

    def _drop_to(self, head: int) -> None:
        if head >= _COMPACT_MIN and 2 * head >= len(self._starts):
            del self._starts[:head], self._ends[:head]
            head = 0
        self._head = head

    def contains(self, value: int) -> bool:
        i = bisect_left(self._ends, value + 1, self._head)
        return i < len(self._starts) and self._starts[i] <= value

    def covered(self, start: int, end: int) -> bool:
        """Whether all of ``[start, end)`` is in the set."""
        i = bisect_left(self._ends, end, self._head)
        return i < len(self._starts) and self._starts[i] <= start

    def range_containing(self, value: int) -> tuple[int, int] | None:
        """The range that holds ``value``, or None."""
        i = bisect_right(self._starts, value, self._head) - 1
        if i >= self._head and value < self._ends[i]:
            return self._starts[i], self._ends[i]
        return None

    def uncovered(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of ``[start, end)`` not in the set, in order (none if it is empty).

        O(log n + k) for k ranges overlapping it: a search, not a walk from the bottom.
        """
        starts, ends = self._starts, self._ends
        out: list[tuple[int, int]] = []
        if start >= end:
            return out
        i, n = bisect_right(ends, start, self._head), len(starts)
        while i < n and starts[i] < end:
            if starts[i] > start:
                out.append((start, starts[i]))
            start = ends[i]
            if start >= end:
                return out
            i += 1
        out.append((start, end))
        return out

    def bytes_above(self, point: int) -> int:
        """Bytes in the set at or above ``point``."""
        i = bisect_right(self._ends, point, self._head)
        return sum(e - max(s, point) for s, e in zip(self._starts[i:], self._ends[i:], strict=True))

    def first_start(self) -> int | None:
        return self._starts[self._head] if self._head < len(self._starts) else None

    def pop_first_if_starts_at(self, point: int) -> int | None:
        """If a range starts at ``point``, remove it and return its end."""
        head = self._head
        if head < len(self._starts) and self._starts[head] == point:
            end = self._ends[head]
            self._drop_to(head + 1)
            return end
        return None

    def blocks(self, limit: int = 3) -> tuple[tuple[int, int], ...]:
        """Up to ``limit`` ranges, highest first (as a receiver reports SACK blocks)."""
        out: list[tuple[int, int]] = []
        for r in reversed(self):
            if len(out) == limit:
                break
            out.append(r)
        return tuple(out)

    def __reversed__(self) -> Iterator[tuple[int, int]]:
        starts, ends = self._starts, self._ends
        for i in range(len(starts) - 1, self._head - 1, -1):
            yield starts[i], ends[i]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        h = self._head
        return iter(zip(self._starts[h:], self._ends[h:], strict=True))

    def __len__(self) -> int:
        return len(self._starts) - self._head

    def __bool__(self) -> bool:
        return len(self._starts) > self._head

    def __repr__(self) -> str:
        return f"RangeSet({list(self)})"
